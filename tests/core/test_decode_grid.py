"""The surplus blocks of a FlashInfer CUDA-graph decode plan point at one request of the batch."""

import pytest
import torch

from corun_sglang.core import decode_grid

from decode_plans import BATCH, OFFSETS, PADDED
from decode_plans import buffer as _buffer
from decode_plans import plan as _plan


def _array(buffer: torch.Tensor, name: str) -> list[int]:
    start = OFFSETS[name]
    return buffer[start:start + 4 * PADDED].view(torch.int32).tolist()


def test_surplus_blocks_are_those_past_the_batch_in_a_graph_plan_without_split_kv():
    assert decode_grid.surplus(_plan(), BATCH, group_size=4) == range(4, 7)
    assert decode_grid.surplus(_plan(split_kv=1), BATCH, 4) is None  # FlashInfer masks them itself
    assert decode_grid.surplus(_plan(enable_cuda_graph=0), BATCH, 4) is None  # an eager plan: no surplus
    assert decode_grid.surplus(_plan(), BATCH, group_size=32) is None  # two query tiles per request
    assert decode_grid.surplus(_plan()[:-1], BATCH, 4) is None  # another FlashInfer's plan layout


def test_fill_points_the_surplus_at_one_request_and_touches_nothing_else():
    buffer = _buffer()
    before = buffer.clone()
    assert decode_grid.fill(buffer, _plan(), BATCH, 4, request=3) == 3
    assert _array(buffer, "request_indices_offset") == [0, 1, 2, 3, 3, 3, 3]
    assert _array(buffer, "qo_tile_indices_offset") == [0] * 7
    assert _array(buffer, "kv_tile_indices_offset") == [0] * 7
    changed = (buffer != before).nonzero().flatten().tolist()
    surplus_bytes = {o + b for o in OFFSETS.values() for b in range(4 * BATCH, 4 * PADDED)}
    assert changed and set(changed) <= surplus_bytes  # the plan's own entries and other fields kept
    with pytest.raises(ValueError, match="not in a batch of 4"):
        decode_grid.fill(buffer, _plan(), BATCH, 4, request=4)


def test_a_plan_that_masks_its_surplus_is_left_alone():
    buffer = _buffer()
    before = buffer.clone()
    assert decode_grid.fill(buffer, _plan(split_kv=1), BATCH, 4, request=0) == 0
    assert torch.equal(buffer, before)


def test_the_cheapest_request_is_the_one_with_fewest_kv_tokens():
    assert decode_grid.cheapest(torch.tensor([900, 35, 1, 1]), 4) == 2  # the first padding slot
    assert decode_grid.cheapest(torch.tensor([900, 35, 40, 700]), 4) == 1  # a full batch: its shortest
    assert decode_grid.cheapest(None, 4) == 3  # lengths not on the host: the last slot
