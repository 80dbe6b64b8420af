"""The options ``--corun`` refuses: one table, each entry naming the option, why, and the fix.

Every refusal is a pure predicate over the user's options (an object with SGLang's ``ServerArgs``
attributes, before SGLang resolves them) and the records they give (``config.Records``). The server's
start evaluates each exactly once (``refusals``), before anything is calibrated or loaded;
``config.resolution_problems`` checks, once SGLang has resolved, only what that resolution could change.
``without_corun`` names the ``--corun-*`` options given without ``--corun``.

Invariants: nothing here changes its arguments or imports SGLang; every message names the option, says why
it would break the contract, and gives the fix (``docs/options.md`` lists them, generated).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from corun_sglang.core import config


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An option ``--corun`` refuses: ``applies(args, records)`` is true when it is set."""

    option: str
    applies: Callable[[Any, "config.Records"], bool]
    why: str
    fix: str

    def message(self) -> str:
        return f"{self.option}: {self.why}. Fix: {self.fix}."


def _attention_backends_given(args: Any) -> set:
    return {
        getattr(args, name, None)
        for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    } - {None}


def _prefill_graph_unverified(args: Any, records: "config.Records") -> bool:
    """The user asked for a prefill CUDA graph backend outside ``config.PREFILL_GRAPH_BACKENDS``."""
    backend = getattr(args, "cuda_graph_backend_prefill", None) or config.graph_json(args, "prefill").get("backend")
    return backend is not None and backend not in config.PREFILL_GRAPH_BACKENDS


def _prefill_bs_conflict(args: Any, records: "config.Records") -> bool:
    """Prefill graph token counts were given that capture a count below the pack."""
    from corun_sglang.core.packing import graph_counts

    given = [args.cuda_graph_bs_prefill, config.graph_json(args, "prefill").get("bs")]
    return records.pack is not None and any(bs is not None and list(bs) != graph_counts(bs, records.pack)
                                            for bs in given)


def _tp_invariant_unsplittable(args: Any) -> bool:
    k = getattr(args, "corun_tp_invariant", None)
    return k is not None and (k < 2 or k % (args.tp_size or 1) != 0)


def _decode_sizes_conflict(args: Any, records: "config.Records") -> bool:
    n = config.batch_size(args)
    sizes = config.decode_sizes(args, records)
    given = [
        ("bs", args.cuda_graph_bs_decode),
        ("max_bs", args.cuda_graph_max_bs_decode),
        ("bs", config.graph_json(args, "decode").get("bs")),
        ("max_bs", config.graph_json(args, "decode").get("max_bs")),
    ]
    for key, value in given:
        if value is None:
            continue
        if key == "bs" and list(value) != sizes:
            return True
        if key == "max_bs" and value != n:
            return True
    return False


def _decode_graph_off(args: Any, records: "config.Records") -> bool:
    backend = args.cuda_graph_backend_decode or config.graph_json(args, "decode").get("backend")
    return bool(
        getattr(args, "disable_cuda_graph", False)
        or args.disable_decode_cuda_graph
        or (backend is not None and backend != "full")
    )


REFUSALS: tuple[Refusal, ...] = (
    Refusal(
        "--corun-default-max-new-tokens",
        lambda a, r: getattr(a, "corun_default_max_new_tokens", None) is not None and a.corun_default_max_new_tokens < 1,
        "a number of new tokens: 1 or more",
        "pass 1 or more, or drop it to keep SGLang's default (the rest of the context)",
    ),
    Refusal(
        "--max-running-requests",
        lambda a, r: a.max_running_requests is not None and a.max_running_requests < 1,
        "N, the decode graph's batch size, is the number of requests that run at once: 1 or more",
        f"pass 1 or more, or leave it unset for {config.DEFAULT_MAX_RUNNING_REQUESTS}",
    ),
    Refusal(
        "--enable-deterministic-inference",
        lambda a, r: bool(a.enable_deterministic_inference),
        "SGLang's batch-invariant mode and --corun are alternative ways to determinism; "
        "--corun replaces the slow batch-invariant kernels and cannot run on top of them",
        "pass only one of --corun and --enable-deterministic-inference",
    ),
    Refusal(
        "--rl-on-policy-target",
        lambda a, r: a.rl_on_policy_target is not None,
        "it switches on SGLang's batch-invariant mode (--enable-deterministic-inference)",
        "drop --rl-on-policy-target, or drop --corun",
    ),
    Refusal(
        "--enable-mixed-chunk",
        lambda a, r: bool(a.enable_mixed_chunk),
        "mixed chunk puts prefill tokens into decode batches, so a decode step's shape "
        "would depend on which prompts arrive",
        "remove --enable-mixed-chunk",
    ),
    Refusal(
        "--speculative-algorithm",
        lambda a, r: a.speculative_algorithm is not None,
        "speculative decoding verifies a data-dependent number of tokens per step, "
        "so decode shapes vary with co-runners",
        "remove the --speculative-* options",
    ),
    Refusal(
        "--enable-dp-attention",
        lambda a, r: bool(a.enable_dp_attention),
        "data-parallel attention runs the MLP of every rank's requests as one batch, so a request's "
        "shapes depend on the requests of the other ranks",
        "remove --enable-dp-attention; for more throughput, run identical --corun replicas behind "
        "SGLang's router (docs/deployment.md)",
    ),
    Refusal(
        "--dp-size",
        lambda a, r: (a.dp_size or 1) > 1,
        "SGLang's data-parallel controller (one scheduler per rank behind one server) has not run under "
        "--corun on a GPU: its calibration, records and contract stops are verified for one scheduler",
        "use --dp-size 1 and run identical --corun replicas, one per GPU or TP group, behind SGLang's "
        "router (docs/deployment.md)",
    ),
    Refusal(
        "--disaggregation-mode",
        lambda a, r: (a.disaggregation_mode or "null") != "null",
        "PD disaggregation is not covered by the CoRun contract yet",
        "run a single colocated server (--disaggregation-mode null)",
    ),
    Refusal(
        "--pp-size",
        lambda a, r: (a.pp_size or 1) > 1,
        "pipeline parallelism interleaves micro-batches whose shapes depend on co-runners",
        "use --pp-size 1",
    ),
    Refusal(
        "--tp-size",
        lambda a, r: (a.tp_size or 1) not in config.TP_SIZES_VERIFIED,
        "only the tensor-parallel sizes whose fixed-order all-reduce has been verified on GPUs "
        f"are served ({sorted(config.TP_SIZES_VERIFIED)})",
        f"use --tp-size {max(config.TP_SIZES_VERIFIED)} or less",
    ),
    Refusal(
        "--corun-tp-invariant",
        lambda a, r: _tp_invariant_unsplittable(a),
        "K counts the shards every parallel GEMM runs as: at least 2, and a multiple of the TP size",
        "give --corun-tp-invariant a multiple of --tp-size, at least 2 (e.g. 2 for TP 1 and 2)",
    ),
    Refusal(
        "--corun-tp-invariant with --quantization",
        lambda a, r: getattr(a, "corun_tp_invariant", None) is not None and bool(a.quantization),
        "only unquantized GEMMs are run as shards",
        "drop --quantization, or --corun-tp-invariant",
    ),
    Refusal(
        "--enable-nccl-nvls / --enable-symm-mem / --enable-mscclpp / --enable-torch-symm-mem / "
        "--enable-quant-communications / --enable-fused-moe-sum-all-reduce",
        lambda a, r: any(getattr(a, f, False) for f in config.CUSTOM_COLLECTIVES),
        "these collectives choose their reduction order by message size and topology",
        "remove them; --corun runs every all-reduce on NCCL's tree algorithm",
    ),
    Refusal(
        "--enable-two-batch-overlap / --enable-single-batch-overlap",
        lambda a, r: bool(a.enable_two_batch_overlap) or bool(a.enable_single_batch_overlap),
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
        lambda a, r: bool(a.disable_cuda_graph_padding),
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
        lambda a, r: bool(getattr(a, "corun_decode_tiers", None)) and bool(getattr(a, "corun_decode_tier_candidates", None)),
        "a server captures either verified tiers or candidates for verification",
        "pass only one of them",
    ),
    Refusal(
        "--prefill-max-requests",
        lambda a, r: a.prefill_max_requests not in (None, config.PREFILL_REQUESTS_PER_BATCH),
        "isolated prefill runs exactly one request per prefill batch (a prefill pack decides which "
        "prompts share one)",
        "drop --prefill-max-requests (or set it to 1)",
    ),
    Refusal(
        "--corun-prefill-pack / --corun-prefill-pack-candidate",
        lambda a, r: bool(getattr(a, "corun_prefill_pack", None)) and bool(getattr(a, "corun_prefill_pack_candidate", None)),
        "a server packs either a verified pack size or a candidate for verification",
        "pass only one of them",
    ),
    Refusal(
        "--disable-prefill-cuda-graph / --cuda-graph-backend-prefill disabled (with a prefill pack)",
        lambda a, r: r.pack is not None and config.prefill_graph_off(a),
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
        lambda a, r: config.prefix_grid(a) is not None and bool(getattr(a, "corun_prefill_pack", None)
                                                      or getattr(a, "corun_prefill_pack_candidate", None)),
        "the prefix cache prefills every prompt in chunks on its grid, which a pack of several prompts would "
        "break",
        "drop the prefill pack, or --corun-prefix-cache",
    ),
    Refusal(
        "--chunked-prefill-size (with --corun-prefix-cache)",
        lambda a, r: config.prefix_grid(a) is not None and a.chunked_prefill_size not in (None, config.prefix_grid(a)),
        "the prefix cache's prefill chunks are its grid (1,024 tokens), so a hit repeats the cold run's chunks",
        "drop --chunked-prefill-size",
    ),
    Refusal(
        "--disable-radix-cache (with --corun-prefix-cache)",
        lambda a, r: config.prefix_grid(a) is not None and bool(a.disable_radix_cache),
        "the prefix cache is SGLang's radix cache, serving only the hits its grid makes exact",
        "drop --disable-radix-cache, or --corun-prefix-cache",
    ),
    Refusal(
        "--enable-pdmux",
        lambda a, r: bool(a.enable_pdmux),
        "prefill-decode multiplexing runs prefill and decode on split streams with "
        "their own graphs",
        "remove --enable-pdmux",
    ),
    Refusal(
        "--sampling-backend",
        lambda a, r: a.sampling_backend not in (None, config.SAMPLING_BACKEND),
        "only the corun sampler binds a request's random draws to its seed and position "
        "(other samplers draw from a batch-wide generator)",
        f"drop --sampling-backend (or set it to {config.SAMPLING_BACKEND})",
    ),
    Refusal(
        "--enable-dynamic-chunking",
        lambda a, r: bool(getattr(a, "enable_dynamic_chunking", False)),
        "dynamic chunking sizes prefill chunks by load, so chunk boundaries would depend on "
        "co-runners",
        "remove --enable-dynamic-chunking",
    ),
    Refusal(
        "--enable-lora / --lora-paths",
        lambda a, r: bool(getattr(a, "enable_lora", None)) or bool(getattr(a, "lora_paths", None)),
        "LoRA batches select adapter-specific decode graphs, which --corun has not been verified with",
        "serve without LoRA adapters",
    ),
    Refusal(
        "--enable-return-hidden-states",
        lambda a, r: bool(getattr(a, "enable_return_hidden_states", False)),
        "requests that return hidden states need a decode graph other than the single size-N one",
        "remove --enable-return-hidden-states",
    ),
    Refusal(
        "--enable-torch-compile",
        lambda a, r: bool(getattr(a, "enable_torch_compile", False)),
        "torch.compile'd decode kernels have not been verified to be position-invariant",
        "remove --enable-torch-compile",
    ),
    Refusal(
        "--enable-hierarchical-cache",
        lambda a, r: bool(getattr(a, "enable_hierarchical_cache", False)),
        "the hierarchical cache extends the radix cache, which --corun turns off",
        "remove --enable-hierarchical-cache",
    ),
    Refusal(
        "--attention-backend / --prefill-attention-backend / --decode-attention-backend",
        lambda a, r: bool(_attention_backends_given(a) - {config.ATTENTION_BACKEND}),
        "only FlashInfer's decode attention has been made free of split-KV under --corun",
        f"use --attention-backend {config.ATTENTION_BACKEND} (or leave it unset)",
    ),
)


def refusals(args: Any, records: "config.Records | None" = None) -> list[str]:
    """Messages for every option in ``args`` that ``--corun`` refuses (empty when none), ``records`` being the
    decode tiers and prefill pack it serves (none given: ``config.Records()``)."""
    records = config.Records() if records is None else records
    return [r.message() for r in REFUSALS if r.applies(args, records)]


#: ``--corun-*`` options that mean nothing without ``--corun``: (fields, how the message names them, what).
PART_OF_CORUN = (
    (("corun_calibrate", "corun_calibration_dir"), "--corun-calibrate / --corun-calibration-dir",
     "calibration is part of --corun", "drop them"),
    (("corun_moe_padding",), "--corun-moe-padding", "part of --corun", "drop --corun-moe-padding"),
    (("corun_gemm_library",), "--corun-gemm-library", "part of --corun", "drop --corun-gemm-library"),
    (("corun_prefill_pack", "corun_prefill_pack_candidate", "corun_prefill_pack_wait"),
     "--corun-prefill-pack / --corun-prefill-pack-candidate / --corun-prefill-pack-wait",
     "packed prefill is part of --corun", "drop them"),
    (("corun_prefix_cache",), "--corun-prefix-cache", "the deterministic prefix cache is part of --corun",
     "drop --corun-prefix-cache (SGLang's own radix cache is on by default without --corun)"),
    (("corun_decode_tiers", "corun_decode_tier_candidates"), "--corun-decode-tiers / --corun-decode-tier-candidates",
     "decode tiers are part of --corun", "drop them"),
    (("corun_default_max_new_tokens",), "--corun-default-max-new-tokens", "part of --corun",
     "drop --corun-default-max-new-tokens"),
    (("corun_measure",), "--corun-measure", "part of --corun", "drop --corun-measure"),
    (("corun_tp_invariant",), "--corun-tp-invariant", "part of --corun", "drop --corun-tp-invariant"),
)

#: What each of those fields is when not given.
UNSET = {"corun_calibrate": "auto", "corun_moe_padding": "auto", "corun_gemm_library": config.GEMM_LIBRARY}


def without_corun(args: Any) -> list[str]:
    """The ``--corun-*`` options ``args`` give without ``--corun`` (empty with ``--corun``, or none given)."""
    if getattr(args, "corun", False):
        return []
    return [f"{option}: {why}. Fix: add --corun, or {fix}" for fields, option, why, fix in PART_OF_CORUN
            if any(getattr(args, f, None) not in (UNSET.get(f), None, False) for f in fields)]
