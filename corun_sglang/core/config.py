"""What ``--corun`` sets and the frozen configuration it resolves to (what it refuses: ``refusals``).

Pure functions over an object with SGLang's ``ServerArgs`` attributes and the ``Records`` a server serves;
nothing here imports SGLang or mutates its argument. The start (``pipeline.build``) applies ``defaults`` before
SGLang resolves its options and ``freeze`` after, so that every decision below can be tested on plain objects.

Invariants of a configuration that ``resolve()`` accepts:
- decode runs CUDA graphs only, of batch size N = ``max_running_requests`` and of
  the decode tiers below N (``corun_sglang.records.record``; none unless given), with
  padding (a smaller batch replays the smallest graph that holds it);
- prefill and decode never share a batch (no mixed chunk), and the radix cache
  is off (a cache hit would change the prefill shape of a request), or, with
  ``--corun-prefix-cache``, on with every prompt's prefill chunked on the grid of
  ``corun_sglang.core.prefix_cache`` and only the hits that grid makes exact served (no prefill pack);
- a prefill batch holds one request, or, with a prefill pack (``corun_sglang.core.packing``), packable
  prompts only, on SGLang's breakable prefill graph, which captures no token count below the pack;
  without a pack, prefill runs eagerly or on the breakable graph (``PREFILL_GRAPH_BACKENDS``);
- prefill and decode attention run on FlashInfer;
- every scheduler process runs the model's unquantized GEMMs through ``gemm_library``
  (``--corun-gemm-library``: PyTorch's preferred BLAS, cuBLASLt unless given);
- sampling runs on the ``corun`` backend (request-bound random draws);
- SGLang's batch-invariant ops (``--enable-deterministic-inference``) stay off;
- MoE padding rows (``--corun-moe-padding``) resolve to ``skip`` or ``compute``; ``skip`` only
  where SGLang's MoE runner is its Triton kernels, which give a row without an expert zeros
  (``corun_sglang.core.moe_padding``);
- no feature that splits, reshapes or redistributes a batch (speculative
  decoding, DP attention, PD disaggregation, pipeline parallelism, two-batch
  overlap); TP 1 or 2 (``TP_SIZES_VERIFIED``), with TP 2 every all-reduce on
  NCCL's tree (``NCCL_ENV``; no custom or FlashInfer-fused all-reduce);
- the decode tiers and the prefill pack it serves are a verified record's (``CorunConfig.tier_record``,
  ``CorunConfig.pack_record``), or unverified candidates that make no determinism promise;
- every other SGLang option is free, at a verified value, or at SGLang's
  default (``corun_sglang.core.options``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

#: N when ``--max-running-requests`` is not given.
DEFAULT_MAX_RUNNING_REQUESTS = 256

#: The only attention backend whose decode path runs without split-KV here.
ATTENTION_BACKEND = "flashinfer"

#: The GEMM library ``--corun`` runs unquantized GEMMs through unless ``--corun-gemm-library`` names another:
#: through cuBLASLt a Qwen3 shape's narrow decode GEMMs give a row one order of summation from 32 rows up on
#: an H100 and an H200, through cuBLAS from 128 and 72 rows (docs/results/gemm_tiers.md), at the same speed.
GEMM_LIBRARY = "cublaslt"

#: The sampling backend whose draws are bound to requests (``corun_sglang.serving.sampler``).
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


def batch_size(args: Any) -> int:
    """N, the decode graph's batch size: ``--max-running-requests``, else ``DEFAULT_MAX_RUNNING_REQUESTS``."""
    return args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS


@dataclasses.dataclass(frozen=True)
class Records:
    """The decode tiers and the prefill pack a server serves: verified records (``record.TiersRecord``,
    ``record.PackRecord``, given or calibrated) or unverified candidates (for the probes), and how long a
    pack waits for more prompts (``packing.waits``). Nothing given: plain N and isolated prefill."""

    tier_record: Any = None
    tier_candidates: tuple[int, ...] = ()
    pack_record: Any = None
    pack_candidate: int | None = None
    pack_wait: int | None = None  # None: not given (calibration's pack then waits calibration.PACK_WAIT)

    @property
    def decode_tiers(self) -> tuple[int, ...]:
        return tuple(self.tier_record.tiers) if self.tier_record is not None else tuple(self.tier_candidates)

    @property
    def pack(self) -> int | None:
        return self.pack_record.pack if self.pack_record is not None else self.pack_candidate


def graph_json(args: Any, phase: str) -> dict:
    """The ``--cuda-graph-config`` settings of ``phase`` (``prefill`` or ``decode``), as a dict."""
    cfg = getattr(args, "cuda_graph_config", None)
    if cfg is None:
        return {}
    if isinstance(cfg, dict):
        return dict(cfg.get(phase) or {})
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict().get(phase) or {})
    return {}


def prefix_grid(args: Any) -> int | None:
    """The prefill grid of ``--corun-prefix-cache`` (``prefix_cache.GRID``), or None without it."""
    from corun_sglang.core.prefix_cache import GRID

    return GRID if getattr(args, "corun_prefix_cache", False) else None


def prefill_graph_off(args: Any) -> bool:
    """The user runs prefill eagerly (no prefill CUDA graph)."""
    backend = getattr(args, "cuda_graph_backend_prefill", None) or graph_json(args, "prefill").get("backend")
    return bool(getattr(args, "disable_cuda_graph", False) or getattr(args, "disable_prefill_cuda_graph", False)
                or backend == "disabled")


def decode_sizes(args: Any, records: Records) -> list[int]:
    """Every decode graph size a ``--corun`` server captures: its tiers, then N."""
    from corun_sglang.core.tiers import capture_sizes

    return capture_sizes(records.decode_tiers, batch_size(args))


def unservable_pack(args: Any) -> str | None:
    """Why a calibrated prefill pack cannot be served with ``args`` (None: it can): the prefix cache prefills on
    its grid; the prefill graph options rule a pack out (``pack_graph_conflict``)."""
    if prefix_grid(args) is not None:
        return "--corun-prefix-cache prefills every prompt on its grid, never in packs"
    return pack_graph_conflict(args)


def pack_graph_conflict(args: Any) -> str | None:
    """Why SGLang's prefill graph options rule a prefill pack out (None: they do not): a pack pads in the
    breakable prefill graph, so it needs one, capturing no count below the pack."""
    if prefill_graph_off(args):
        return "prefill runs without a CUDA graph, and a pack pads in the breakable prefill graph"
    if args.cuda_graph_bs_prefill is not None or graph_json(args, "prefill").get("bs") is not None:
        return "the prefill graph token counts are given, and a pack captures its own"
    return None


def unservable_tiers(args: Any) -> str | None:
    """Why calibrated decode tiers cannot be served with ``args`` (None: they can): decode graph sizes given."""
    if args.cuda_graph_bs_decode is not None or graph_json(args, "decode").get("bs") is not None:
        return "the decode graph sizes are given"
    return None


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


def gemm_library(args: Any) -> str:
    """The library a ``--corun`` server's schedulers run unquantized GEMMs through (``GEMM_LIBRARY`` unless
    ``--corun-gemm-library`` names another)."""
    return getattr(args, "corun_gemm_library", None) or GEMM_LIBRARY


def skips_moe_padding(args: Any) -> bool:
    """Whether ``args`` serve ``--corun`` with the decode graphs' padding rows kept out of the MoE experts."""
    return bool(getattr(args, "corun", False)) and moe_padding(args) == "skip"


def defaults(args: Any, records: Records) -> dict[str, Any]:
    """The option values ``--corun`` sets before SGLang resolves the rest, for the decode tiers and prefill
    pack it serves (``records``).

    Only options the user left open are chosen; options the user set in a way
    that conflicts are reported by ``refusals`` instead.
    """
    n = batch_size(args)
    tp = ({"disable_custom_all_reduce": True, "enforce_disable_flashinfer_allreduce_fusion": True}
          if (args.tp_size or 1) > 1 else {})
    return {
        **tp,
        "max_running_requests": n,
        "cuda_graph_bs_decode": decode_sizes(args, records),
        "cuda_graph_max_bs_decode": n,
        "prefill_max_requests": PREFILL_REQUESTS_PER_BATCH if records.pack is None else None,
        "disable_radix_cache": prefix_grid(args) is None,
        **({} if prefix_grid(args) is None else {"chunked_prefill_size": prefix_grid(args)}),
        "attention_backend": ATTENTION_BACKEND,
        "sampling_backend": SAMPLING_BACKEND,
        "random_seed": DEFAULT_RANDOM_SEED if args.random_seed is None else args.random_seed,
    }


@dataclasses.dataclass(frozen=True)
class Served:
    """What a server serves that a record verifies: its ``record`` (None: unverified candidates, for
    ``corun-sglang <command>``), given with ``option``."""

    record: Any
    option: str
    command: str


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
    gemm_library: str = GEMM_LIBRARY
    prefill_pack: int | None = None
    prefill_pack_shortest: int | None = None
    prefill_pack_kernel: str | None = None
    prefill_pack_verified: bool = False
    prefill_pack_wait: int = 0
    prefix_grid: int | None = None  # --corun-prefix-cache: its prefill grid (prefix_cache.GRID), else None
    tp_invariant: int | None = None  # --corun-tp-invariant: K, the shards every parallel GEMM runs as
    prefill_graph_sizes: tuple[int, ...] | None = None  # the prefill CUDA graph's token counts, as resolved
    default_max_new_tokens: int | None = None  # --corun-default-max-new-tokens
    measured: tuple[str, ...] = ()  # --corun-measure: refused request parameters served, unverified
    tier_record: Any = None  # records.record.TiersRecord
    pack_record: Any = None  # records.record.PackRecord
    calibration: Any = None  # calibration.Calibration.as_info(): what calibration served and why

    @property
    def decode_sizes(self) -> list[int]:
        """Every decode graph size the server captures: its tiers, then N."""
        from corun_sglang.core.tiers import capture_sizes

        return capture_sizes(self.decode_tiers, self.decode_batch_size)

    @property
    def packing(self) -> tuple[int, int] | None:
        """The prefill pack and its shortest packable prompt, or None (isolated prefill)."""
        return None if self.prefill_pack is None else (self.prefill_pack, self.prefill_pack_shortest)

    def served_records(self) -> list:
        """What a record verifies that this server serves (``Served``): its decode tiers and its prefill pack,
        each with its record, or None for unverified candidates."""
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
        wait = (f", a pack cut short or underfilled waits up to {self.prefill_pack_wait} decode steps"
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
            f"moe_padding={self.moe_padding}, gemm={self.gemm_library}, {self._cache()}, mixed_chunk=off, "
            "batch_invariant_ops=off"
            + (f", tp_invariant={self.tp_invariant} shards (UNVERIFIED across TP sizes)" if self.tp_invariant else "")
            + (f", UNVERIFIED request parameters served: {', '.join(self.measured)}" if self.measured else "")
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


#: Resolved options that switch on what ``--corun`` refuses (``refusals``), should SGLang's resolution turn one
#: on by itself (a model override, a platform fallback): each named as its refusal names it.
RESOLVED_OFF = (
    ("enable_mixed_chunk", "--enable-mixed-chunk"), ("speculative_algorithm", "--speculative-algorithm"),
    ("enable_dp_attention", "--enable-dp-attention"), ("enable_two_batch_overlap", "--enable-two-batch-overlap"),
    ("enable_single_batch_overlap", "--enable-single-batch-overlap"), ("enable_pdmux", "--enable-pdmux"),
    ("enable_dynamic_chunking", "--enable-dynamic-chunking"), ("enable_torch_compile", "--enable-torch-compile"),
    ("enable_hierarchical_cache", "--enable-hierarchical-cache"),
    ("enable_deterministic_inference", "--enable-deterministic-inference"),
    *((name, "--" + name.replace("_", "-")) for name in CUSTOM_COLLECTIVES),
)


def resolution_problems(args: Any, records: Records, attention_backends: tuple[str, str]) -> list[str]:
    """What SGLang's resolution made of ``args`` that breaks an invariant of the module docstring.

    The user's options were refused once, before (``refusals``); SGLang's own resolution may still rewrite
    options after ``defaults`` (a model override, a platform fallback), and this checks what it resolved.
    ``attention_backends`` is SGLang's resolved (prefill, decode) pair.
    """
    problems = [f"{flag} resolved on: --corun needs it off" for name, flag in RESOLVED_OFF
                if getattr(args, name, None) not in (None, False)]
    graph = args.cuda_graph_config.decode
    if graph.backend != "full":
        problems.append(f"decode CUDA graph resolved to backend '{graph.backend}', not 'full'")
    if list(graph.bs or []) != decode_sizes(args, records):
        problems.append(f"decode CUDA graph sizes resolved to {graph.bs}, not {decode_sizes(args, records)}")
    prefill_backend = args.cuda_graph_config.prefill.backend
    if prefill_backend not in PREFILL_GRAPH_BACKENDS:
        problems.append(
            f"prefill CUDA graph resolved to backend '{prefill_backend}', not one of "
            f"{sorted(PREFILL_GRAPH_BACKENDS)}"
        )
    pack = records.pack
    wanted = PREFILL_REQUESTS_PER_BATCH if pack is None else None
    if args.prefill_max_requests != wanted:
        problems.append(f"prefill_max_requests resolved to {args.prefill_max_requests}, not {wanted}")
    if pack is not None:
        from corun_sglang.core.packing import graph_counts, pack_problems

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


def freeze(args: Any, records: Records, attention_backends: tuple[str, str], shortest: int | None = None,
           prefill_kernel: str | None = None, calibration: Any = None) -> CorunConfig:
    """The frozen configuration of a resolved ``args`` serving ``records``; raises ``CorunConfigError`` if
    SGLang's resolution broke an invariant (``resolution_problems``).

    Where it packs, ``shortest`` is the prefill pack's shortest packable prompt and ``prefill_kernel`` the
    kernel rule it rests on: ``fa3`` where it is below FA2's query-tile rule (``packing.shortest``);
    ``calibration`` is what calibration served and why (``calibration.Calibration.as_info()``)."""
    problems = resolution_problems(args, records, attention_backends)
    if problems:
        raise CorunConfigError(problems)
    prefill = args.cuda_graph_config.prefill
    return CorunConfig(
        decode_batch_size=args.max_running_requests,
        decode_tiers=records.decode_tiers,
        decode_tiers_verified=records.tier_record is not None,
        prefill_requests_per_batch=PREFILL_REQUESTS_PER_BATCH if records.pack is None else None,
        prefill_graph=prefill.backend,
        chunked_prefill_size=args.chunked_prefill_size,
        page_size=args.page_size,
        attention_backend=ATTENTION_BACKEND,
        sampling_backend=args.sampling_backend,
        random_seed=args.random_seed,
        moe_padding=moe_padding(args),
        gemm_library=gemm_library(args),
        prefill_pack=records.pack,
        prefill_pack_shortest=shortest,
        prefill_pack_kernel=prefill_kernel,
        prefill_pack_verified=records.pack_record is not None,
        prefill_pack_wait=records.pack_wait or 0,
        prefix_grid=prefix_grid(args),
        tp_invariant=getattr(args, "corun_tp_invariant", None),
        prefill_graph_sizes=None if prefill.bs is None else tuple(prefill.bs),
        default_max_new_tokens=getattr(args, "corun_default_max_new_tokens", None),
        measured=tuple(sorted({n.strip() for n in (getattr(args, "corun_measure", None) or "").split(",")
                               if n.strip()})),
        tier_record=records.tier_record,
        pack_record=records.pack_record,
        calibration=calibration,
    )
