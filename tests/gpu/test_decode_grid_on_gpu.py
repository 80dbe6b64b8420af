"""``decode_grid`` on a GPU: in FlashInfer's CUDA-graph decode plan without split-KV, where the surplus
blocks point changes no real row's bits, and the plan copies the filled entries to the device."""

import pytest
import torch

from corun_sglang.core import decode_grid

flashinfer = pytest.importorskip("flashinfer")

#: A Qwen3-8B layer's attention (32 query heads, 8 KV heads, head dim 128) in a 64-slot decode graph,
#: page size 1 as SGLang serves it: 8 requests running, 56 padding slots of one KV token each.
QO_HEADS, KV_HEADS, HEAD_DIM, SLOTS, RUNNING = 32, 8, 128, 64, 8


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator(device="cuda").manual_seed(0)
    lens = torch.ones(SLOTS, dtype=torch.int32)
    lens[:RUNNING] = torch.randint(100, 3000, (RUNNING,), generator=torch.Generator().manual_seed(0))
    indptr = torch.zeros(SLOTS + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    pages = int(indptr[-1])
    kv = [torch.randn(pages, 1, KV_HEADS, HEAD_DIM, device="cuda", generator=g, dtype=torch.bfloat16)
          for _ in range(2)]
    q = torch.randn(SLOTS, QO_HEADS, HEAD_DIM, device="cuda", generator=g, dtype=torch.bfloat16)
    return lens, indptr, kv, q


def _wrapper(graph: bool):
    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
    buffers = {}
    if graph:
        buffers = dict(paged_kv_indptr_buffer=torch.zeros(SLOTS + 1, dtype=torch.int32, device="cuda"),
                       paged_kv_indices_buffer=torch.zeros(1 << 16, dtype=torch.int32, device="cuda"),
                       paged_kv_last_page_len_buffer=torch.ones(SLOTS, dtype=torch.int32, device="cuda"))
    return flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph=graph,
                                                         use_tensor_cores=True, **buffers)


def _plan(wrapper, batch) -> None:
    _, indptr, _, _ = batch
    wrapper.plan(indptr.cuda(), torch.arange(int(indptr[-1]), dtype=torch.int32, device="cuda"),
                 torch.ones(SLOTS, dtype=torch.int32, device="cuda"), QO_HEADS, KV_HEADS, HEAD_DIM, 1,
                 data_type=torch.bfloat16, q_data_type=torch.bfloat16,
                 disable_split_kv=True)
    torch.cuda.synchronize()


def _run(wrapper, batch) -> torch.Tensor:
    _, _, kv, q = batch
    out = torch.full_like(q, float("nan"))
    wrapper.run(q, tuple(kv), out=out)
    torch.cuda.synchronize()
    return out


def _entries(wrapper, name: str) -> list[int]:
    info = dict(zip(decode_grid.PLAN_FIELDS, (int(v) for v in wrapper._plan_info)))
    start, count = info[name], info["padded_batch_size"]
    return wrapper._pin_memory_int_workspace_buffer[start:start + 4 * count].view(torch.int32).tolist()


def test_the_surplus_target_changes_no_real_row(batch):
    eager = _wrapper(graph=False)
    _plan(eager, batch)
    reference = _run(eager, batch)  # one block per request, no surplus
    assert not reference.isnan().any()

    graph = _wrapper(graph=True)
    _plan(graph, batch)
    blocks = decode_grid.surplus(list(graph._plan_info), SLOTS, QO_HEADS // KV_HEADS)
    assert blocks and blocks.start == SLOTS  # the graph's grid runs blocks past the batch
    group = QO_HEADS // KV_HEADS
    for request in (0, RUNNING - 1, decode_grid.cheapest(batch[0], SLOTS)):  # long ones and a padding slot
        assert decode_grid.fill(graph._pin_memory_int_workspace_buffer, list(graph._plan_info), SLOTS, group,
                                request) == len(blocks)
        _plan(graph, batch)  # the next plan copies the filled entries to the device
        assert _entries(graph, "request_indices_offset")[blocks.start:] == [request] * len(blocks)
        assert torch.equal(_run(graph, batch), reference)


def test_the_harness_sees_a_block_pointed_elsewhere(batch):
    """Negative control: an index entry the plan wrote, pointed at another request, leaves a row unwritten."""
    graph = _wrapper(graph=True)
    _plan(graph, batch)
    info = dict(zip(decode_grid.PLAN_FIELDS, (int(v) for v in graph._plan_info)))
    start = info["request_indices_offset"]
    graph._pin_memory_int_workspace_buffer[start:start + 4].view(torch.int32)[0] = 1  # block 0 now runs request 1
    graph._int_workspace_buffer[start:start + 4].copy_(graph._pin_memory_int_workspace_buffer[start:start + 4])
    out = _run(graph, batch)
    assert out[0].isnan().all() and not out[1:].isnan().any()
