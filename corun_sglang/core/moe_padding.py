"""A CUDA graph's padding rows kept out of the MoE experts (``--corun-moe-padding skip``).

A decode graph of M slots runs M rows; with fewer requests running the rest are padding, and SGLang's
plain MoE forward routes each of them to its top-k experts like a real row (the padded-token mask it
has, ``num_token_non_padded``, serves only its expert-parallel paths). Under ``skip`` a padding row's
expert ids become -1, SGLang's mark for a row no local expert serves, and the fused-MoE kernels run
with ``filter_expert``, which gives a -1 block zeros without reading any expert weights. The ids are
masked here, with one ``masked_fill_`` per layer, rather than through SGLang's top-k post-processing,
whose CUDA mask kernel is compiled at first use.

Invariants:
- a real row's expert ids and weights are those ``compute`` gives it, and so is its output: a
  fused-MoE row depends on its own ids and weights, never on the other rows that share its blocks
  (checked on the GPU, tests/gpu/test_moe_on_gpu.py);
- the rows are SGLang's own count: ``num_token_non_padded``, which a graph replay refills with the
  batch's real token count; a forward without it masks nothing;
- the mask is built once per forward (``rows``) and applied to each MoE layer of that forward whose
  token count is the forward's (``mask``).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import torch

#: SGLang's expert id for a row that no local expert serves.
UNROUTED = -1

_padding: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("corun_moe_padding", default=None)


def rows(num_tokens: int, num_token_non_padded: torch.Tensor | None) -> torch.Tensor | None:
    """``(num_tokens, 1)`` bool, True on the padding rows (index >= the real count); None without a count."""
    if num_token_non_padded is None:
        return None
    index = torch.arange(num_tokens, dtype=torch.int32, device=num_token_non_padded.device)
    return (index >= num_token_non_padded.reshape(1).to(torch.int32)).unsqueeze(1)


@contextlib.contextmanager
def forward(padding: torch.Tensor | None) -> Iterator[None]:
    """The padding rows of the forward running inside this block."""
    token = _padding.set(padding)
    try:
        yield
    finally:
        _padding.reset(token)


def mask(topk_ids: torch.Tensor) -> bool:
    """Set the current forward's padding rows of ``topk_ids`` to ``UNROUTED``, in place; whether it did."""
    padding = _padding.get()
    if padding is None or padding.shape[0] != topk_ids.shape[0]:
        return False
    topk_ids.masked_fill_(padding, UNROUTED)
    return True
