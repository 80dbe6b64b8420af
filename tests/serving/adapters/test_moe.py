"""``adapters.moe``: the padding rows of an MoE forward kept out of the experts under
``--corun-moe-padding skip``, SGLang's own computation under ``compute``."""

import types

import pytest
import torch
from sglang.srt.runtime_context import publish

from adapters.helpers import _recording
from corun_sglang.serving.adapters import moe


@pytest.fixture(params=["compute", "skip"])
def moe_padding_mode(request, make_args):
    publish(make_args(corun=True, corun_moe_padding=request.param), role="scheduler")
    return request.param


def test_sglang_keeps_the_real_token_count_where_padding_skips_the_experts(moe_padding_mode):
    from sglang.srt.model_executor import forward_batch_info

    if moe_padding_mode == "skip":
        assert forward_batch_info.enable_num_token_non_padded() is True
    else:  # SGLang's own answer (here: it has no expert-parallel group to ask)
        with pytest.raises(AssertionError, match="expert model parallel"):
            forward_batch_info.enable_num_token_non_padded()


def _moe_forward(model_self):
    """A forward of 6 rows, 4 of them requests, through ``moe_model_forward`` and one MoE layer's top-k:
    (the expert ids the layer returned, the ids before)."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput, TopK
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM

    ids = torch.arange(24, dtype=torch.int32).reshape(6, 4)
    routed = ids.clone()
    topk = StandardTopKOutput(torch.ones(6, 4), ids, torch.zeros(6, 8))
    layer = _recording(TopK.forward_cuda, {}, result=topk)
    model = _recording(Qwen3MoeForCausalLM.forward, {})
    batch = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=6, input_ids=torch.zeros(6, dtype=torch.int64),
                         req_pool_indices=torch.arange(6), seq_lens=torch.ones(6), out_cache_loc=torch.arange(6),
                         seq_lens_sum=6, num_token_non_padded=torch.tensor([4], dtype=torch.int32))

    def forward(*args, **kwargs):  # the model's forward, running its MoE layer
        model(*args, **kwargs)
        return moe.topk_padding(layer, "topk", torch.zeros(6, 16), torch.zeros(6, 8))

    forward.__signature__ = model.__signature__
    assert moe.moe_model_forward(forward, model_self, batch.input_ids, torch.arange(6), batch) is topk
    return ids, routed


def test_padding_rows_of_an_moe_forward_get_no_expert(moe_padding_mode):
    """The 2 padding rows of the forward lose their experts under skip; the 4 requests keep theirs."""
    ids, routed = _moe_forward(types.SimpleNamespace(quant_config=None))
    assert torch.equal(ids[:4], routed[:4])
    assert torch.equal(ids[4:], torch.full((2, 4), -1, dtype=torch.int32) if moe_padding_mode == "skip" else routed[4:])


def test_a_quantized_moe_models_padding_rows_keep_their_experts(moe_padding_mode):
    ids, routed = _moe_forward(types.SimpleNamespace(quant_config=object()))
    assert torch.equal(ids, routed)


def test_fused_moe_filters_unrouted_blocks_where_padding_skips_the_experts(moe_padding_mode):
    import inspect

    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe

    seen = {}
    original = _recording(fused_moe._fused_moe_kernel_sequence, seen)
    params = original.__signature__.parameters
    assert params["filter_expert"].kind is inspect.Parameter.KEYWORD_ONLY
    required = {n: None for n, p in params.items() if p.default is inspect.Parameter.empty}
    moe.fused_moe_filter(original, **{**required, "filter_expert": False})
    assert seen["filter_expert"] is (moe_padding_mode == "skip")
