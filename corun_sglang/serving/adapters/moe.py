"""MoE padding-row adapters (``--corun-moe-padding skip``): a decode graph's padding rows get no expert.

Invariants:
- they act only where this process's ``CorunConfig.moe_padding`` is ``skip`` (read once per call);
- a quantized model's padding rows keep their experts;
- the real token count comes from SGLang's ``num_token_non_padded`` (``moe_padding``).
"""

from __future__ import annotations

import torch

from corun_sglang.core import moe_padding
from corun_sglang.serving.adapters import state


def _skips_padding() -> bool:
    cfg = state.config()
    return cfg is not None and cfg.moe_padding == "skip"


def count_real_tokens(original, *args, **kwargs):
    """SGLang keeps ``num_token_non_padded`` (a graph buffer each replay refills) where padding rows skip
    the experts, not only under expert parallelism."""
    if _skips_padding():
        return True
    return original(*args, **kwargs)


def moe_model_forward(original, self, *args, **kwargs):
    """A forward of an MoE model: its padding rows, from SGLang's real token count (``moe_padding``).

    A quantized model's padding rows keep their experts: its MoE layers may run kernels other than
    the Triton ones, which alone give a row without an expert zeros (its tokens are the same either way)."""
    if not _skips_padding() or getattr(self, "quant_config", None) is not None:
        return original(self, *args, **kwargs)
    bound = state.bind(original, self, *args, **kwargs)
    input_ids, forward_batch = bound.arguments["input_ids"], bound.arguments["forward_batch"]
    padding = moe_padding.rows(len(input_ids), forward_batch.num_token_non_padded) if input_ids is not None else None
    with moe_padding.forward(padding):
        return original(self, *args, **kwargs)


def topk_padding(original, self, *args, **kwargs):
    """The top-k of an MoE layer: the forward's padding rows get no expert."""
    out = original(self, *args, **kwargs)
    if _skips_padding() and isinstance(getattr(out, "topk_ids", None), torch.Tensor):
        moe_padding.mask(out.topk_ids)
    return out


def fused_moe_filter(original, *args, **kwargs):
    """The fused-MoE kernels give an unrouted block zeros without reading expert weights."""
    if not _skips_padding():
        return original(*args, **kwargs)
    return original(*args, **{**kwargs, "filter_expert": True})  # a keyword-only argument
