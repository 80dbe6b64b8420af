"""``rng``: the request-bound sampling kernel (run by Triton's interpreter on CPU)."""


import pytest
import torch

from corun_sglang.core import seeds
from corun_sglang.serving import sampling_kernels

ALL = 1 << 30


def _batch(rows, vocab, seed=0, temperature=0.7):
    g = torch.Generator().manual_seed(seed)
    return {
        "logits": torch.randn(rows, vocab, generator=g) * 3,
        "temperatures": torch.full((rows, 1), temperature),
        "seeds": torch.arange(rows, dtype=torch.int64) * 7919 + 11,
        "positions": torch.arange(rows, dtype=torch.int64) + 100,
        "top_ks": torch.full((rows,), ALL, dtype=torch.int32),
        "top_ps": torch.ones(rows),
        "min_ps": torch.zeros(rows),
    }


def _take(batch, index):
    return {k: v[index] for k, v in batch.items()}


def _sample(batch):
    return sampling_kernels.sample(**batch)


# ------------------------------------------------------------------ row invariance


def test_rows_identical_under_permutation_subset_and_padding():
    batch = _batch(9, 300)
    batch["top_ks"][1] = 1  # greedy
    batch["top_ks"][2] = 5
    batch["top_ps"][3] = 0.8
    batch["min_ps"][4] = 0.2
    full = _sample(batch)

    perm = torch.tensor([8, 3, 0, 5, 1, 7, 2, 6, 4])
    assert torch.equal(_sample(_take(batch, perm)), full[perm])

    subset = torch.tensor([4, 1])
    assert torch.equal(_sample(_take(batch, subset)), full[subset])

    padded = {k: torch.cat([v, v[:1].expand(*([7] + list(v.shape[1:])))]) for k, v in batch.items()}
    padded["logits"][9:] = torch.randn(7, 300)
    assert torch.equal(_sample(padded)[:9], full)


def test_a_rows_draw_depends_on_seed_and_position_only():
    batch = _batch(2, 300, temperature=5.0)
    a = _sample(batch)
    moved = dict(batch, seeds=batch["seeds"].flip(0), positions=batch["positions"].flip(0),
                 logits=batch["logits"].flip(0))
    assert torch.equal(_sample(moved), a.flip(0))
    draws = {int(_sample(dict(batch, positions=batch["positions"] + t))[0]) for t in range(20)}
    assert len(draws) > 1  # different steps draw differently


def test_greedy_rows_take_the_first_maximum():
    batch = _batch(3, 64)
    batch["top_ks"][:] = 1
    batch["logits"][0, 10] = batch["logits"][0, 20] = 100.0
    out = _sample(batch)
    assert out[0] == 10
    assert torch.equal(out[1:], batch["logits"][1:].argmax(-1).to(torch.int32))


# ------------------------------------------------------------------ distribution


def _draws(logits, temperature, n, **filters):
    rows = n
    batch = {
        "logits": logits.expand(rows, -1).contiguous(),
        "temperatures": torch.full((rows, 1), temperature),
        "seeds": torch.full((rows,), 5, dtype=torch.int64),
        "positions": torch.arange(rows, dtype=torch.int64),
        "top_ks": torch.full((rows,), filters.get("top_k", ALL), dtype=torch.int32),
        "top_ps": torch.full((rows,), filters.get("top_p", 1.0)),
        "min_ps": torch.full((rows,), filters.get("min_p", 0.0)),
    }
    return torch.bincount(_sample(batch).long(), minlength=logits.numel())


def _chi_square(counts, probs):
    n = counts.sum().item()
    keep = probs > 0
    expected = probs[keep] * n
    return float(((counts[keep] - expected) ** 2 / expected).sum()), int(keep.sum()) - 1


def test_samples_follow_softmax_of_logits_over_temperature():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, 1.5])
    counts = _draws(logits, 0.8, 2000)
    probs = torch.softmax(logits / 0.8, -1)
    stat, dof = _chi_square(counts.double(), probs.double())
    assert stat < 24.3, (stat, counts)  # chi-square 0.999 quantile at 7 dof


@pytest.mark.parametrize(
    "filters,support",
    [({"top_k": 3}, [0, 1, 7]), ({"top_p": 0.5}, [0, 7]), ({"min_p": 0.3}, [0, 1, 7])],
)
def test_filters_restrict_support_and_renormalise(filters, support):
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, 1.5])
    counts = _draws(logits, 1.0, 800, **filters)
    assert set(counts.nonzero().flatten().tolist()) == set(support)
    probs = torch.zeros(8, dtype=torch.double)
    probs[support] = torch.softmax(logits[support].double(), -1)
    stat, dof = _chi_square(counts.double(), probs)
    assert stat < {1: 10.9, 2: 13.9}[dof], (stat, counts)


def test_candidates_and_full_sort_agree(monkeypatch):
    batch = _batch(4, 500, temperature=3.0)  # flat: most nuclei are wider than 16 candidates
    batch["top_ps"][:] = torch.tensor([0.95, 0.5, 0.99, 0.2])
    scaled = batch["logits"] / batch["temperatures"]
    wide = sampling_kernels.floors(scaled, batch["top_ks"], batch["top_ps"], batch["min_ps"])
    monkeypatch.setattr(sampling_kernels, "TOP_CANDIDATES", 16)
    narrow = sampling_kernels.floors(scaled, batch["top_ks"], batch["top_ps"], batch["min_ps"])
    assert torch.equal(wide, narrow)


def test_greedy_rows_get_no_floor():
    batch = _batch(3, 50)
    batch["top_ks"][:] = torch.tensor([1, 5, ALL], dtype=torch.int32)
    scaled = batch["logits"] / batch["temperatures"]
    fl = sampling_kernels.floors(scaled, batch["top_ks"], batch["top_ps"], batch["min_ps"])
    assert fl[0] == -float("inf") and fl[2] == -float("inf")
    assert fl[1] == scaled[1].topk(5).values[-1]


# ------------------------------------------------------------------ the top-p nucleus


def _reference_floor(scaled_row, k, p):
    """float64: the smallest scaled logit kept by top-k (k >= vocab: none) and top-p together."""
    ordered = scaled_row.double().sort(descending=True).values
    probs = torch.softmax(scaled_row.double(), -1).sort(descending=True).values
    exclusive = probs.cumsum(0) - probs
    kept = max(1, int((exclusive <= p).sum()))
    return float(ordered[min(kept, k) - 1])


def test_nucleus_counts_the_exclusive_prefix_within_p():
    probs = torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.9, 0.05, 0.05, 0.0], [0.25, 0.25, 0.25, 0.25]])
    ps = torch.tensor([0.7, 0.5, 0.6])
    assert sampling_kernels._nucleus(probs, ps).tolist() == [2, 1, 3]  # 0, .5 | 0 | 0, .25, .5 kept


def test_a_rows_nucleus_does_not_depend_on_its_width_or_the_other_rows():
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(6, 3000, generator=g) * 2, -1).sort(-1, descending=True).values
    ps = torch.tensor([0.5, 0.9, 0.95, 0.99, 0.3, 0.999])
    alone = [int(sampling_kernels._nucleus(probs[i : i + 1], ps[i : i + 1])) for i in range(6)]
    assert sampling_kernels._nucleus(probs, ps).tolist() == alone
    assert sampling_kernels._nucleus(probs[[3, 1]], ps[[3, 1]]).tolist() == [alone[3], alone[1]]
    # columns beyond every nucleus change nothing (the top-k path passes the batch's widest k)
    assert sampling_kernels._nucleus(probs[:, :2900], ps).tolist() == alone


def test_top_k_and_top_p_together_keep_their_intersection():
    batch = _batch(5, 4000, seed=7, temperature=1.0)
    batch["top_ks"][:] = torch.tensor([20, 400, 3, ALL, 50], dtype=torch.int32)
    batch["top_ps"][:] = torch.tensor([0.9, 0.3, 0.95, 0.5, 1.0])
    scaled = batch["logits"] / batch["temperatures"]
    fl = sampling_kernels.floors(scaled, batch["top_ks"], batch["top_ps"], batch["min_ps"])
    for i, (k, p) in enumerate(zip(batch["top_ks"].tolist(), batch["top_ps"].tolist())):
        assert fl[i].item() == pytest.approx(_reference_floor(scaled[i], min(k, 4000), p), abs=0), i


@pytest.mark.parametrize("candidates", [16, 1024, 3000])
def test_floors_match_the_reference_whichever_way_a_row_is_served(monkeypatch, candidates):
    # rows served by their k best tokens (flat, k small), by their nucleus (peaked, k large or
    # none), by both, or sorted whole (few candidates, or a nucleus wider than them)
    g = torch.Generator().manual_seed(5)
    temps = torch.tensor([3.0, 3.0, 0.3, 0.3, 1.0, 1.0, 0.5, 2.0])
    ks = torch.tensor([20, ALL, 900, 40, 7, 2999, ALL, 3], dtype=torch.int32)
    ps = torch.tensor([0.99, 0.9, 0.3, 0.95, 0.5, 0.8, 0.2, 1.0])
    scaled = (torch.randn(8, 3000, generator=g) * 3) / temps.view(-1, 1)
    scaled[4, 2500:] = -float("inf")  # tokens a row can never take
    monkeypatch.setattr(sampling_kernels, "TOP_CANDIDATES", candidates)
    fl = sampling_kernels.floors(scaled, ks, ps, torch.zeros(8))
    for i in range(8):
        assert fl[i].item() == _reference_floor(scaled[i], min(int(ks[i]), 3000), float(ps[i])), i


def test_floors_match_the_reference_across_many_vocabulary_chunks():
    # 40,000 tokens make 10 chunks: each row's candidates are gathered from every chunk that holds some
    g = torch.Generator().manual_seed(6)
    temps = torch.tensor([3.0, 0.3, 1.0, 2.0])
    ks = torch.tensor([900, ALL, 50, 7], dtype=torch.int32)
    ps = torch.tensor([0.99, 0.9, 1.0, 0.5])
    scaled = (torch.randn(4, 40000, generator=g) * 3) / temps.view(-1, 1)
    assert sampling_kernels._chunking(40000)[2] == 10
    fl = sampling_kernels.floors(scaled, ks, ps, torch.zeros(4))
    for i in range(4):
        assert fl[i].item() == _reference_floor(scaled[i], min(int(ks[i]), 40000), float(ps[i])), i


def test_a_rows_floor_does_not_depend_on_the_other_rows_filters():
    batch = _batch(4, 2000, seed=11, temperature=0.8)
    batch["top_ks"][:] = torch.tensor([20, 300, ALL, 5], dtype=torch.int32)  # k-max 300 with row 1
    batch["top_ps"][:] = torch.tensor([0.7, 0.9, 0.8, 1.0])
    scaled = batch["logits"] / batch["temperatures"]
    full = sampling_kernels.floors(scaled, batch["top_ks"], batch["top_ps"], batch["min_ps"])
    for i in range(4):
        one = _take(batch, torch.tensor([i]))
        alone = sampling_kernels.floors(scaled[i : i + 1], one["top_ks"], one["top_ps"], one["min_ps"])
        assert torch.equal(alone, full[i : i + 1]), i
    assert torch.equal(_sample(batch)[[0, 2]], _sample(_take(batch, torch.tensor([0, 2]))))


@pytest.mark.parametrize("vocab", [1000, 1001, 1003])
def test_softmax_rows_match_torch_for_any_row_length(vocab):
    x = torch.randn(3, vocab, generator=torch.Generator().manual_seed(vocab), dtype=torch.float64).to(torch.bfloat16)
    for log, ref in ((False, torch.softmax), (True, torch.log_softmax)):
        out = sampling_kernels.softmax_rows(x, log=log)
        assert out.shape == (3, vocab) and out.dtype == torch.float32 and out.is_contiguous()
        torch.testing.assert_close(out, ref(x.float(), dim=-1), rtol=1e-6, atol=1e-7)


def test_seeds_are_int64_under_the_seed_mask():
    values = sampling_kernels.seeds_of([7, -1, (1 << 64) + 5], "cpu")
    assert values.dtype == torch.int64 and values.tolist() == [7, seeds.SEED_MASK, 5]
