"""A ``--corun`` server's configuration, built one way: check, records, defaults, SGLang resolves, freeze.

``build`` runs the stages in order, each once:

1. **check**: the startup check (``startup.problems``), the NCCL environment's conflicts, every refusal of
   ``refusals`` and of the options allowlist (``options.refusals``) and the records given on the command line
   (``--corun-decode-tiers``, ``--corun-prefill-pack`` and their candidates, loaded and checked); every
   problem is raised at once, before anything is calibrated;
2. **records**: the records given, else those calibration verified for this environment
   (``calibration.prepare``, which returns them and writes nothing into the options), less what the options
   exclude (``config.unservable_tiers``, ``config.unservable_pack``); a record that does not fit this server
   is a problem, raised;
3. **defaults**: the options ``--corun`` chooses for those records (``config.defaults``) are set, and the NCCL
   environment exported for the processes to come;
4. **SGLang resolves** the rest (``resolve``); with a prefill pack, its resolved prefill graph keeps the token
   counts from the pack up (``_pack_graphs``), part of that resolution;
5. **freeze**: ``config.freeze`` checks what the resolution made and returns the ``CorunConfig`` every adapter
   reads (``adapters.state.config``).

Invariants: the options are written only in stages 3 and 4; records travel as objects, never as paths written
into the options or attributes hidden on them; each refusal is evaluated once.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Mapping, MutableMapping

from corun_sglang.core import config, options, packing, refusals
from corun_sglang.probes import calibration
from corun_sglang.records.record import PackRecord, TiersRecord
from corun_sglang.core import tiers
from corun_sglang.serving import kernel_probe
from corun_sglang.core.config import CorunConfigError, Records

logger = logging.getLogger(__name__)


def given_records(args: Any) -> tuple[Records, list[str]]:
    """The records and candidates given on the command line, loaded, and what keeps them from being served."""
    problems: list[str] = []
    n = config.batch_size(args)
    found: dict[str, Any] = {"pack_wait": args.corun_prefill_pack_wait}
    try:
        if args.corun_decode_tiers:
            record = TiersRecord.load(args.corun_decode_tiers)
            problems += [f"--corun-decode-tiers {args.corun_decode_tiers}: {p}. Fix: run `corun-sglang verify-tiers` "
                         "with this N, or drop --corun-decode-tiers" for p in tiers.problems(record, n)]
            found["tier_record"] = record
        elif args.corun_decode_tier_candidates:
            sizes = tuple(tiers.parse_sizes(args.corun_decode_tier_candidates))
            wide = [m for m in sizes if m >= n]
            if wide:
                problems.append(f"--corun-decode-tier-candidates: {wide} are not below N = {n}. Fix: drop them")
            found["tier_candidates"] = sizes
    except tiers.TiersError as exc:
        problems.append(str(exc))
    try:
        if args.corun_prefill_pack:
            record = PackRecord.load(args.corun_prefill_pack)
            problems += [f"--corun-prefill-pack {args.corun_prefill_pack}: {p}. Fix: run `corun-sglang "
                         "verify-prefill-pack` with a smaller pack"
                         for p in packing.pack_problems(record.pack, args.chunked_prefill_size)]
            found["pack_record"] = record
        elif args.corun_prefill_pack_candidate:
            problems += [f"--corun-prefill-pack-candidate: {p}. Fix: choose another pack"
                         for p in packing.pack_problems(args.corun_prefill_pack_candidate, args.chunked_prefill_size)]
            found["pack_candidate"] = args.corun_prefill_pack_candidate
    except packing.PackingError as exc:
        problems.append(str(exc))
    return Records(**found), problems


def _wait_problems(records: Records) -> list[str]:
    wait = records.pack_wait or 0
    if wait < 0:
        return [f"--corun-prefill-pack-wait {wait}: a number of decode steps, 0 or more. Fix: pass 0 to never wait"]
    if wait and records.pack is None:
        return [f"--corun-prefill-pack-wait {wait}: a pack waits only with --corun-prefill-pack. Fix: add "
                "--corun-prefill-pack, or drop it"]
    return []


def check(args: Any, sglang_defaults: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[dict, Records]:
    """Stage 1: every problem of the options as given, raised at once; the NCCL environment to export and the
    records given."""
    from corun_sglang.serving import startup

    from corun_sglang.core import requests_check

    env, conflicts = config.collective_env(args, environ)
    given, problems = given_records(args)
    try:
        requests_check.measured_names(getattr(args, "corun_measure", None))
    except ValueError as exc:
        problems.append(f"{exc}. Fix: name only parameters a GPU queue chunk measures, or drop --corun-measure")
    problems = (startup.problems() + conflicts + problems + refusals.refusals(args, given)
                + options.refusals(args, sglang_defaults))
    if problems:
        raise CorunConfigError(problems)
    return env, given


def _calibration_flags(args: Any, sglang_defaults: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The serving command's options a candidate server gets, and those that name a calibration (its key)."""
    free = {name for name in sglang_defaults if (g := options.group_of(name)) is not None
            and g.kind == "free" and not g.why.startswith("the model")}
    own = []  # corun's own options that change a kernel, where not at their defaults
    if args.corun_moe_padding != "auto":
        own += ["--corun-moe-padding", args.corun_moe_padding]
    if config.gemm_library(args) != config.GEMM_LIBRARY:
        own += ["--corun-gemm-library", config.gemm_library(args)]
    server_flags = calibration.flags(args, sglang_defaults, free) + own
    # how much memory the server takes sizes its KV pool, not a kernel: it does not name a calibration
    key_flags = calibration.flags(args, sglang_defaults, free | calibration.MEMORY_OPTIONS) + own
    return server_flags, key_flags


def records(args: Any, given: Records, sglang_defaults: Mapping[str, Any],
            probes: calibration.Probes | None = None) -> tuple[Records, calibration.Calibration]:
    """Stage 2: the records this server serves: those given, else calibration's (verified first where this
    environment has none), less what the options exclude; raises on a record that does not fit."""
    server_flags, key_flags = _calibration_flags(args, sglang_defaults)
    gpu = calibration.gpu_name() if args.corun_calibrate != "off" else None
    found = calibration.prepare(args, lambda: calibration.key_parts(args, key_flags, gpu), gpu,
                                probes=probes, server_flags=server_flags)
    served, problems = given, []
    if found.tiers is not None:
        if (why := config.unservable_tiers(args)) is not None:
            found.refuse("tiers", why)
        else:
            served = _replace(served, tier_record=TiersRecord.load(found.tiers_file))
            problems += [f"calibration {found.folder}: {p}" for p in tiers.problems(served.tier_record,
                                                                                      config.batch_size(args))]
    if found.pack is not None:
        if (why := config.unservable_pack(args)) is not None:
            found.refuse("pack", why)
        else:
            served = _replace(served, pack_record=PackRecord.load(found.pack_file),
                              pack_wait=calibration.PACK_WAIT if served.pack_wait is None else served.pack_wait)
    problems += _wait_problems(served)
    if problems:
        raise CorunConfigError(problems)
    for part, why in found.why.items():
        logger.warning("corun calibration: %s not served: %s", part, why)
    if served.tier_candidates:
        logger.warning("corun decode tier candidates %s: unverified, outputs are NOT deterministic",
                       list(served.tier_candidates))
    if served.pack_candidate:
        logger.warning("corun prefill pack candidate %s: unverified, outputs are NOT deterministic",
                       served.pack_candidate)
    if getattr(args, "corun_measure", None):
        logger.warning("corun --corun-measure %s: these request parameters are served UNVERIFIED, for the GPU "
                       "queue chunk that measures them", args.corun_measure)
    return served, found


def _replace(served: Records, **changes) -> Records:
    import dataclasses

    return dataclasses.replace(served, **changes)


def _pack_graphs(args: Any, served: Records) -> tuple[int | None, str | None]:
    """Stage 4, with a prefill pack: its resolved breakable prefill graph captures no token count below the pack;
    its shortest packable prompt and the kernel rule that length rests on (``FA3`` below FA2's rule, else
    ``FA2``). A record serves from its own shortest, never below what this machine's prefill kernel allows."""
    pack = served.pack
    if pack is None:
        return None, None
    prefill = args.cuda_graph_config.prefill
    if prefill.backend == "breakable":
        prefill.bs = packing.graph_counts(prefill.bs or [], pack)
        prefill.max_bs = prefill.bs[-1]
    model = args.get_model_config()
    from sglang.srt.environ import envs

    paged = envs.SGLANG_FLASHINFER_USE_PAGED.get() or model.is_multimodal or bool(args.enable_mis)
    kernel = kernel_probe.prefill_kernel(model.head_dim, model.dtype, paged)
    least = packing.shortest(model.num_attention_heads, model.num_key_value_heads, kernel)
    record = served.pack_record
    if record is not None and record.shortest < least:
        raise CorunConfigError(
            [f"--corun-prefill-pack {record.source}: verified with prompts from {record.shortest} tokens; "
             f"this model on FlashInfer's {kernel} prefill packs prompts from {least}. Fix: run "
             "`corun-sglang verify-prefill-pack` with this model here"])
    shortest = least if record is None else record.shortest
    fa2_least = packing.shortest(model.num_attention_heads, model.num_key_value_heads, packing.FA2)
    return shortest, (packing.FA3 if shortest < fa2_least else packing.FA2)


def build(args: Any, sglang_defaults: Mapping[str, Any], resolve: Callable[[], None],
          environ: MutableMapping[str, str] = os.environ, probes: calibration.Probes | None = None) -> config.CorunConfig:
    """``args``' ``CorunConfig``, the stages of the module docstring in order; ``resolve`` is SGLang's own
    resolution of ``args`` (its ``ServerArgs.__post_init__``)."""
    env, given = check(args, sglang_defaults, environ)
    served, calibrated = records(args, given, sglang_defaults, probes)
    for name, value in config.defaults(args, served).items():
        setattr(args, name, value)
    environ.update(env)  # inherited by the scheduler processes started later
    resolve()
    shortest, kernel = _pack_graphs(args, served)
    return config.freeze(args, served, args.get_attention_backends(), shortest, kernel, calibrated.as_info())

