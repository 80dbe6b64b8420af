"""What ``--corun`` sets, what it refuses, and the frozen configuration it resolves to.

Pure functions over an object with SGLang's ``ServerArgs`` attributes; nothing
here imports SGLang or mutates its argument. The adapter in ``server_args.py``
applies ``defaults()`` before SGLang resolves its options and ``resolve()``
after, so that every decision below can be tested on plain objects.

Invariants of a configuration that ``resolve()`` accepts:
- decode runs CUDA graphs only, of batch size N = ``max_running_requests`` and of
  the decode tiers below N (``corun_sglang.tiers``; none unless given), with
  padding (a smaller batch replays the smallest graph that holds it);
- prefill and decode never share a batch (no mixed chunk), and the radix cache
  is off (a cache hit would change the prefill shape of a request), or, with
  ``--corun-prefix-cache``, on with every prompt's prefill chunked on the grid of
  ``corun_sglang.prefix_cache`` and only the hits that grid makes exact served (no prefill pack);
- a prefill batch holds one request, or, with a prefill pack (``corun_sglang.packing``), packable
  prompts only, on SGLang's breakable prefill graph, which captures no token count below the pack;
  without a pack, prefill runs eagerly or on the breakable graph (``PREFILL_GRAPH_BACKENDS``);
- prefill and decode attention run on FlashInfer;
- sampling runs on the ``corun`` backend (request-bound random draws);
- SGLang's batch-invariant ops (``--enable-deterministic-inference``) stay off;
- MoE padding rows (``--corun-moe-padding``) resolve to ``skip`` or ``compute``; ``skip`` only
  where SGLang's MoE runner is its Triton kernels, which give a row without an expert zeros
  (``corun_sglang.moe_padding``);
- no feature that splits, reshapes or redistributes a batch (speculative
  decoding, DP attention, PD disaggregation, pipeline parallelism, two-batch
  overlap); TP 1 or 2 (``TP_SIZES_VERIFIED``), with TP 2 every all-reduce on
  NCCL's tree (``NCCL_ENV``; no custom or FlashInfer-fused all-reduce);
- the decode tiers and the prefill pack it serves are a verified record's (``CorunConfig.tier_record``,
  ``CorunConfig.pack_record``), or unverified candidates that make no determinism promise;
- every other SGLang option is free, at a verified value, or at SGLang's
  default (``corun_sglang.options``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

#: N when ``--max-running-requests`` is not given.
DEFAULT_MAX_RUNNING_REQUESTS = 256

#: The only attention backend whose decode path runs without split-KV here.
ATTENTION_BACKEND = "flashinfer"

#: The sampling backend whose draws are bound to requests (``corun_sglang.sampler``).
SAMPLING_BACKEND = "corun"

#: Tensor-parallel sizes served under --corun (each verified on GPUs with its collectives).
TP_SIZES_VERIFIED = frozenset({1, 2})

#: Prefill CUDA graph backends served under --corun, each verified on GPUs: eager prefill, and
#: SGLang's breakable graphs (SGLang's default), which pad a prefill to the nearest captured token
#: count; with one request per prefill that count depends on the request alone.
PREFILL_GRAPH_BACKENDS = frozenset({"disabled", "breakable"})

#: Server options that switch all-reduce to a collective other than NCCL's.
CUSTOM_COLLECTIVES = (
    "enable_nccl_nvls", "enable_symm_mem", "enable_mscclpp", "enable_torch_symm_mem",
    "enable_quant_communications", "enable_fused_moe_sum_all_reduce",
)

#: NCCL settings for TP > 1: every all-reduce on the tree algorithm with one protocol, no
#: NVLink SHARP, so neither the algorithm nor the protocol can change with message size.
NCCL_ENV = {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple", "NCCL_NVLS_ENABLE": "0"}

#: Requests per prefill (extend) batch.
PREFILL_REQUESTS_PER_BATCH = 1

#: ``--random-seed`` when not given: derived seeds of unseeded requests must
#: survive a restart, which SGLang's default (a fresh random seed) would break.
DEFAULT_RANDOM_SEED = 0


#: The MoE runner settings under which SGLang runs an unquantized MoE layer on CUDA on its Triton
#: kernels, the only ones here that give a row without an expert (id -1) zeros (``moe_padding``).
MOE_PADDING_RUNNERS = ("auto", "triton")

#: Subsets of CoRun's mechanisms that ``--corun-ablation`` applies without ``--corun``, to
#: measure what each costs. Such a server makes no determinism promise.
ABLATIONS: dict[str, frozenset[str]] = {
    "splitkv-off": frozenset({"splitkv-off"}),
    "splitkv-off+isolated-prefill": frozenset({"splitkv-off", "isolated-prefill"}),
}


def ablation_mechanisms(name: str | None) -> frozenset[str]:
    """The mechanisms an ablation applies (empty for None); ``CorunConfigError`` for an unknown name."""
    if name is None:
        return frozenset()
    if name not in ABLATIONS:
        raise CorunConfigError([f"--corun-ablation {name}: unknown; choose one of {', '.join(ABLATIONS)}"])
    return ABLATIONS[name]


def ablation_defaults(name: str | None) -> dict[str, Any]:
    """Options an ablation sets: isolated prefill runs one request per prefill batch."""
    if "isolated-prefill" in ablation_mechanisms(name):
        return {"prefill_max_requests": PREFILL_REQUESTS_PER_BATCH, "enable_mixed_chunk": False}
    return {}


class CorunConfigError(ValueError):
    """Options that break the CoRun contract; the message names each and its fix."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            "--corun cannot start with this configuration (it would not be "
            f"deterministic):\n{lines}"
        )


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An option ``--corun`` refuses: ``applies(args)`` is true when it is set."""

    option: str
    applies: Callable[[Any], bool]
    why: str
    fix: str

    def message(self) -> str:
        return f"{self.option}: {self.why}. Fix: {self.fix}."


def _attention_backends_given(args: Any) -> set:
    return {
        getattr(args, name, None)
        for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    } - {None}


def _graph_json(args: Any, phase: str) -> dict:
    cfg = getattr(args, "cuda_graph_config", None)
    if cfg is None:
        return {}
    if isinstance(cfg, dict):
        return dict(cfg.get(phase) or {})
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict().get(phase) or {})
    return {}


def _prefill_graph_unverified(args: Any) -> bool:
    """The user asked for a prefill CUDA graph backend outside ``PREFILL_GRAPH_BACKENDS``."""
    backend = getattr(args, "cuda_graph_backend_prefill", None) or _graph_json(args, "prefill").get("backend")
    return backend is not None and backend not in PREFILL_GRAPH_BACKENDS


#: The attribute of a server's args that holds its verified decode tiers record (``tiers.Record``) from
#: loading it to ``resolve()``, which puts it into ``CorunConfig.tier_record``; ``server_args`` alone
#: sets it and drops it once resolved.
TIER_RECORD_ATTR = "_corun_tier_record"

#: As ``TIER_RECORD_ATTR``, for the verified prefill pack record (``pack_record.Record``).
PACK_RECORD_ATTR = "_corun_pack_record"


def prefix_grid(args: Any) -> int | None:
    """The prefill grid of ``--corun-prefix-cache`` (``prefix_cache.GRID``), or None without it."""
    from corun_sglang.prefix_cache import GRID

    return GRID if getattr(args, "corun_prefix_cache", False) else None


def prefill_pack(args: Any) -> int | None:
    """The prefill pack size: a verified record's, or an unverified candidate's, or None (isolated prefill).
    With ``--corun-prefix-cache`` none: its prefills run on its grid (``refusals`` names a pack given)."""
    if prefix_grid(args) is not None:
        return None
    record = getattr(args, PACK_RECORD_ATTR, None)
    if record is not None:
        return record.pack
    return getattr(args, "corun_prefill_pack_candidate", None) or None


def _prefill_bs_conflict(args: Any) -> bool:
    """Prefill graph token counts were given that capture a count below the pack."""
    from corun_sglang.packing import graph_counts

    pack = prefill_pack(args)
    given = [args.cuda_graph_bs_prefill, _graph_json(args, "prefill").get("bs")]
    return pack is not None and any(bs is not None and list(bs) != graph_counts(bs, pack) for bs in given)


def _prefill_graph_off(args: Any) -> bool:
    backend = getattr(args, "cuda_graph_backend_prefill", None) or _graph_json(args, "prefill").get("backend")
    return bool(getattr(args, "disable_cuda_graph", False) or getattr(args, "disable_prefill_cuda_graph", False)
                or backend == "disabled")


def decode_tiers(args: Any) -> tuple[int, ...]:
    """The decode graph sizes below N: a verified record's tiers, or unverified candidates, or none."""
    record = getattr(args, TIER_RECORD_ATTR, None)
    if record is not None:
        return tuple(record.tiers)
    candidates = getattr(args, "corun_decode_tier_candidates", None)
    if candidates:
        from corun_sglang.tiers import TiersError, parse_sizes

        try:
            return tuple(parse_sizes(candidates))
        except TiersError:  # reported by the server args' own check
            return ()
    return ()


def decode_sizes(args: Any) -> list[int]:
    """Every decode graph size a ``--corun`` server captures: its tiers, then N."""
    from corun_sglang.tiers import capture_sizes

    return capture_sizes(decode_tiers(args), args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS)


def _decode_sizes_conflict(args: Any) -> bool:
    n = args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
    sizes = decode_sizes(args)
    given = [
        ("bs", args.cuda_graph_bs_decode),
        ("max_bs", args.cuda_graph_max_bs_decode),
        ("bs", _graph_json(args, "decode").get("bs")),
        ("max_bs", _graph_json(args, "decode").get("max_bs")),
    ]
    for key, value in given:
        if value is None:
            continue
        if key == "bs" and list(value) != sizes:
            return True
        if key == "max_bs" and value != n:
            return True
    return False


def _decode_graph_off(args: Any) -> bool:
    backend = args.cuda_graph_backend_decode or _graph_json(args, "decode").get("backend")
    return bool(
        getattr(args, "disable_cuda_graph", False)
        or args.disable_decode_cuda_graph
        or (backend is not None and backend != "full")
    )


REFUSALS: tuple[Refusal, ...] = (
    Refusal(
        "--max-running-requests",
        lambda a: a.max_running_requests is not None and a.max_running_requests < 1,
        "N, the decode graph's batch size, is the number of requests that run at once: 1 or more",
        f"pass 1 or more, or leave it unset for {DEFAULT_MAX_RUNNING_REQUESTS}",
    ),
    Refusal(
        "--enable-deterministic-inference",
        lambda a: bool(a.enable_deterministic_inference),
        "SGLang's batch-invariant mode and --corun are alternative ways to determinism; "
        "--corun replaces the slow batch-invariant kernels and cannot run on top of them",
        "pass only one of --corun and --enable-deterministic-inference",
    ),
    Refusal(
        "--rl-on-policy-target",
        lambda a: a.rl_on_policy_target is not None,
        "it switches on SGLang's batch-invariant mode (--enable-deterministic-inference)",
        "drop --rl-on-policy-target, or drop --corun",
    ),
    Refusal(
        "--enable-mixed-chunk",
        lambda a: bool(a.enable_mixed_chunk),
        "mixed chunk puts prefill tokens into decode batches, so a decode step's shape "
        "would depend on which prompts arrive",
        "remove --enable-mixed-chunk",
    ),
    Refusal(
        "--speculative-algorithm",
        lambda a: a.speculative_algorithm is not None,
        "speculative decoding verifies a data-dependent number of tokens per step, "
        "so decode shapes vary with co-runners",
        "remove the --speculative-* options",
    ),
    Refusal(
        "--enable-dp-attention",
        lambda a: bool(a.enable_dp_attention),
        "data-parallel attention runs the MLP of every rank's requests as one batch, so a request's "
        "shapes depend on the requests of the other ranks",
        "remove --enable-dp-attention; for more throughput, run identical --corun replicas behind "
        "SGLang's router (docs/deployment.md)",
    ),
    Refusal(
        "--dp-size",
        lambda a: (a.dp_size or 1) > 1,
        "SGLang's data-parallel controller (one scheduler per rank behind one server) has not run under "
        "--corun on a GPU: its calibration, records and contract stops are verified for one scheduler",
        "use --dp-size 1 and run identical --corun replicas, one per GPU or TP group, behind SGLang's "
        "router (docs/deployment.md)",
    ),
    Refusal(
        "--disaggregation-mode",
        lambda a: (a.disaggregation_mode or "null") != "null",
        "PD disaggregation is not covered by the CoRun contract yet",
        "run a single colocated server (--disaggregation-mode null)",
    ),
    Refusal(
        "--pp-size",
        lambda a: (a.pp_size or 1) > 1,
        "pipeline parallelism interleaves micro-batches whose shapes depend on co-runners",
        "use --pp-size 1",
    ),
    Refusal(
        "--tp-size",
        lambda a: (a.tp_size or 1) not in TP_SIZES_VERIFIED,
        "only the tensor-parallel sizes whose fixed-order all-reduce has been verified on GPUs "
        f"are served ({sorted(TP_SIZES_VERIFIED)})",
        f"use --tp-size {max(TP_SIZES_VERIFIED)} or less",
    ),
    Refusal(
        "--enable-nccl-nvls / --enable-symm-mem / --enable-mscclpp / --enable-torch-symm-mem / "
        "--enable-quant-communications / --enable-fused-moe-sum-all-reduce",
        lambda a: any(getattr(a, f, False) for f in CUSTOM_COLLECTIVES),
        "these collectives choose their reduction order by message size and topology",
        "remove them; --corun runs every all-reduce on NCCL's tree algorithm",
    ),
    Refusal(
        "--enable-two-batch-overlap / --enable-single-batch-overlap",
        lambda a: bool(a.enable_two_batch_overlap) or bool(a.enable_single_batch_overlap),
        "batch overlap splits a batch into micro-batches whose sizes depend on co-runners",
        "remove the batch-overlap options",
    ),
    Refusal(
        "--disable-cuda-graph / --disable-decode-cuda-graph / --cuda-graph-backend-decode",
        _decode_graph_off,
        "fixed-shape decode replays one full CUDA graph of size N every step; eager decode "
        "would run at the batch's own size",
        "keep the decode CUDA graph on (backend 'full')",
    ),
    Refusal(
        "--cuda-graph-backend-prefill",
        _prefill_graph_unverified,
        "only eager prefill and SGLang's breakable prefill graphs are verified under --corun",
        "drop --cuda-graph-backend-prefill (or set it to 'breakable' or 'disabled')",
    ),
    Refusal(
        "--disable-cuda-graph-padding",
        lambda a: bool(a.disable_cuda_graph_padding),
        "a decode batch smaller than N must be padded to N and replay the one graph",
        "remove --disable-cuda-graph-padding",
    ),
    Refusal(
        "--cuda-graph-bs-decode / --cuda-graph-max-bs-decode",
        _decode_sizes_conflict,
        "--corun captures the decode graph of size N = --max-running-requests and the "
        "verified tiers of --corun-decode-tiers, no other",
        "drop the decode graph sizes (use --corun-decode-tiers for smaller verified graphs)",
    ),
    Refusal(
        "--corun-decode-tiers / --corun-decode-tier-candidates",
        lambda a: bool(getattr(a, "corun_decode_tiers", None)) and bool(getattr(a, "corun_decode_tier_candidates", None)),
        "a server captures either verified tiers or candidates for verification",
        "pass only one of them",
    ),
    Refusal(
        "--prefill-max-requests",
        lambda a: a.prefill_max_requests not in (None, PREFILL_REQUESTS_PER_BATCH),
        "isolated prefill runs exactly one request per prefill batch (a prefill pack decides which "
        "prompts share one)",
        "drop --prefill-max-requests (or set it to 1)",
    ),
    Refusal(
        "--corun-prefill-pack / --corun-prefill-pack-candidate",
        lambda a: bool(getattr(a, "corun_prefill_pack", None)) and bool(getattr(a, "corun_prefill_pack_candidate", None)),
        "a server packs either a verified pack size or a candidate for verification",
        "pass only one of them",
    ),
    Refusal(
        "--disable-prefill-cuda-graph / --cuda-graph-backend-prefill disabled (with a prefill pack)",
        lambda a: prefill_pack(a) is not None and _prefill_graph_off(a),
        "a prefill pack pads every packable prefill to the pack size in SGLang's breakable prefill graph",
        "keep the prefill CUDA graph on, or drop the prefill pack",
    ),
    Refusal(
        "--cuda-graph-bs-prefill (with a prefill pack)",
        _prefill_bs_conflict,
        "a prefill pack captures the pack size and SGLang's counts above it, no count below it",
        "drop the prefill graph token counts",
    ),
    Refusal(
        "--corun-prefill-pack / --corun-prefill-pack-candidate (with --corun-prefix-cache)",
        lambda a: prefix_grid(a) is not None and bool(getattr(a, "corun_prefill_pack", None)
                                                      or getattr(a, "corun_prefill_pack_candidate", None)),
        "the prefix cache prefills every prompt in chunks on its grid, which a pack of several prompts would "
        "break",
        "drop the prefill pack, or --corun-prefix-cache",
    ),
    Refusal(
        "--chunked-prefill-size (with --corun-prefix-cache)",
        lambda a: prefix_grid(a) is not None and a.chunked_prefill_size not in (None, prefix_grid(a)),
        "the prefix cache's prefill chunks are its grid (1,024 tokens), so a hit repeats the cold run's chunks",
        "drop --chunked-prefill-size",
    ),
    Refusal(
        "--disable-radix-cache (with --corun-prefix-cache)",
        lambda a: prefix_grid(a) is not None and bool(a.disable_radix_cache),
        "the prefix cache is SGLang's radix cache, serving only the hits its grid makes exact",
        "drop --disable-radix-cache, or --corun-prefix-cache",
    ),
    Refusal(
        "--enable-pdmux",
        lambda a: bool(a.enable_pdmux),
        "prefill-decode multiplexing runs prefill and decode on split streams with "
        "their own graphs",
        "remove --enable-pdmux",
    ),
    Refusal(
        "--sampling-backend",
        lambda a: a.sampling_backend not in (None, SAMPLING_BACKEND),
        "only the corun sampler binds a request's random draws to its seed and position "
        "(other samplers draw from a batch-wide generator)",
        f"drop --sampling-backend (or set it to {SAMPLING_BACKEND})",
    ),
    Refusal(
        "--enable-dynamic-chunking",
        lambda a: bool(getattr(a, "enable_dynamic_chunking", False)),
        "dynamic chunking sizes prefill chunks by load, so chunk boundaries would depend on "
        "co-runners",
        "remove --enable-dynamic-chunking",
    ),
    Refusal(
        "--enable-lora / --lora-paths",
        lambda a: bool(getattr(a, "enable_lora", None)) or bool(getattr(a, "lora_paths", None)),
        "LoRA batches select adapter-specific decode graphs, which --corun has not been verified with",
        "serve without LoRA adapters",
    ),
    Refusal(
        "--enable-return-hidden-states",
        lambda a: bool(getattr(a, "enable_return_hidden_states", False)),
        "requests that return hidden states need a decode graph other than the single size-N one",
        "remove --enable-return-hidden-states",
    ),
    Refusal(
        "--enable-torch-compile",
        lambda a: bool(getattr(a, "enable_torch_compile", False)),
        "torch.compile'd decode kernels have not been verified to be position-invariant",
        "remove --enable-torch-compile",
    ),
    Refusal(
        "--enable-hierarchical-cache",
        lambda a: bool(getattr(a, "enable_hierarchical_cache", False)),
        "the hierarchical cache extends the radix cache, which --corun turns off",
        "remove --enable-hierarchical-cache",
    ),
    Refusal(
        "--attention-backend / --prefill-attention-backend / --decode-attention-backend",
        lambda a: bool(_attention_backends_given(a) - {ATTENTION_BACKEND}),
        "only FlashInfer's decode attention has been made free of split-KV under --corun",
        f"use --attention-backend {ATTENTION_BACKEND} (or leave it unset)",
    ),
)


def refusals(args: Any) -> list[str]:
    """Messages for every option in ``args`` that ``--corun`` refuses (empty when none)."""
    return [r.message() for r in REFUSALS if r.applies(args)]


def moe_padding(args: Any) -> str:
    """What the padding rows of ``args``' decode graphs do in the MoE experts: ``skip`` or ``compute``.

    ``auto`` (the default) is ``skip`` where SGLang resolved the MoE runner to one of
    ``MOE_PADDING_RUNNERS`` and ``--quantization`` is unset, else ``compute``. A quantized checkpoint's
    layers keep their padding rows' experts either way (``adapters.moe.moe_model_forward``)."""
    mode = getattr(args, "corun_moe_padding", "auto") or "auto"
    if mode != "auto":
        return mode
    triton = getattr(args, "moe_runner_backend", "auto") in MOE_PADDING_RUNNERS
    return "skip" if triton and getattr(args, "quantization", None) is None else "compute"


def skips_moe_padding(args: Any) -> bool:
    """Whether ``args`` serve ``--corun`` with the decode graphs' padding rows kept out of the MoE experts."""
    return bool(getattr(args, "corun", False)) and moe_padding(args) == "skip"


def defaults(args: Any) -> dict[str, Any]:
    """The option values ``--corun`` sets before SGLang resolves the rest.

    Only options the user left open are chosen; options the user set in a way
    that conflicts are reported by ``refusals()`` instead.
    """
    n = args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
    tp = ({"disable_custom_all_reduce": True, "enforce_disable_flashinfer_allreduce_fusion": True}
          if (args.tp_size or 1) > 1 else {})
    return {
        **tp,
        "max_running_requests": n,
        "cuda_graph_bs_decode": decode_sizes(args),
        "cuda_graph_max_bs_decode": n,
        "prefill_max_requests": PREFILL_REQUESTS_PER_BATCH if prefill_pack(args) is None else None,
        "disable_radix_cache": prefix_grid(args) is None,
        **({} if prefix_grid(args) is None else {"chunked_prefill_size": prefix_grid(args)}),
        "attention_backend": ATTENTION_BACKEND,
        "sampling_backend": SAMPLING_BACKEND,
        "random_seed": DEFAULT_RANDOM_SEED if args.random_seed is None else args.random_seed,
    }


@dataclasses.dataclass(frozen=True)
class CorunConfig:
    """The resolved shape configuration of a ``--corun`` server, with the records it serves.

    ``decode_tiers_verified`` is ``tier_record is not None`` and ``prefill_pack_verified`` is
    ``pack_record is not None``; it pickles, with its records, to every scheduler process."""

    decode_batch_size: int
    decode_tiers: tuple[int, ...]
    decode_tiers_verified: bool
    prefill_requests_per_batch: int | None
    prefill_graph: str
    chunked_prefill_size: int | None
    page_size: int
    attention_backend: str
    sampling_backend: str | None
    random_seed: int | None
    moe_padding: str = "compute"
    prefill_pack: int | None = None
    prefill_pack_shortest: int | None = None
    prefill_pack_kernel: str | None = None
    prefill_pack_verified: bool = False
    prefill_pack_wait: int = 0
    prefix_grid: int | None = None  # --corun-prefix-cache: its prefill grid (prefix_cache.GRID), else None
    tier_record: Any = None  # tiers.Record
    pack_record: Any = None  # pack_record.Record
    calibration: Any = None  # calibration.Calibration.as_info(): what calibration served and why

    @property
    def decode_sizes(self) -> list[int]:
        """Every decode graph size the server captures: its tiers, then N."""
        from corun_sglang.tiers import capture_sizes

        return capture_sizes(self.decode_tiers, self.decode_batch_size)

    @property
    def packing(self) -> tuple[int, int] | None:
        """The prefill pack and its shortest packable prompt, or None (isolated prefill)."""
        return None if self.prefill_pack is None else (self.prefill_pack, self.prefill_pack_shortest)

    def served_records(self) -> list:
        """What a record verifies that this server serves (``records.Served``): its decode tiers and its
        prefill pack, each with its record, or None for unverified candidates."""
        from corun_sglang.records import Served

        served = []
        if self.decode_tiers:
            served.append(Served(self.tier_record, "--corun-decode-tiers", "verify-tiers"))
        if self.prefill_pack is not None:
            served.append(Served(self.pack_record, "--corun-prefill-pack", "verify-prefill-pack"))
        return served

    def _prefill(self) -> str:
        if self.prefill_pack is None:
            return f"prefill {self.prefill_requests_per_batch} request/batch"
        verified = ("verified by --corun-prefill-pack" if self.prefill_pack_verified
                    else "UNVERIFIED pack candidate, not deterministic")
        wait = (f", a pack the KV pool cuts short waits up to {self.prefill_pack_wait} decode steps"
                if self.prefill_pack_wait else "")
        fa3 = ", on FlashInfer's FA3 prefill only" if self.prefill_pack_kernel == "fa3" else ""
        return (f"prefill 1 request/batch or packed: prompts of {self.prefill_pack_shortest}-{self.prefill_pack} "
                f"tokens at {self.prefill_pack} tokens{fa3} ({verified}{wait})")

    def _graphs(self) -> str:
        if not self.decode_tiers:
            return "padded, single graph"
        if self.decode_tiers_verified:
            return "padded to the smallest that holds a batch; tiers verified by --corun-decode-tiers"
        return "padded to the smallest that holds a batch; UNVERIFIED tier candidates, not deterministic"

    def _cache(self) -> str:
        if self.prefix_grid is None:
            return "radix_cache=off"
        return (f"prefix_cache=on (prefill on a {self.prefix_grid}-token grid, then the last token alone; hits on "
                "the grid, and of all but the last token for identical prompts)")

    def summary(self) -> str:
        """One log line with every shape decision."""
        return (
            f"corun: decode graph bs={[*self.decode_tiers, self.decode_batch_size]} ({self._graphs()}), "
            f"{self._prefill()} (graph: {self.prefill_graph}), "
            f"chunked_prefill_size={self.chunked_prefill_size}, page_size={self.page_size}, "
            f"attention={self.attention_backend} (no split-KV decode), "
            f"sampling={self.sampling_backend}, random_seed={self.random_seed}, "
            f"moe_padding={self.moe_padding}, {self._cache()}, mixed_chunk=off, batch_invariant_ops=off"
        )


def collective_env(args: Any, environ: dict) -> tuple[dict, list[str]]:
    """NCCL variables to set for ``args``, and conflicts with values already in ``environ``."""
    if (args.tp_size or 1) <= 1:
        return {}, []
    conflicts = [
        f"{k}={environ[k]} in the environment: --corun with TP > 1 needs {k}={v}. Fix: unset {k}"
        for k, v in NCCL_ENV.items() if k in environ and environ[k] != v
    ]
    return dict(NCCL_ENV), conflicts


def violations(args: Any, attention_backends: tuple[str, str]) -> list[str]:
    """Contract violations in a *resolved* configuration.

    SGLang's own resolution may rewrite options after ``defaults()`` (a model
    override, a platform fallback); this is the check that nothing it did
    breaks the invariants in the module docstring. ``attention_backends`` is
    SGLang's resolved (prefill, decode) pair.
    """
    problems = refusals(args)
    graph = args.cuda_graph_config.decode
    if graph.backend != "full":
        problems.append(f"decode CUDA graph resolved to backend '{graph.backend}', not 'full'")
    if list(graph.bs or []) != decode_sizes(args):
        problems.append(f"decode CUDA graph sizes resolved to {graph.bs}, not {decode_sizes(args)}")
    prefill_backend = args.cuda_graph_config.prefill.backend
    if prefill_backend not in PREFILL_GRAPH_BACKENDS:
        problems.append(
            f"prefill CUDA graph resolved to backend '{prefill_backend}', not one of "
            f"{sorted(PREFILL_GRAPH_BACKENDS)}"
        )
    pack = prefill_pack(args)
    wanted = PREFILL_REQUESTS_PER_BATCH if pack is None else None
    if args.prefill_max_requests != wanted:
        problems.append(f"prefill_max_requests resolved to {args.prefill_max_requests}, not {wanted}")
    if pack is not None:
        from corun_sglang.packing import graph_counts, pack_problems

        problems += [f"prefill pack: {p}" for p in pack_problems(pack, args.chunked_prefill_size)]
        prefill = args.cuda_graph_config.prefill
        if prefill_backend != "breakable":
            problems.append(f"a prefill pack needs the breakable prefill graph; it resolved to '{prefill_backend}'")
        elif list(prefill.bs or []) != graph_counts(prefill.bs or [], pack):
            problems.append(f"prefill CUDA graph token counts resolved to {prefill.bs}, not "
                            f"{graph_counts(prefill.bs or [], pack)}")
    fused = getattr(args, "flashinfer_allreduce_fusion_backend", None)
    if fused is not None:
        problems.append(f"all-reduce resolved to FlashInfer's fused all-reduce ('{fused}'), not NCCL's tree")
    grid = prefix_grid(args)
    if grid is None and not args.disable_radix_cache:
        problems.append("the radix cache is on; --corun needs it off (--disable-radix-cache)")
    if grid is not None:
        if args.disable_radix_cache:
            problems.append("--corun-prefix-cache: the radix cache resolved to off")
        if args.chunked_prefill_size != grid:
            problems.append(f"--corun-prefix-cache: chunked_prefill_size resolved to {args.chunked_prefill_size}, "
                            f"not its grid of {grid}")
        if (args.page_size or 1) != 1:
            problems.append(f"--corun-prefix-cache: page_size resolved to {args.page_size}; its chunk ends need 1")
    if args.sampling_backend != SAMPLING_BACKEND:
        problems.append(
            f"sampling backend resolved to '{args.sampling_backend}', not '{SAMPLING_BACKEND}'"
        )
    if tuple(attention_backends) != (ATTENTION_BACKEND, ATTENTION_BACKEND):
        problems.append(
            f"attention resolved to (prefill, decode) = {tuple(attention_backends)}, "
            f"not {ATTENTION_BACKEND} for both; pass --attention-backend {ATTENTION_BACKEND}"
        )
    runner = getattr(args, "moe_runner_backend", None)
    if skips_moe_padding(args) and runner not in MOE_PADDING_RUNNERS:
        problems.append(
            f"--corun-moe-padding skip: the MoE runner resolved to '{runner}'; only the Triton kernels "
            "give a row without an expert zeros. Fix: --moe-runner-backend triton, or "
            "--corun-moe-padding compute"
        )
    return problems


def resolve(args: Any, attention_backends: tuple[str, str], shortest: int | None = None,
            prefill_kernel: str | None = None) -> CorunConfig:
    """The frozen configuration of a resolved ``args``; raises ``CorunConfigError`` if any check fails.

    Where it packs, ``shortest`` is the prefill pack's shortest packable prompt and ``prefill_kernel`` the
    kernel rule it rests on: ``fa3`` where it is below FA2's query-tile rule (``packing.shortest``)."""
    problems = violations(args, attention_backends)
    if problems:
        raise CorunConfigError(problems)
    return CorunConfig(
        decode_batch_size=args.max_running_requests,
        decode_tiers=decode_tiers(args),
        decode_tiers_verified=getattr(args, TIER_RECORD_ATTR, None) is not None,
        prefill_requests_per_batch=PREFILL_REQUESTS_PER_BATCH if prefill_pack(args) is None else None,
        prefill_graph=args.cuda_graph_config.prefill.backend,
        chunked_prefill_size=args.chunked_prefill_size,
        page_size=args.page_size,
        attention_backend=ATTENTION_BACKEND,
        sampling_backend=args.sampling_backend,
        random_seed=args.random_seed,
        moe_padding=moe_padding(args),
        prefill_pack=prefill_pack(args),
        prefill_pack_shortest=shortest,
        prefill_pack_kernel=prefill_kernel,
        prefill_pack_verified=getattr(args, PACK_RECORD_ATTR, None) is not None,
        prefill_pack_wait=getattr(args, "corun_prefill_pack_wait", 0) or 0,
        prefix_grid=prefix_grid(args),
        tier_record=getattr(args, TIER_RECORD_ATTR, None),
        pack_record=getattr(args, PACK_RECORD_ATTR, None),
    )
