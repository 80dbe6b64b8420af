"""A FlashInfer CUDA-graph decode plan and its page-locked int workspace, as the decode grid tests (core) and the
decode adapter's tests (serving) lay them out."""

import torch

from corun_sglang.core import decode_grid

#: A 4-slot decode graph at group size 4, laid out as FlashInfer lays out its int workspace:
#: padded_batch_size max(2 x SMs / KV heads, ceil(4 x 4 / 16) + 4 - 1) = 7 entries per index array.
PADDED, BATCH = 7, 4
OFFSETS = {"request_indices_offset": 0, "qo_tile_indices_offset": 32, "kv_tile_indices_offset": 64}


def plan(**changes) -> list[int]:
    info = {name: 0 for name in decode_grid.PLAN_FIELDS}
    info.update(padded_batch_size=PADDED, total_num_rows=BATCH, cta_tile_q=16, enable_cuda_graph=1, split_kv=0,
                o_indptr_offset=96, **OFFSETS)
    info.update(changes)
    return [info[name] for name in decode_grid.PLAN_FIELDS]


def buffer() -> torch.Tensor:
    """A page-locked int workspace after a plan: its entries written, the surplus holding stale bytes."""
    buffer = torch.full((128,), 0x5A, dtype=torch.uint8)
    for offset, written in zip(OFFSETS.values(), ([0, 1, 2, 3], [0] * 4, [0] * 4)):
        buffer[offset:offset + 4 * BATCH].view(torch.int32)[:] = torch.tensor(written, dtype=torch.int32)
    return buffer
