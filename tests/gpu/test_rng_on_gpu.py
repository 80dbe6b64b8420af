"""``rng`` on a GPU: the top-p nucleus and the top-k / top-p floors are row-local, where PyTorch's own scan is not;
seeds and plain draws never make the host wait for the GPU, a top-p draw once."""

import warnings

import pytest
import torch

from corun_sglang.serving import sampling_kernels


def test_nucleus_is_row_local_where_torch_cumsum_follows_the_batch():
    g = torch.Generator(device="cuda").manual_seed(0)
    rows, width = 256, 1024
    logits = torch.randn(rows, 151936, device="cuda", generator=g) * 3
    top = torch.softmax(logits, -1).topk(width, dim=-1).values  # descending, as the sampler ranks them
    alone = torch.cat([torch.cumsum(top[i : i + 1], -1) for i in range(rows)])
    # negative control: PyTorch sizes its scan's blocks by the number of rows, so a row's prefix
    # sums change with the batch around it
    assert not torch.equal(torch.cumsum(top, -1), alone)
    # p exactly on a row's exclusive prefix sum (as computed alone): the nucleus boundary itself
    pos = torch.randint(1, width, (rows,), device="cuda", generator=g)
    ps = (alone - top).gather(1, pos.view(-1, 1)).squeeze(1)
    single = torch.cat([sampling_kernels._nucleus(top[i : i + 1], ps[i : i + 1]) for i in range(rows)])
    assert torch.equal(sampling_kernels._nucleus(top, ps), single)
    assert torch.equal(sampling_kernels._nucleus(top.flip(0), ps.flip(0)), single.flip(0))


def test_softmax_rows_are_slot_invariant_where_torch_is_not():
    vocab = 50257  # rows of 201,028 bytes: row starts fall at every 4-byte offset modulo 16
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(9, vocab, device="cuda", generator=g) * 4
    shifted = torch.cat([x[-1:], x[:-1]])  # every row one slot further
    # negative control: PyTorch's vectorised reduction starts at the row's alignment
    assert not torch.equal(torch.log_softmax(shifted, -1)[1:], torch.log_softmax(x, -1)[:-1])
    for log in (False, True):
        assert torch.equal(sampling_kernels.softmax_rows(shifted, log=log)[1:], sampling_kernels.softmax_rows(x, log=log)[:-1])


def test_floors_are_row_local_in_any_batch_with_any_filters():
    g = torch.Generator(device="cuda").manual_seed(2)
    rows, vocab = 256, 151936
    scaled = torch.randn(rows, vocab, device="cuda", generator=g) * 3 / 0.6
    ks = torch.randint(0, 200, (rows,), device="cuda", generator=g).to(torch.int32)  # 0: no top-k
    ps = torch.rand(rows, device="cuda", generator=g).clamp(min=0.05)
    ps[::4] = 1.0  # top-k only
    nothing = torch.zeros(rows, device="cuda")
    full = sampling_kernels.floors(scaled, ks, ps, nothing)
    # negative control: the sorted-probability prefix sums a batch-wide top-p computes follow the batch
    ordered = torch.softmax(scaled, -1).sort(-1, descending=True).values
    alone_sums = torch.cat([torch.cumsum(ordered[i : i + 1], -1) for i in range(rows)])
    assert not torch.equal(torch.cumsum(ordered, -1), alone_sums)
    del ordered, alone_sums
    alone = torch.cat([sampling_kernels.floors(scaled[i : i + 1], ks[i : i + 1], ps[i : i + 1], nothing[i : i + 1])
                       for i in range(rows)])
    assert torch.equal(full, alone)
    order = torch.randperm(rows, device="cuda", generator=g)
    assert torch.equal(sampling_kernels.floors(scaled[order], ks[order], ps[order], nothing[order]), full[order])
    # every row's floor keeps between 1 and its k tokens (a real filter, not -inf everywhere);
    # k = 1 rows are greedy: the sampler takes their arg-max, so top-k sets no floor for them
    kept = (scaled >= full.view(-1, 1)).sum(-1)
    assert bool((kept >= 1).all()) and bool((kept[ks > 1] <= ks[ks > 1]).all())


def test_request_seeds_and_plain_sampling_never_wait_for_the_gpu():
    # the scheduler builds a batch's seeds while the previous batch runs: neither they nor a
    # temperature-only draw may make the host wait for the GPU's queued work
    rows, vocab = 64, 151936
    logits = torch.randn(rows, vocab, device="cuda")
    temps = torch.full((rows,), 0.7, device="cuda")
    seeds = sampling_kernels.seeds_of(range(rows), "cuda")
    positions = torch.arange(rows, device="cuda")
    none_k, none_p, none_min = (torch.full((rows,), v, device="cuda") for v in (vocab, 1.0, 0.0))
    sampling_kernels.sample(logits, temps, seeds, positions, none_k, none_p, none_min, False, False, False)  # compile first
    torch.cuda.synchronize()
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        # negative control: a plain host-to-device tensor waits for the GPU
        with pytest.raises(RuntimeError, match="synchroniz"):
            torch.tensor([1, 2, 3], device="cuda")
        again = sampling_kernels.seeds_of(range(rows), "cuda")
        ids = sampling_kernels.sample(logits, temps, again, positions, none_k, none_p, none_min, False, False, False)
    finally:
        torch.cuda.set_sync_debug_mode(before)
    assert torch.equal(again, seeds) and ids.shape == (rows,)


def test_a_top_p_draw_waits_for_the_gpu_once():
    # what is left: which rows no cut serves (their whole row is sorted) is read on the host
    rows, vocab = 64, 151936
    logits = torch.randn(rows, vocab, device="cuda") * 3
    temps = torch.full((rows,), 0.7, device="cuda")
    seeds, positions = sampling_kernels.seeds_of(range(rows), "cuda"), torch.arange(rows, device="cuda")
    none_k, top_p, none_min = (torch.full((rows,), v, device="cuda") for v in (vocab, 0.9, 0.0))
    sampling_kernels.sample(logits, temps, seeds, positions, none_k, top_p, none_min, False, True, False)  # compile first
    torch.cuda.synchronize()
    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            torch.tensor([1, 2, 3], device="cuda")  # negative control: one wait, seen
            control = sum("synchroniz" in str(w.message) for w in caught)
            sampling_kernels.sample(logits, temps, seeds, positions, none_k, top_p, none_min, False, True, False)
        finally:
            torch.cuda.set_sync_debug_mode(before)
    waits = sum("synchroniz" in str(w.message) for w in caught)
    assert control == 1 and waits - control == 1
