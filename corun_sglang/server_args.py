"""``ServerArgs`` with a ``corun`` field: the one switch, wherever a user sets options.

Registered as a class replacement of ``sglang.srt.server_args.ServerArgs``, so
the flag reaches every entry point through SGLang's own machinery: the CLI
(``python -m sglang.launch_server --corun``, ``sglang serve --corun``) and
``--config`` YAML (``corun: true``) through the dataclass-derived argparse
options, ``sgl.Engine(corun=True)`` through the dataclass constructor,
``/server_info`` through ``dataclasses.asdict``, and every scheduler
subprocess through pickling.

With ``corun`` false, ``__post_init__`` is SGLang's, unchanged. With it true,
the CoRun options are chosen before SGLang resolves the rest, and the resolved
result is checked: anything that breaks the contract raises
``CorunConfigError`` before any model weights load.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Literal, Optional

from sglang.srt.arg_groups.arg_utils import A
from sglang.srt.server_args import ServerArgs as SGLangServerArgs

from corun_sglang import calibration, config, kernel_probe, options, pack_record, packing, tiers
from corun_sglang.startup import problems as startup_problems

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
        int,
        "With --corun-prefill-pack: a prefill pack that the KV pool would cut short (a waiting prompt "
        "would join it but its whole sequence does not fit yet) waits up to this many decode steps for "
        "finishing requests to free KV, so waiting prompts are admitted a pack at a time rather than one "
        "at a time: fewer prefill iterations, for a queued prompt's time to first token. Tokens and "
        "logprobs are unaffected. 0: never waits.",
    ] = 0
    corun_moe_padding: A[
        Literal["auto", "compute", "skip"],
        "With --corun, on an MoE model: what the padding rows of a decode CUDA graph (the slots no "
        "request fills) do in the expert layers. 'compute' routes them like requests; 'skip' gives "
        "them no expert, which saves that work and leaves every request's tokens and logprobs as "
        "they are under 'compute' (unquantized Qwen3-MoE models, Triton MoE runner). 'auto': "
        "'skip' where SGLang resolves the MoE runner to auto or triton (its Triton kernels) and "
        "--quantization is unset, else 'compute'.",
    ] = "auto"
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
        if not self.corun and (self.corun_calibrate != "auto" or self.corun_calibration_dir):
            raise config.CorunConfigError(
                ["--corun-calibrate / --corun-calibration-dir: calibration is part of --corun. Fix: add --corun, "
                 "or drop them"]
            )
        if not self.corun and self.corun_moe_padding != "auto":
            raise config.CorunConfigError(
                ["--corun-moe-padding: part of --corun. Fix: add --corun, or drop --corun-moe-padding"]
            )
        if not self.corun and (self.corun_prefill_pack or self.corun_prefill_pack_candidate
                               or self.corun_prefill_pack_wait):
            raise config.CorunConfigError(
                ["--corun-prefill-pack / --corun-prefill-pack-candidate / --corun-prefill-pack-wait: packed "
                 "prefill is part of --corun. Fix: add --corun, or drop them"]
            )
        if not self.corun and self.corun_prefix_cache:
            raise config.CorunConfigError(
                ["--corun-prefix-cache: the deterministic prefix cache is part of --corun. Fix: add --corun, or drop "
                 "--corun-prefix-cache (SGLang's own radix cache is on by default without --corun)"]
            )
        if not self.corun and (self.corun_decode_tiers or self.corun_decode_tier_candidates):
            raise config.CorunConfigError(
                ["--corun-decode-tiers / --corun-decode-tier-candidates: decode tiers are part of --corun. "
                 "Fix: add --corun, or drop them"]
            )
        problems = self._default_max_new_tokens_problems()
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
        env, conflicts = config.collective_env(self, os.environ)
        refused = startup_problems() + conflicts + config.refusals(self) + options.refusals(self, _sglang_defaults())
        if refused:  # before calibrating: a refused configuration is not worth minutes of probes
            raise config.CorunConfigError(refused)
        calibrated = self._calibrate()
        problems = startup_problems() + self._tier_problems() + self._pack_problems() + conflicts
        problems += config.refusals(self) + options.refusals(self, _sglang_defaults())
        if problems:
            raise config.CorunConfigError(problems)
        os.environ.update(env)  # inherited by the scheduler processes started later
        for name, value in config.defaults(self).items():
            setattr(self, name, value)
        super().__post_init__()
        self._corun_config = dataclasses.replace(
            config.resolve(self, self.get_attention_backends(), *(self._pack_graphs() or ())),
            calibration=calibrated.as_info())
        for name in (config.TIER_RECORD_ATTR, config.PACK_RECORD_ATTR):  # the records live in the config now
            delattr(self, name)
        logger.info(self._corun_config.summary())

    def _calibrate(self) -> calibration.Calibration:
        """Serve this environment's calibration (``calibration.prepare``), verifying it first if needed."""
        free = {name for name in _sglang_defaults() if (g := options.group_of(name)) is not None
                and g.kind == "free" and not g.why.startswith("the model")}
        own = ["--corun-moe-padding", self.corun_moe_padding] if self.corun_moe_padding != "auto" else []
        server_flags = calibration.flags(self, _sglang_defaults(), free) + own
        # how much memory the server takes sizes its KV pool, not a kernel: it does not name a calibration
        key_flags = calibration.flags(self, _sglang_defaults(), free | calibration.MEMORY_OPTIONS) + own
        gpu = calibration.gpu_name() if self.corun_calibrate != "off" else None
        return calibration.prepare(self, lambda: calibration.key_parts(self, key_flags, gpu), gpu,
                                   server_flags=server_flags)

    def _default_max_new_tokens_problems(self) -> list[str]:
        """What keeps ``--corun-default-max-new-tokens`` from being served: it is part of ``--corun``, at least 1."""
        bound = self.corun_default_max_new_tokens
        if bound is None:
            return []
        if not self.corun:
            return ["--corun-default-max-new-tokens: part of --corun. Fix: add --corun, or drop "
                    "--corun-default-max-new-tokens"]
        if bound < 1:
            return [f"--corun-default-max-new-tokens {bound}: a number of new tokens, 1 or more. Fix: pass 1 "
                    "or more, or drop it to keep SGLang's default (the rest of the context)"]
        return []

    def _tier_problems(self) -> list[str]:
        """Load ``--corun-decode-tiers`` (or parse the candidates); what keeps them from being served."""
        n = self.max_running_requests or config.DEFAULT_MAX_RUNNING_REQUESTS
        setattr(self, config.TIER_RECORD_ATTR, None)
        try:
            if self.corun_decode_tiers:
                record = tiers.load(self.corun_decode_tiers)
                found = tiers.problems(record, n)
                if found:
                    return [f"--corun-decode-tiers {self.corun_decode_tiers}: {p}. Fix: run "
                            "`corun-sglang verify-tiers` with this N, or drop --corun-decode-tiers"
                            for p in found]
                setattr(self, config.TIER_RECORD_ATTR, record)
            elif self.corun_decode_tier_candidates:
                wide = [m for m in tiers.parse_sizes(self.corun_decode_tier_candidates) if m >= n]
                if wide:
                    return [f"--corun-decode-tier-candidates: {wide} are not below N = {n}. Fix: drop them"]
                logger.warning("corun decode tier candidates %s: unverified, outputs are NOT deterministic",
                               self.corun_decode_tier_candidates)
        except tiers.TiersError as exc:
            return [str(exc)]
        return []

    def _pack_problems(self) -> list[str]:
        """Load ``--corun-prefill-pack`` (or take the candidate); what keeps the pack from being served."""
        setattr(self, config.PACK_RECORD_ATTR, None)
        wait = self.corun_prefill_pack_wait
        if wait < 0 or (wait and not (self.corun_prefill_pack or self.corun_prefill_pack_candidate)):
            return [f"--corun-prefill-pack-wait {wait}: "
                    + ("a number of decode steps, 0 or more. Fix: pass 0 to never wait" if wait < 0 else
                       "a pack waits only with --corun-prefill-pack. Fix: add --corun-prefill-pack, or drop it")]
        try:
            if self.corun_prefill_pack:
                record = pack_record.load(self.corun_prefill_pack)
                found = packing.pack_problems(record.pack, self.chunked_prefill_size)
                if found:
                    return [f"--corun-prefill-pack {self.corun_prefill_pack}: {p}. Fix: run "
                            "`corun-sglang verify-prefill-pack` with a smaller pack" for p in found]
                setattr(self, config.PACK_RECORD_ATTR, record)
            elif self.corun_prefill_pack_candidate:
                found = packing.pack_problems(self.corun_prefill_pack_candidate, self.chunked_prefill_size)
                if found:
                    return [f"--corun-prefill-pack-candidate: {p}. Fix: choose another pack" for p in found]
                logger.warning("corun prefill pack candidate %s: unverified, outputs are NOT deterministic",
                               self.corun_prefill_pack_candidate)
        except packing.PackingError as exc:
            return [str(exc)]
        return []

    def _pack_graphs(self) -> tuple[int, str] | None:
        """With a prefill pack: capture no prefill graph below it; its shortest packable prompt and the
        kernel rule that length rests on (``FA3`` below FA2's rule, else ``FA2``), or None. A record serves
        from its own shortest, never below what this machine's prefill kernel allows."""
        pack = config.prefill_pack(self)
        if pack is None:
            return None
        prefill = self.cuda_graph_config.prefill
        if prefill.backend == "breakable":
            prefill.bs = packing.graph_counts(prefill.bs or [], pack)
            prefill.max_bs = prefill.bs[-1]
        model = self.get_model_config()
        from sglang.srt.environ import envs

        paged = envs.SGLANG_FLASHINFER_USE_PAGED.get() or model.is_multimodal or bool(self.enable_mis)
        kernel = kernel_probe.prefill_kernel(model.head_dim, model.dtype, paged)
        least = packing.shortest(model.num_attention_heads, model.num_key_value_heads, kernel)
        record = getattr(self, config.PACK_RECORD_ATTR, None)
        if record is not None and record.shortest < least:
            raise config.CorunConfigError(
                [f"--corun-prefill-pack {record.source}: verified with prompts from {record.shortest} tokens; "
                 f"this model on FlashInfer's {kernel} prefill packs prompts from {least}. Fix: run "
                 "`corun-sglang verify-prefill-pack` with this model here"])
        served = least if record is None else record.shortest
        fa2_least = packing.shortest(model.num_attention_heads, model.num_key_value_heads, packing.FA2)
        return served, (packing.FA3 if served < fa2_least else packing.FA2)

    @property
    def corun_config(self) -> config.CorunConfig:
        """The resolved CoRun configuration with its verified records (only with ``corun`` true): the one
        place every adapter reads them."""
        return self._corun_config
