"""The surplus blocks of a FlashInfer decode plan made for a CUDA graph.

A CUDA-graph plan fixes the attention grid at capture: per KV head, ``padded_batch_size`` blocks,
``max(2 x SMs / KV heads, ceil(slots x group / cta_tile_q) + slots - 1)``, more than the one block per
request that decode without split-KV needs. With split-KV off FlashInfer gives the blocks past the
batch's tiles no mask: they run whatever the plan's index arrays hold there, entries no plan writes
(the page-locked buffer's first contents). ``fill`` points them at one request of the batch, query
tile 0 and KV tile 0. Such a block recomputes that request's attention from the same inputs with the
same kernel, so it writes the bits the request's own block writes, and reads only inside the batch.
Pointed at a padding slot (one KV token), it costs next to nothing.

Invariants:
- only the entries past the batch's tiles change, never one a plan wrote;
- the request named is in the batch, ``0 <= request < batch_size``;
- nothing changes unless the plan is a CUDA-graph plan without split-KV whose requests hold one
  query tile each (decode: ``group_size <= cta_tile_q``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

#: FlashInfer's ``PrefillPlanInfo::ToVector`` order (attention/scheduler.cuh), which the tensor-core
#: decode plan returns.
PLAN_FIELDS = (
    "padded_batch_size", "total_num_rows", "total_num_rows_offset", "cta_tile_q", "request_indices_offset",
    "qo_tile_indices_offset", "kv_tile_indices_offset", "merge_indptr_offset", "o_indptr_offset",
    "kv_chunk_size_ptr_offset", "v_offset", "s_offset", "block_valid_mask_offset", "enable_cuda_graph",
    "split_kv",
)
#: The plan's index arrays a block reads its work from, byte offsets into the int workspace.
INDEX_ARRAYS = ("request_indices_offset", "qo_tile_indices_offset", "kv_tile_indices_offset")
#: Bytes per entry (FlashInfer's IdType: SGLang plans with int32 indptrs).
ENTRY_BYTES = 4


def _fields(plan_info: Sequence[int]) -> dict[str, int] | None:
    return dict(zip(PLAN_FIELDS, (int(v) for v in plan_info))) if len(plan_info) == len(PLAN_FIELDS) else None


def surplus(plan_info: Sequence[int], batch_size: int, group_size: int) -> range | None:
    """The block indices past the batch's tiles, or None where ``fill`` must not act."""
    info = _fields(plan_info)
    if info is None or not info["enable_cuda_graph"] or info["split_kv"] or group_size > info["cta_tile_q"]:
        return None
    return range(batch_size, info["padded_batch_size"])


def fill(page_locked_int_buffer: Any, plan_info: Sequence[int], batch_size: int, group_size: int,
         request: int) -> int:
    """Point every surplus block at ``request``, tiles 0; return how many blocks per KV head.

    ``page_locked_int_buffer`` is the plan's host int workspace (a uint8 tensor): each plan copies it
    to the device, so the entries written here reach every later replay of the graph.
    """
    if not 0 <= request < batch_size:
        raise ValueError(f"request {request} is not in a batch of {batch_size}")
    blocks = surplus(plan_info, batch_size, group_size)
    if not blocks:
        return 0
    info = _fields(plan_info)
    entries = info["padded_batch_size"]
    for name, value in zip(INDEX_ARRAYS, (request, 0, 0)):
        start = info[name]
        array = page_locked_int_buffer[start:start + entries * ENTRY_BYTES].view(dtype=torch.int32)
        array[blocks.start:blocks.stop] = value
    return len(blocks)


def cheapest(seq_lens_cpu: Any, batch_size: int) -> int:
    """The slot with the fewest KV tokens (a padding slot holds one), or the last slot where the
    lengths are not on the host."""
    if seq_lens_cpu is None or len(seq_lens_cpu) < batch_size:
        return batch_size - 1
    return int(seq_lens_cpu[:batch_size].argmin())
