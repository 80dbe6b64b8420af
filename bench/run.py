"""Serving benchmark slices: STD vs BI vs CoRun, interleaved on one GPU, appended to a JSON-lines file.

A slice is one checkpoint shape, a set of workloads and concurrencies, and
``--reps`` repetitions; its rows carry ``--study`` (the report compares arms
only within one study). All arms' servers run side by side (only one is loaded
at a time), each with ``--static-gb`` of static memory (weights + KV pool,
turned into ``--mem-fraction-static`` from the memory free at its start) and,
with ``--max-total-tokens``, the same KV pool; every repetition visits the
arms in a rotated order, so drift on the host hits all arms alike. A model
too large for side by side takes ``--one-at-a-time``: each arm's server is
started when its turn comes and stopped before the next arm's starts, the
workloads of one round sharing each start (``plan``). A
repetition already in ``--out`` (or a ``--done`` file) with a row for every arm (same study, shape,
workload, concurrency) is skipped: a slice cut short resumes where it stopped;
a repetition cut short is run again whole, so the arms it pairs always ran
back to back on one GPU (``bench/report.py`` keeps the latest rows). Each row
records the GPU it ran on (``gpu_uuid``) and its decode wave: the
concurrency, or the most requests the server ran at once where it ran fewer
(``decode_wave``; the decode-phase measures follow that wave). Every server, before its
first measured run, serves ``--warmup`` requests of that run's workload (other
prompts, at most 16 new tokens each), unrecorded: first-use costs (kernel
selection, allocator growth) stay out of repetition 0. Every repetition sends
the same prompts and seeds, each measured run from an empty prefix cache
(``POST /flush_cache``); a row keeps a digest of each request's output tokens,
so the report counts the requests whose tokens every repetition reproduced. Each row also counts the
prompt tokens its requests sent, those the server's prefix cache served and the prefill tokens it
computed (``client.prefill``). The prefix-cache workloads (``workloads.PREFIX``) send an RL group's
samples back to back and a session's turns one after another (``client.run_sessions``); arms with the
deterministic prefix cache prefill on its grid (``GRID_ARMS``: their ``--chunked-prefill-size``).

    python -m bench.run --shape qwen3-8b --workloads sharegpt,fixed-1024-128 --reps 3 \\
        --out docs/results/bench/runs.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import socket
import sys
import time
import zlib
from pathlib import Path

from bench import client, common, serverlog, workloads

ARMS = {
    # the peers at their best: SGLang 0.5.17's own defaults (on an H200: FA3 attention, radix cache on),
    # and its batch-invariant mode at its own defaults (FA3 keeps its radix cache there); both also on
    # FlashInfer, the attention --corun serves
    "STD": [],
    "STD-flashinfer": ["--attention-backend", "flashinfer"],
    "BI": ["--enable-deterministic-inference"],
    "BI-flashinfer": ["--enable-deterministic-inference", "--attention-backend", "flashinfer"],
    # --corun alone: what a user gets, the decode tiers and prefill pack its calibration verified and
    # serves (the rows record it, ``calibration``); rows from before calibration are plain N
    "CoRun": ["--corun"],
    # ablation: CoRun with calibration off, plain N and isolated prefill
    "CoRun-nocal": ["--corun", "--corun-calibrate", "off"],
    # ablation: CoRun whose calibrated pack never waits for more prompts (packing.waits)
    "CoRun-nowait": ["--corun", "--corun-prefill-pack-wait", "0"],
    # ablation: CoRun's GEMMs through cuBLAS, PyTorch's default, and the decode tiers its calibration verifies there
    "CoRun-cublas": ["--corun", "--corun-gemm-library", "cublas"],
    # CoRun with its deterministic prefix cache: the radix cache on, serving the hits that keep the bits
    "CoRun-prefix": ["--corun", "--corun-prefix-cache"],
    # CoRun with decode tiers: the sizes of --tier-candidates that corun-sglang verify-tiers keeps (a given
    # record or candidate wins over calibration, so the records below are what these arms serve)
    "CoRun-tiers": ["--corun"],
    # CoRun-tiers with packed prefill: the pack of --pack (or --pack-size, verified first)
    "CoRun-tiers-pack": ["--corun"],
    # CoRun-tiers-pack whose packs wait up to 32 decode steps for more prompts (packing.waits)
    "CoRun-tiers-pack-wait": ["--corun", "--corun-prefill-pack-wait", "32"],
    # CoRun with a decode graph's padding rows routed through the MoE experts (the plain arm skips them)
    "CoRun-moecompute": ["--corun", "--corun-moe-padding", "compute"],
    # CoRun whose parallel GEMMs run as 2 fixed shards: the same bits at TP 1 and TP 2 (--corun-tp-invariant)
    "CoRun-tp2shards": ["--corun", "--corun-tp-invariant", "2"],
    # ablations (``--arms STD,SplitKV-off,SplitKV-off+IsoPrefill,CoRun``)
    "SplitKV-off": ["--corun-ablation", "splitkv-off"],
    "SplitKV-off+IsoPrefill": ["--corun-ablation", "splitkv-off+isolated-prefill"],
}


#: Arms that serve the deterministic prefix cache: their prefill chunks are its grid, whatever
#: ``--chunked-prefill-size`` the others get (the server refuses any other size).
GRID_ARMS = ("CoRun-prefix",)


def arm_shared(arm: str, shared: list[str]) -> list[str]:
    """The options every arm shares, as ``arm`` gets them: a grid arm's prefill chunk size is the grid."""
    from corun_sglang.core.prefix_cache import GRID

    if arm not in GRID_ARMS or "--chunked-prefill-size" not in shared:
        return shared
    out = list(shared)
    out[out.index("--chunked-prefill-size") + 1] = str(GRID)
    return out


def load_of(row: dict):
    """A row's load: its concurrency (closed loop), or ``rate=R`` (open loop at R requests/s)."""
    return f"rate={row['request_rate']:g}" if row.get("mode") == "open" else row["concurrency"]


def rate_of(load) -> float | None:
    """The request rate of an open-loop load, None for a concurrency."""
    return float(load.split("=", 1)[1]) if isinstance(load, str) else None


def done_keys(out: Path) -> set[tuple]:
    if not out.exists():
        return set()
    keys = set()
    for line in out.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            keys.add((r.get("study", ""), r["shape"], r["workload"], load_of(r), r["arm"], r["rep"]))
    return keys


def done_reps(out: Path, arms: list[str]) -> set[tuple]:
    """Repetitions finished whole: (study, shape, workload, concurrency, rep) with a row for every arm."""
    have = collections.defaultdict(set)
    for study, shape, workload, concurrency, arm, rep in done_keys(out):
        have[(study, shape, workload, concurrency, rep)].add(arm)
    return {key for key, got in have.items() if set(arms) <= got}


#: The warm-up's prompt seed.
WARMUP_SEED = 999_999_937


def prompt_seed(workload: str) -> int:
    """The seed of a workload's measured prompts: from its name alone, so every repetition, arm and
    slice sends the same prompts."""
    return zlib.crc32(workload.encode())


def arms_of(parser: argparse.ArgumentParser, spec: str) -> list[str]:
    """The arms a comma-separated ``--arms`` value names; a name not in ``ARMS`` is a usage error."""
    arms = spec.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}")
    return arms


def arm_args(specs: list[str], arms: list[str]) -> dict[str, list[str]]:
    """Each arm's extra server options from ``ARM=ARGS`` specs; every named arm must be one of ``arms``."""
    extra = {arm: [] for arm in arms}
    for spec in specs:
        arm, sep, args = spec.partition("=")
        if not sep or arm not in extra:
            raise SystemExit(f"--arm-args {spec!r}: expected ARM=ARGS with ARM one of {', '.join(arms)}")
        extra[arm] += args.split()
    return extra


def arm_env(specs: list[str], arms: list[str]) -> dict[str, dict[str, str]]:
    """Each arm's added server environment from ``ARM=NAME=VALUE`` specs; every named arm must be one of
    ``arms``. E.g. ``CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1``: that arm's GEMMs through cuBLASLt, its
    decode tiers verified under the same setting."""
    env = {arm: {} for arm in arms}
    for spec in specs:
        arm, _, setting = spec.partition("=")
        name, sep, value = setting.partition("=")
        if not sep or not name or arm not in env:
            raise SystemExit(f"--arm-env {spec!r}: expected ARM=NAME=VALUE with ARM one of {', '.join(arms)}")
        env[arm][name] = value
    return env


def requests_for(given: int, load) -> int:
    """Requests per run: ``given``, or for a concurrency 10 per unit (at least 300) so that the closed loop
    spends most of the run in steady state rather than in its first wave and its drain; for a request
    rate, a minute of arrivals (at least 300)."""
    if given > 0:
        return given
    rate = rate_of(load)
    return max(300, 10 * load) if rate is None else max(300, int(60 * rate))


def warmup_bodies(pairs: list[tuple[int, int]], count: int) -> list[dict]:
    """``count`` requests shaped like the workload's first ones (prompts no measured run sends,
    at most 16 new tokens each)."""
    pairs = pairs[:count]
    prompts = workloads.prompts(pairs, seed=WARMUP_SEED)
    return [client.request(p, min(o, 16), seed=i) for i, (p, (_, o)) in enumerate(zip(prompts, pairs))]


def schedule(arms: list[str], reps: int) -> list[tuple[int, str]]:
    """(rep, arm) in run order: each repetition visits every arm in the same cyclic order, starting
    with the arm the previous one ended with, so each arm takes each place in turn and, one server
    at a time, the boundary between repetitions needs no server start."""
    return [(rep, arms[(k - rep) % len(arms)]) for rep in range(reps) for k in range(len(arms))]


def plan(pending: dict[tuple, list[int]], arms: list[str], reps: int, one_at_a_time: bool) -> list[tuple]:
    """(workload, concurrency, rep, arm) in run order; ``pending`` maps each (workload, concurrency), in
    the order given, to its repetitions not yet run whole. Side by side: each in turn, its repetitions
    in ``schedule`` order. One at a time: round r holds every workload's r-th pending repetition and
    visits the arms in one cyclic order, each arm serving the round's workloads in the order given, so
    a server starts only when the arm changes and a workload resumed at repetition 2 shares its
    servers with one starting at repetition 0. Round r takes the order of repetition s + r, s the first
    pending repetition of the first workload: rounds join without a server start, and a workload's
    successive repetitions put each arm in each place in turn."""
    if not one_at_a_time:
        return [(*unit, rep, arm) for unit, todo in pending.items() for rep, arm in schedule(arms, reps) if rep in todo]
    units = [unit for unit, todo in pending.items() if todo]
    if not units:
        return []
    start = pending[units[0]][0]
    return [
        (*unit, pending[unit][r], arms[(k - start - r) % len(arms)])
        for r in range(max(len(pending[unit]) for unit in units))
        for k in range(len(arms))
        for unit in units if r < len(pending[unit])
    ]


def add_tier_options(parser: argparse.ArgumentParser) -> None:
    """The CoRun-tiers arm's record: one given, or the sizes to verify for one."""
    parser.add_argument("--tiers", help="a verify-tiers record for the CoRun-tiers arm, made for this checkpoint, "
                        "N and environment (the server refuses any other); default: verify --tier-candidates first")
    parser.add_argument("--tier-candidates", default="64,72,88,96,104,128,160,192,224",
                        help="decode graph sizes verified (corun-sglang verify-tiers) for the CoRun-tiers arm "
                             "when --tiers is not given")


#: Arms that serve the decode tiers record, and those that serve a prefill pack record.
TIERED = ("CoRun-tiers", "CoRun-tiers-pack", "CoRun-tiers-pack-wait")
PACKED = ("CoRun-tiers-pack", "CoRun-tiers-pack-wait")


def add_pack_options(parser: argparse.ArgumentParser) -> None:
    """The CoRun-tiers-pack arm's prefill pack: a record given, or the pack size to verify for one."""
    parser.add_argument("--pack", help="a verify-prefill-pack record for the CoRun-tiers-pack arm, made for this "
                        "checkpoint and environment; default: verify --pack-size first")
    parser.add_argument("--pack-size", type=int, default=1024,
                        help="prefill tokens of a pack, verified (corun-sglang verify-prefill-pack) for the "
                             "CoRun-tiers-pack arm when --pack is not given")


def pack_record(args, label: str, ckpt, shared: list[str]):
    """The prefill pack record: ``--pack`` where given, else the one of this checkpoint and server options,
    verified once and kept in the logs folder (``PackingError`` where the pack does not verify)."""
    from corun_sglang.probes import verify_packing
    from corun_sglang.records.record import PackRecord

    if args.pack:
        return PackRecord.load(Path(args.pack))
    path = Path(args.logs) / f"pack-{label}-{args.pack_size}.json"
    if path.exists():
        return PackRecord.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = verify_packing.verify(str(ckpt), args.pack_size, path, path.with_suffix(".log"), server_args=shared,
                                   static_gb=args.static_gb)
    print(verify_packing.render(record), flush=True)
    return PackRecord.load(path)


def server_info(url: str) -> dict:
    """``/server_info`` (empty for a server that does not answer)."""
    import httpx

    try:
        info = httpx.get(url + "/server_info", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def corun_contract(url: str) -> dict:
    """``/server_info``'s ``corun_contract`` (its ``calibration`` says what calibration served); empty for a
    server without ``--corun`` or one that does not answer."""
    return server_info(url).get("corun_contract") or {}


def served(info: dict) -> dict:
    """What a row records of the server that ran it: its KV pool (tokens) and resolved attention backend."""
    return {"kv_pool_tokens": info.get("max_total_num_tokens"), "attention_backend": info.get("attention_backend"),
            "radix_cache": None if "disable_radix_cache" not in info else not info["disable_radix_cache"]}


def tiers_record(args, label: str, ckpt, shared: list[str], env: dict[str, str] | None = None):
    """The decode tiers record: ``--tiers`` where given, else the one of this checkpoint, server options
    and added environment, verified once and kept in the logs folder."""
    from corun_sglang.probes import verify_tiers
    from corun_sglang.records.record import TiersRecord
    from corun_sglang.core import tiers

    if args.tiers:
        return TiersRecord.load(Path(args.tiers))
    setting = "".join(f"-{name}={value}" for name, value in sorted((env or {}).items()))
    path = Path(args.logs) / f"tiers-{label}-n{args.max_running_requests}{setting}.json"
    if path.exists():
        return TiersRecord.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = verify_tiers.verify(str(ckpt), tiers.parse_sizes(args.tier_candidates), args.max_running_requests,
                                 path, path.with_suffix(".log"), server_args=shared, static_gb=args.static_gb,
                                 env=env)
    print(verify_tiers.render(record), flush=True)
    return TiersRecord.load(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_options(parser, out="docs/results/bench/runs.jsonl", server_args="--incremental-streaming-output")
    parser.add_argument("--study", default="", help="the study these rows belong to (bench/slices.sh: the slice)")
    parser.add_argument("--workloads", default="sharegpt")
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per run (default: 10 per unit of concurrency, at least 300, so the drain "
                             "is a small share of the run; rows report it as drain_share)")
    parser.add_argument("--concurrency", default="256", help="comma-separated")
    parser.add_argument("--request-rate", default="",
                        help="comma-separated requests/s: open-loop runs at Poisson arrivals (as bench_serving "
                             "--request-rate) instead of --concurrency; their rows carry mode 'open'")
    parser.add_argument("--arms", default="STD,BI,CoRun", help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rep", type=int, help="run only this repetition (0-based) of --reps: one GPU queue "
                        "chunk per repetition, each pairing every arm on one host")
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--static-gb", type=float, default=38.0,
                        help="static GPU memory (weights + KV pool) per server, GiB")
    parser.add_argument("--max-total-tokens", type=int, help="KV pool size, the same for every arm")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="run one server at a time (models too large for side by side)")
    parser.add_argument("--chunked-prefill-size", type=int, default=8192)
    parser.add_argument("--warmup", type=int, default=64,
                        help="unrecorded requests each server serves before its first measured run (0: none)")
    add_tier_options(parser)
    add_pack_options(parser)
    parser.add_argument("--arm-args", action="append", default=[], metavar="ARM=ARGS",
                        help="extra server options for one arm (repeatable), e.g. BI=--disable-prefill-cuda-graph")
    parser.add_argument("--arm-env", action="append", default=[], metavar="ARM=NAME=VALUE",
                        help="an environment variable for one arm's server (repeatable), e.g. "
                             "CoRun=CUBLASLT_WORKSPACE_SIZE=33554432")
    parser.add_argument("--done", action="append", default=[], metavar="RUNS",
                        help="another results file (repeatable), e.g. the committed runs.jsonl: the whole "
                             "repetitions it holds are not run again; new rows still go to --out")
    parser.add_argument("--tp-size", type=int, default=1,
                        help="tensor-parallel size; rows of TP > 1 are labelled SHAPE-tpN")
    return parser


def settle(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """What ``args`` names, checked before any server starts: the arms, each arm's extra options and
    environment, and the workloads. An unknown name is a usage error."""
    arms = arms_of(parser, args.arms)
    extra = arm_args(args.arm_args, arms)
    env = arm_env(args.arm_env, arms)
    names = args.workloads.split(",")
    unknown = [w for w in names if w not in workloads.ALL + workloads.PREFIX and not re.fullmatch(r"fixed-\d+-\d+", w)]
    if unknown:
        parser.error(f"unknown workloads {unknown}: one of {', '.join(workloads.ALL + workloads.PREFIX)} or "
                     "fixed-IN-OUT")
    if args.request_rate and workloads.SESSIONS in names:
        parser.error(f"{workloads.SESSIONS}: a session sends its next turn when the last one ends (closed loop only)")
    return arms, extra, env, names


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    from corun_sglang.probes.launch import Server

    out = Path(args.out)
    label = args.shape if args.tp_size == 1 else f"{args.shape}-tp{args.tp_size}"
    arms, extra, env, names = settle(parser, args)
    concurrencies = ([f"rate={float(r):g}" for r in args.request_rate.split(",")] if args.request_rate
                     else [int(c) for c in args.concurrency.split(",")])
    done = set().union(*(done_reps(Path(p), arms) for p in [out, *args.done]))
    pending = {
        (w, c): [rep for rep in (range(args.reps) if args.rep is None else [args.rep])
                 if (args.study, label, w, c, rep) not in done]
        for w in names for c in concurrencies
    }
    todo = plan(pending, arms, args.reps, args.one_at_a_time)
    if not todo:
        print("nothing to do: every row of this slice is in", out)
        return 0
    ckpt = common.prepare(args)
    shared = [
        "--max-running-requests", str(args.max_running_requests),
        "--chunked-prefill-size", str(args.chunked_prefill_size),
        "--tp-size", str(args.tp_size),
        *(["--max-total-tokens", str(args.max_total_tokens)] if args.max_total_tokens else []),
        *args.server_args.split(),
    ]
    tiered_arms = [a for a in arms if a in TIERED]
    record = tiers_record(args, label, ckpt, shared, env[tiered_arms[0]]) if tiered_arms else None
    pack = pack_record(args, label, ckpt, shared) if any(a in PACKED for a in arms) else None
    gpu = common.gpu_uuid()
    servers = {}
    contracts = {}  # arm -> its server's corun_contract
    infos = {}  # arm -> what its server served (KV pool, attention backend, radix cache)
    warmed = []  # servers that have served their warm-up

    def serve(arm):
        if arm not in servers:
            if args.one_at_a_time:
                for other in list(servers):
                    servers.pop(other).stop()
            tiered = ["--corun-decode-tiers", record.source] if arm in TIERED else []
            tiered += ["--corun-prefill-pack", pack.source] if arm in PACKED else []
            log = Path(args.logs) / serverlog.log_name(args.study, arm)
            servers[arm] = Server(str(ckpt), ARMS[arm] + extra[arm] + tiered + arm_shared(arm, shared), log,
                                  timeout=900, static_gb=args.static_gb, env=env[arm])
            info = server_info(servers[arm].url)
            infos[arm] = served(info)
            contracts[arm] = (info.get("corun_contract") or {}) if "--corun" in ARMS[arm] else {}
        return servers[arm]

    try:
        if not args.one_at_a_time:
            for arm in arms:  # started one after another: each sizes its memory at start
                serve(arm)
        for w, c, rep, arm in todo:
            pairs = workloads.lengths(w, requests_for(args.requests, c))
            # The same prompts for every repetition and arm; each measured run starts with an empty
            # prefix cache, so a repetition gets no cache hits from the one before it.
            if w == workloads.SESSIONS:
                conversations = workloads.sessions(pairs, seed=prompt_seed(w))
            else:
                prompts = workloads.workload_prompts(w, pairs, seed=prompt_seed(w))
                bodies = [client.request(p, o, seed=i) for i, (p, (_, o)) in enumerate(zip(prompts, pairs))]
            server = serve(arm)
            rate = rate_of(c)
            if args.warmup and server not in warmed:
                asyncio.run(client.run(server.url, warmup_bodies(pairs, args.warmup), c if rate is None else 64))
                warmed.append(server)
            asyncio.run(client.flush_cache(server.url))
            log_start = server.log.stat().st_size
            cpu = time.process_time()
            if w == workloads.SESSIONS:
                records, duration = asyncio.run(client.run_sessions(server.url, conversations, c))
            elif rate is None:
                records, duration = asyncio.run(client.run(server.url, bodies, c))
            else:  # the same arrival times for every arm and repetition
                records, duration = asyncio.run(client.run_open(server.url, bodies, rate, seed=prompt_seed(w)))
            cpu = time.process_time() - cpu
            with open(server.log, errors="replace") as log:
                log.seek(log_start)
                share = log.read()
            steps = serverlog.decode_steps(share)
            wave = serverlog.decode_wave(c if rate is None else args.max_running_requests, steps)
            row = {
                "study": args.study, "shape": label, "tp": args.tp_size, "workload": w, "arm": arm, "rep": rep,
                **({"concurrency": c} if rate is None else {"mode": "open", "request_rate": rate, "concurrency": None}),
                "requests": len(pairs), "prompt_seed": prompt_seed(w), "time": time.time(), "host": socket.gethostname(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_uuid": gpu,
                "server_command": server.command, **({"server_env": env[arm]} if env[arm] else {}),
                "decode_wave": wave, "client_cpu_share": cpu / duration,
                **client.summarize(records, duration, wave=wave),
                "timeline": client.timeline(records, [i for i, _ in pairs]),
                "decode_steps": steps,
                "prefill_batches": serverlog.prefill_batches(share),
                "output_digests": [client.digest(r) for r in records],
                **({"decode_tiers": list(record.tiers)} if arm in TIERED else {}),
                **({"prefill_pack": pack.pack, "prefill_pack_shortest": pack.shortest} if arm in PACKED else {}),
                **({"calibration": contracts[arm]["calibration"]} if contracts[arm].get("calibration") else {}),
                **infos[arm],
            }
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{label} {w} c={c} rep={rep} {arm}: {row['output_throughput']:.0f} tok/s, "
                  f"median TPOT {row['median_tpot_ms']:.1f} ms, prefill computed {row['prefill_tokens']} of "
                  f"{row['prompt_tokens']} prompt tokens, failed {row['failed']}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
