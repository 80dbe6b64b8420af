"""``ServerArgs`` with a ``corun`` field: the one switch, wherever a user sets options.

Registered as a class replacement of ``sglang.srt.server_args.ServerArgs``, so
the flag reaches every entry point through SGLang's own machinery: the CLI
(``python -m sglang.launch_server --corun``, ``sglang serve --corun``) and
``--config`` YAML (``corun: true``) through the dataclass-derived argparse
options, ``sgl.Engine(corun=True)`` through the dataclass constructor,
``/server_info`` through ``dataclasses.asdict``, and every scheduler
subprocess through pickling.

With ``corun`` false, ``__post_init__`` is SGLang's, unchanged. With it true,
``pipeline.build`` checks the options, finds the records to serve, chooses the
CoRun options, has SGLang resolve the rest and freezes the result: anything that
breaks the contract raises ``CorunConfigError`` before any model weights load.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Literal, Optional

from sglang.srt.arg_groups.arg_utils import A
from sglang.srt.server_args import ServerArgs as SGLangServerArgs

from corun_sglang.core import config, options, refusals
from corun_sglang.serving import pipeline

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _sglang_defaults() -> dict:
    """SGLang's own default of each of its options (the fields of the class ``CorunServerArgs`` extends)."""
    return options.defaults_of(CorunServerArgs.__mro__[1])


@dataclasses.dataclass
class CorunServerArgs(SGLangServerArgs):
    corun: A[
        bool,
        "Deterministic serving (corun-sglang): a request's tokens and logprobs are "
        "bitwise identical whatever its co-runners, batch position and arrival order. "
        "Isolated prefill, fixed-shape decode (N = --max-running-requests, default 256), "
        "decode attention without split-KV and request-bound sampling RNG.",
    ] = False
    corun_ablation: A[
        Optional[str],
        "Benchmarking only, without --corun: apply a subset of CoRun's mechanisms "
        "(splitkv-off, splitkv-off+isolated-prefill) to measure their cost. "
        "Outputs are NOT deterministic.",
    ] = None
    corun_decode_tiers: A[
        Optional[str],
        "With --corun: a decode tiers record written by `corun-sglang verify-tiers` on this model, "
        "GPU and software. Its tiers, decode CUDA graphs smaller than N, are captured too, and a "
        "lighter load replays the smallest that holds it; a request's tokens and logprobs are "
        "the same in each. A record from another environment refuses to start.",
    ] = None
    corun_decode_tier_candidates: A[
        Optional[str],
        "For `corun-sglang verify-tiers` only: with --corun, also capture these decode graph sizes "
        "(comma-separated, below N) unverified. Outputs are NOT deterministic.",
    ] = None
    corun_prefill_pack: A[
        Optional[str],
        "With --corun: a prefill pack record written by `corun-sglang verify-prefill-pack` on this "
        "model, GPU and software. Short fresh prompts then share prefill iterations: each runs in a "
        "prefill padded to the record's pack size, alone or packed, with the same tokens and logprobs. "
        "A record from another environment refuses to start.",
    ] = None
    corun_prefill_pack_candidate: A[
        Optional[int],
        "For `corun-sglang verify-prefill-pack` only: with --corun, pack prefills at this token count "
        "unverified. Outputs are NOT deterministic.",
    ] = None
    corun_prefill_pack_wait: A[
        Optional[int],
        "With --corun-prefill-pack: a prefill pack waits up to this many decode steps for more prompts "
        "where admission would cut it short (a waiting prompt would join it but its whole sequence or its "
        "slot is not free yet) or, while at least half of --max-running-requests run, where the queue "
        "leaves it under three quarters full, so prompts are admitted a pack at a time rather than one "
        "at a time: fewer prefill iterations, for a queued prompt's time to first token. Tokens and "
        "logprobs are unaffected. 0: never waits. Unset: 32 where calibration serves the pack, else 0.",
    ] = None
    corun_moe_padding: A[
        Literal["auto", "compute", "skip"],
        "With --corun, on an MoE model: what the padding rows of a decode CUDA graph (the slots no "
        "request fills) do in the expert layers. 'compute' routes them like requests; 'skip' gives "
        "them no expert, which saves that work and leaves every request's tokens and logprobs as "
        "they are under 'compute' (unquantized Qwen3-MoE models, Triton MoE runner). 'auto': "
        "'skip' where SGLang resolves the MoE runner to auto or triton (its Triton kernels) and "
        "--quantization is unset, else 'compute'.",
    ] = "auto"
    corun_gemm_library: A[
        Literal["cublaslt", "cublas"],
        "With --corun: the library every scheduler process runs the model's unquantized GEMMs through "
        "(PyTorch's preferred BLAS). Through 'cublaslt' (the default) a Qwen3 shape's decode GEMMs give a row "
        "the same bits from 32 rows up, so a light load decodes in a graph of N/8 slots; through 'cublas' "
        "(PyTorch's own default) only from 128 rows on an H100 and 72 on an H200. Outputs are deterministic "
        "either way; records and calibrations hold for the library they were verified with.",
    ] = "cublaslt"
    corun_default_max_new_tokens: A[
        Optional[int],
        "With --corun: the max_new_tokens of a request that sets none (a chat completion without "
        "max_tokens). Full-sequence admission reserves KV for prompt + max_new_tokens, and SGLang gives "
        "such a request the rest of the context, so few of them run at once (the scheduler logs how "
        "many at startup). A bound runs more at once and ends longer outputs at the bound (the tokens "
        "before it are unchanged). Unset: SGLang's own, the rest of the context.",
    ] = None

    corun_prefix_cache: A[
        bool,
        "With --corun: a prefix cache whose hits give the cold run's tokens and logprobs, bit for bit. Every "
        "prompt prefills in chunks on a fixed grid of 1,024 tokens from its start, then up to its second-to-last "
        "token, then its last token alone; the cache serves hits that end on that grid (any prompt sharing "
        "those tokens) and hits of all but the last token (prompts identical up to their last token: an RL "
        "group or n > 1 prefills once). Replaces the prefill pack. Off until the determinism suite verifies it.",
    ] = False

    corun_tp_invariant: A[
        Optional[int],
        "With --corun: run every parallel GEMM as K fixed shards (each the shape a rank of a TP-K server "
        "computes) and sum the K row-parallel partials in one fixed order, so a server at any TP size that "
        "divides K gives the same tokens and logprobs: a rollout at TP 1 matches a trainer's reference at "
        "TP 2. Dense unquantized models. Off until the determinism suite verifies it across TP sizes.",
    ] = None

    corun_measure: A[
        Optional[str],
        "For the GPU determinism suite only: with --corun, also serve these refused request parameters "
        "(comma-separated), which a queue chunk compares among co-runners. Requests that use them are NOT "
        "verified to be deterministic; the server's log, /server_info and system_fingerprint say so.",
    ] = None

    corun_calibrate: A[
        Literal["auto", "off", "force"],
        "With --corun: 'auto' serves the decode tiers and prefill pack verified for this model, GPU, software "
        "and options, verifying them first (minutes, each probe on its own server) on the first start and "
        "caching the records (--corun-calibration-dir); 'force' verifies again; 'off' serves plain --corun. "
        "Records or candidates given explicitly win.",
    ] = "auto"
    corun_calibration_dir: A[
        Optional[str],
        "With --corun: the folder calibration caches its records in (default: $CORUN_SGLANG_CACHE/calibration, "
        "else ~/.cache/corun-sglang/calibration).",
    ] = None

    def __post_init__(self):
        problems = refusals.without_corun(self)
        if problems:
            raise config.CorunConfigError(problems)
        if not self.corun:
            if self.corun_ablation is not None:
                for name, value in config.ablation_defaults(self.corun_ablation).items():
                    setattr(self, name, value)
                logger.warning("corun ablation '%s': outputs are not deterministic", self.corun_ablation)
            super().__post_init__()
            return
        if self.corun_ablation is not None:
            raise config.CorunConfigError(
                ["--corun-ablation: a benchmarking subset of --corun. Fix: pass only one of them"]
            )
        self._corun_config = pipeline.build(self, _sglang_defaults(), resolve=super().__post_init__)
        logger.info(self._corun_config.summary())

    @property
    def corun_config(self) -> config.CorunConfig:
        """The resolved CoRun configuration with its verified records (only with ``corun`` true): the one
        place every adapter reads them."""
        return self._corun_config
