"""``rng`` on a GPU: the top-p nucleus and the top-k / top-p floors are row-local, where PyTorch's own scan is not."""

import torch

from corun_sglang import rng


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
    single = torch.cat([rng._nucleus(top[i : i + 1], ps[i : i + 1]) for i in range(rows)])
    assert torch.equal(rng._nucleus(top, ps), single)
    assert torch.equal(rng._nucleus(top.flip(0), ps.flip(0)), single.flip(0))


def test_softmax_rows_are_slot_invariant_where_torch_is_not():
    vocab = 50257  # rows of 201,028 bytes: row starts fall at every 4-byte offset modulo 16
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(9, vocab, device="cuda", generator=g) * 4
    shifted = torch.cat([x[-1:], x[:-1]])  # every row one slot further
    # negative control: PyTorch's vectorised reduction starts at the row's alignment
    assert not torch.equal(torch.log_softmax(shifted, -1)[1:], torch.log_softmax(x, -1)[:-1])
    for log in (False, True):
        assert torch.equal(rng.softmax_rows(shifted, log=log)[1:], rng.softmax_rows(x, log=log)[:-1])


def test_floors_are_row_local_in_any_batch_with_any_filters():
    g = torch.Generator(device="cuda").manual_seed(2)
    rows, vocab = 256, 151936
    scaled = torch.randn(rows, vocab, device="cuda", generator=g) * 3 / 0.6
    ks = torch.randint(0, 200, (rows,), device="cuda", generator=g).to(torch.int32)  # 0: no top-k
    ps = torch.rand(rows, device="cuda", generator=g).clamp(min=0.05)
    ps[::4] = 1.0  # top-k only
    nothing = torch.zeros(rows, device="cuda")
    full = rng.floors(scaled, ks, ps, nothing)
    # negative control: the sorted-probability prefix sums a batch-wide top-p computes follow the batch
    ordered = torch.softmax(scaled, -1).sort(-1, descending=True).values
    alone_sums = torch.cat([torch.cumsum(ordered[i : i + 1], -1) for i in range(rows)])
    assert not torch.equal(torch.cumsum(ordered, -1), alone_sums)
    del ordered, alone_sums
    alone = torch.cat([rng.floors(scaled[i : i + 1], ks[i : i + 1], ps[i : i + 1], nothing[i : i + 1])
                       for i in range(rows)])
    assert torch.equal(full, alone)
    order = torch.randperm(rows, device="cuda", generator=g)
    assert torch.equal(rng.floors(scaled[order], ks[order], ps[order], nothing[order]), full[order])
    # every row's floor keeps between 1 and its k tokens (a real filter, not -inf everywhere);
    # k = 1 rows are greedy: the sampler takes their arg-max, so top-k sets no floor for them
    kept = (scaled >= full.view(-1, 1)).sum(-1)
    assert bool((kept >= 1).all()) and bool((kept[ks > 1] <= ks[ks > 1]).all())
