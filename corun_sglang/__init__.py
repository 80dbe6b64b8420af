"""Deterministic LLM inference for SGLang.

Under ``--corun`` a request's tokens and logprobs depend only on the request
(prompt, sampling parameters, seed) and on the deployment (model, hardware,
software, TP configuration), never on its co-runners, batch position or
arrival order.
"""

__version__ = "0.1.0"

#: The one SGLang release every hook target and patch is written against.
SGLANG_VERSION = "0.5.17"
#: The FlashInfer release that SGLang release pins: the decode plan layout ``decode_grid`` edits, and
#: the attention kernels the determinism results were measured with.
FLASHINFER_VERSION = "0.6.15.post1"
