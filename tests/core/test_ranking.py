"""``ranking``: top-k in (value descending, token id ascending) order, fixed by each row alone."""

import struct

import pytest
import torch

from corun_sglang.core import ranking


def _tied(rows=6, width=512, seed=3):
    """Log-softmax rows of integer logits: every value repeats many times."""
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randint(0, 3, (rows, width), generator=g).float(), -1)


def _reference(row, k):
    """The order by definition: value descending (float32 bit order), then id ascending."""
    def key(i):
        bits = struct.unpack("<i", struct.pack("<f", float(row[i])))[0]
        return (-(bits if bits >= 0 else bits ^ 0x7FFFFFFF), i)

    return sorted(range(len(row)), key=key)[:k]


def test_rows_are_ranked_by_value_then_ascending_id():
    x = _tied()
    values, ids = ranking.top(x, 40)
    for r in range(x.shape[0]):
        assert ids[r].tolist() == _reference(x[r].tolist(), 40)
        assert torch.equal(values[r], x[r, ids[r]])


def test_values_are_torch_topks_bits():
    x = _tied()
    values, _ = ranking.top(x, 64)
    assert torch.equal(values.view(torch.int32), torch.topk(x, 64).values.view(torch.int32))


def test_a_rows_first_k_do_not_depend_on_the_largest_k_or_the_rows_beside_it(monkeypatch):
    x = _tied()
    _, alone = ranking.top(x[2:3], 1)
    for k in (1, 5, 64, 512):
        _, ids = ranking.top(x, k)
        assert ids[2, :1].tolist() == alone[0].tolist()
        assert torch.equal(ids[:, :1], ranking.top(x, 1)[1])
    whole = ranking.top(x, 64)[1]
    assert torch.equal(ranking.top(torch.cat([x[4:], x[:4]]), 64)[1][2:], whole[:4])  # rows reordered
    monkeypatch.setattr(ranking, "BLOCK_ELEMENTS", 512 * 2)  # rows ranked two at a time
    assert torch.equal(ranking.top(x, 64)[1], whole)


def test_negative_control_torch_topk_breaks_ties_by_the_largest_k():
    """The reason for ``ranking``: SGLang's one ``topk`` at the batch's largest k gives a k = 1 row another
    first id when a co-runner asks for more (here on the CPU kernel; the GPU kernels vary with the shape too)."""
    x = _tied()
    firsts = {k: torch.topk(x, k).indices[:, 0].tolist() for k in (1, 5, 64)}
    assert len({tuple(v) for v in firsts.values()}) > 1, firsts


def test_special_values_have_one_order():
    x = torch.tensor([[0.0, -0.0, 1.0, 1.0, float("-inf"), -3.0, float("nan"), float("inf")]])
    values, ids = ranking.top(x, 8)
    assert ids[0].tolist() == [6, 7, 2, 3, 0, 1, 5, 4]  # NaN (sign clear) above +inf, +0.0 before -0.0
    assert struct.pack("<f", values[0, 5].item()) == struct.pack("<f", -0.0)


def test_clamped_masked_rows_rank_their_ties_by_id():
    """A grammar-masked row: SGLang clamps its -inf to the float32 minimum, one value repeated."""
    x = torch.full((2, 64), torch.finfo(torch.float32).min)
    x[0, [40, 7]] = torch.tensor([-0.5, -1.5])
    _, ids = ranking.top(x, 6)
    assert ids[0].tolist() == [40, 7, 0, 1, 2, 3] and ids[1].tolist() == [0, 1, 2, 3, 4, 5]


def test_bf16_rows_keep_their_dtype_and_bits():
    x = _tied().to(torch.bfloat16)
    values, ids = ranking.top(x, 10)
    assert values.dtype == torch.bfloat16 and torch.equal(values, x.gather(-1, ids))


@pytest.mark.parametrize("k", [-1, 513])
def test_k_outside_the_row_is_refused(k):
    with pytest.raises(ValueError):
        ranking.top(_tied(), k)


def test_empty_inputs():
    values, ids = ranking.top(torch.zeros((0, 8)), 3)
    assert values.shape == (0, 3) and ids.shape == (0, 3)
    assert ranking.top(_tied(), 0)[1].shape == (6, 0)
