"""``adapters.decode``: FlashInfer's decode plans without split-KV, on the tensor-core path, and the surplus
blocks of a CUDA-graph plan pointed inside the batch; pass-through without --corun."""

import pytest
import torch

from corun_sglang.serving.adapters import decode
from corun_sglang.core.stops import CorunContractError


@pytest.mark.parametrize("corun", [False, True])
def test_decode_attention_uses_tensor_core_plan_under_corun(serving, corun):
    """GQA group 2 in bf16: FlashInfer's CUDA-core decode (no split-KV switch) unless --corun."""
    from sglang.srt.layers.attention import flashinfer_backend

    serving(corun)
    assert flashinfer_backend.should_use_tensor_core(torch.bfloat16, 8, 4) is corun


def test_decode_plan_turns_split_kv_off(serving):
    """The adapter rebinds SGLang's own ``call_begin_forward`` arguments, however they were passed."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterDecode

    real = FlashInferIndicesUpdaterDecode.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__
    seen = {}

    def original(*args, **kwargs):
        import inspect

        seen.update(inspect.signature(real).bind(*args, **kwargs).arguments)

    original.__signature__ = __import__("inspect").signature(real)
    serving(True)
    decode.decode_plan(original, "updater", "wrapper", "idx", "lens", 7, "indptr", "start", None, None,
                         fixed_split_size=2048, disable_split_kv=False)
    assert seen["fixed_split_size"] is None and seen["disable_split_kv"] is True
    serving(False)
    seen.clear()
    decode.decode_plan(original, "updater", "wrapper", "idx", "lens", 7, "indptr", "start", None, None,
                         fixed_split_size=2048, disable_split_kv=False)
    assert seen["fixed_split_size"] == 2048 and seen["disable_split_kv"] is False


def test_decode_plan_points_a_graph_plans_surplus_blocks_at_the_cheapest_request(serving):
    """FlashInfer's CUDA-graph decode wrapper, as far as the adapter reads it: the plan it made last and
    the page-locked int workspace each plan copies to the GPU (tests/decode_plans.py lays it out)."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterDecode
    from decode_plans import buffer as _buffer
    from decode_plans import plan as _plan

    real = FlashInferIndicesUpdaterDecode.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__

    class Wrapper:
        is_cuda_graph_enabled = True
        _plan_info = None
        _pin_memory_int_workspace_buffer = _buffer()

    class Updater:
        num_qo_heads, num_kv_heads = 32, 8

    copied = []

    def original(updater, wrapper, *args, **kwargs):  # a plan: lays out the workspace, copies it to the GPU
        wrapper._plan_info = _plan()
        copied.append(wrapper._pin_memory_int_workspace_buffer[:28].view(torch.int32).tolist())

    original.__signature__ = __import__("inspect").signature(real)
    serving(True)
    wrapper, lens = Wrapper(), torch.tensor([900, 35, 1, 1])
    for _ in range(2):
        decode.decode_plan(original, Updater(), wrapper, torch.zeros(4), lens, 937, "indptr", "start", None, lens)
    # the first plan's copy still held the stale entries; from the second on, the surplus runs slot 2
    assert copied[0][4:] != [2, 2, 2] and copied[1] == [0, 1, 2, 3, 2, 2, 2]
    full = torch.tensor([900, 35, 40, 700])  # no padding slot left: the shortest request
    decode.decode_plan(original, Updater(), wrapper, torch.zeros(4), full, 1675, "indptr", "start", None, full)
    assert copied[-1] == [0, 1, 2, 3, 1, 1, 1]
    serving(False)  # default SGLang: the workspace is FlashInfer's alone
    wrapper = Wrapper()
    wrapper._pin_memory_int_workspace_buffer = _buffer()
    for _ in range(2):
        decode.decode_plan(original, Updater(), wrapper, torch.zeros(4), lens, 937, "indptr", "start", None, lens)
    assert copied[-1][4:] == copied[0][4:]


@pytest.mark.parametrize("leaves, error", [
    ({"_plan_info": None}, "left no _plan_info"),
    ({"_pin_memory_int_workspace_buffer": None}, "left no _pin_memory_int_workspace_buffer"),
    ({"_plan_info": "split"}, "not one whose surplus blocks"),  # a split-KV plan: its surplus is not fillable
    ({"_plan_info": "short"}, "not one whose surplus blocks"),  # another plan layout
])
def test_a_graph_plan_whose_surplus_cannot_be_filled_stops_the_server(serving, leaves, error):
    """After its plan, a CUDA-graph decode wrapper without the plan or workspace ``decode_grid`` fills, or
    with a plan it cannot fill, is an error, never a plan whose surplus blocks read outside the batch."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterDecode
    from decode_plans import buffer as _buffer
    from decode_plans import plan as _plan

    real = FlashInferIndicesUpdaterDecode.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__
    plans = {"split": _plan(split_kv=1), "short": _plan()[:-1]}

    class Wrapper:
        def __init__(self, cuda_graph):
            self.is_cuda_graph_enabled = cuda_graph

    class Updater:
        num_qo_heads, num_kv_heads = 32, 8

    def original(updater, wrapper, *args, **kwargs):
        wrapper._plan_info, wrapper._pin_memory_int_workspace_buffer = _plan(), _buffer()
        for name, value in leaves.items():
            setattr(wrapper, name, plans.get(value, value))

    original.__signature__ = __import__("inspect").signature(real)
    serving(True)
    lens = torch.tensor([900, 35, 1, 1])
    with pytest.raises(CorunContractError, match=error):
        decode.decode_plan(original, Updater(), Wrapper(True), torch.zeros(4), lens, 937, "indptr", "start",
                             None, lens)
    # outside a CUDA graph the plan has no surplus blocks to fill
    decode.decode_plan(original, Updater(), Wrapper(False), torch.zeros(4), lens, 937, "indptr", "start",
                         None, lens)
