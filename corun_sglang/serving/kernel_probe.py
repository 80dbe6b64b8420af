"""Which FlashInfer prefill kernel a fresh prompt's attention runs on: FA3 or another (``packing.FA2``).

The kernel decides the shortest packable prompt (``packing.shortest``). ``prefill_kernel`` asks FlashInfer,
before the server starts, what this machine resolves to; ``planned`` names what a prefill plan did resolve
to, which a ``--corun`` server packing below FA2's rule checks at every plan.

Invariants:
- ``FA3`` only where SGLang takes its ragged wrapper, FlashInfer resolves that wrapper's ``auto`` backend
  to FA3, and SGLang does not give it CUTLASS (``ragged_kernel``);
- without a CUDA device the answer is ``FA2``, the rule that holds on every kernel.
"""

from __future__ import annotations

from typing import Any

from corun_sglang.core.packing import FA2, FA3


def ragged_kernel(fa3_here: bool, paged: bool, sm100: bool) -> str:
    """The kernel of a fresh prompt's prefill attention under SGLang's FlashInfer backend: its ragged wrapper,
    whose ``auto`` backend FlashInfer resolves to ``FA3`` where ``fa3_here`` (FlashInfer's
    ``determine_attention_backend`` for this GPU, dtype and head dim), unless SGLang takes the paged (FA2)
    wrapper instead (``paged``: ``SGLANG_FLASHINFER_USE_PAGED``, a multimodal model, multi-item scoring) or
    gives the ragged one CUTLASS (``sm100``); ``FA2`` stands for every kernel but ``FA3``."""
    return FA3 if fa3_here and not paged and not sm100 else FA2


def prefill_kernel(head_dim: int, dtype: Any, paged: bool) -> str:
    """``ragged_kernel`` on this machine: ``FA2`` where no CUDA device answers. A ``--corun`` server checks
    what its prefill plans resolve to (``planned``, ``adapters.prefill.prefill_plan``), so a wrong guess stops it."""
    import torch

    if not torch.cuda.is_available():
        return FA2
    from flashinfer.utils import determine_attention_backend
    from sglang.srt.utils import is_sm100_supported

    fa3_here = determine_attention_backend(torch.device("cuda"), 0, False, False, dtype, dtype,
                                           head_dim_qk=head_dim, head_dim_vo=head_dim) == FA3
    return ragged_kernel(fa3_here, paged, is_sm100_supported())


def planned(use_ragged: bool, ragged_backend: str | None) -> str | None:
    """The kernel a prefill plan ran on: the ragged wrapper's resolved backend (None before its first plan)
    where SGLang planned it, else ``paged fa2``, the paged wrapper's."""
    return ragged_backend if use_ragged else "paged " + FA2
