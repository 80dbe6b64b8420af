"""``moe_padding``: the padding rows of a forward, from SGLang's real token count, get no expert."""

import torch

from corun_sglang.core import moe_padding


def _ids(rows: int) -> torch.Tensor:
    return torch.arange(rows * 4, dtype=torch.int32).reshape(rows, 4) % 128


def test_rows_past_the_real_count_are_padding():
    # a graph buffer (shape (1,)) or an eager batch's count (a 0-dim tensor)
    for count in (torch.tensor([3], dtype=torch.int32), torch.tensor(3, dtype=torch.int32)):
        assert moe_padding.rows(5, count).squeeze(1).tolist() == [False, False, False, True, True]
    assert not moe_padding.rows(3, torch.tensor(3)).any()  # no padding
    assert moe_padding.rows(5, None) is None  # SGLang gave no count


def test_only_the_padding_rows_lose_their_experts():
    ids = _ids(5)
    before = ids.clone()
    with moe_padding.forward(moe_padding.rows(5, torch.tensor([3]))):
        assert moe_padding.mask(ids)
    assert torch.equal(ids[:3], before[:3])
    assert (ids[3:] == moe_padding.UNROUTED).all()


def test_nothing_changes_outside_a_forward_or_in_a_layer_of_another_size():
    ids = _ids(5)
    before = ids.clone()
    assert not moe_padding.mask(ids)  # no forward set a mask
    with moe_padding.forward(moe_padding.rows(8, torch.tensor([3]))):
        assert not moe_padding.mask(ids)  # this layer's rows are not the forward's
        with moe_padding.forward(None):
            assert not moe_padding.mask(_ids(8))  # a nested forward without a count
        assert moe_padding.mask(_ids(8))  # the outer forward's mask again
    assert not moe_padding.mask(_ids(8))
    assert torch.equal(ids, before)
