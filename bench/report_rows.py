"""Benchmark rows (JSON lines from ``bench/run.py``) loaded, grouped, and reduced to medians and paired ratios.

Rows are grouped by study (``bench/run.py --study``, the slice that made them: arms are compared only
within one study, which ran them interleaved on one GPU). The latest row of each repetition of each
arm counts (a repetition run again supersedes the rows it replaces). Per study and (shape, workload,
concurrency, arm), ``cells`` holds the median over repetitions of output throughput, median TPOT and
median TTFT with the min-max spread. Two arms compare by ``paired_ratios``, repetition k of one arm
over repetition k of the other (run back to back, so host drift cancels), reduced by ``paired`` to
their median and min-max: the one statistic every ratio of the report shows.
The time-weighted aggregate throughput of an arm over a set of workloads is the total generated
tokens over the total wall time, per repetition, then the median; it covers the workloads every arm
has run in every repetition.
A row may name the runtime it ran on (``runtime``: the GPU queue's hash of ``corun_sglang/`` and
``patches/``). Given the current runtime, ``on_runtime`` keeps, per study and (shape, workload,
concurrency), the rows of the current runtime wherever there are any: a result on an older runtime
stands only until the current runtime has one of its own.
"""

from __future__ import annotations

import collections
import json
import math
import statistics
from pathlib import Path

from bench import serverlog, workloads

ARMS = ("STD", "BI", "CoRun")
ABLATION_ARMS = ("SplitKV-off", "SplitKV-off+IsoPrefill")
#: CoRun with calibration off (``--corun-calibrate off``): plain N and isolated prefill.
NOCAL_ARM = "CoRun-nocal"
#: CoRun serving verified decode tiers (``corun-sglang verify-tiers``) besides the N-slot graph.
TIERS_ARM = "CoRun-tiers"
#: CoRun whose calibrated pack never waits for more prompts (``--corun-prefill-pack-wait 0``).
NOWAIT_ARM = "CoRun-nowait"
#: CoRun whose GEMMs go through cuBLAS (``--corun-gemm-library cublas``), with the tiers that allows.
CUBLAS_ARM = "CoRun-cublas"
#: CoRun-tiers serving a verified prefill pack (``corun-sglang verify-prefill-pack``) too.
PACK_ARM = "CoRun-tiers-pack"
#: CoRun-tiers-pack whose packs wait for more prompts (``--corun-prefill-pack-wait``).
WAIT_ARM = "CoRun-tiers-pack-wait"
#: CoRun with its deterministic prefix cache (``--corun-prefix-cache``).
PREFIX_ARM = "CoRun-prefix"
#: Every arm, in the order tables and plots show them.
ORDER = ("STD", "STD-flashinfer", "BI", "BI-flashinfer", *ABLATION_ARMS, NOCAL_ARM, NOWAIT_ARM, CUBLAS_ARM, "CoRun",
         PREFIX_ARM, TIERS_ARM, PACK_ARM, WAIT_ARM)
#: The fewest decode steps a client-measured decode phase must span to be measured: one interval of the
#: server's decode log. A shorter one (a trace whose first wave holds a request of a few output tokens)
#: is a handful of steps, whose timings the client's reads and the step a prefill lands in decide.
MIN_PHASE_STEPS = 40


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def latest(rows: list[dict], key) -> list[dict]:
    """The last row of each ``key(row)`` (a repetition run again supersedes the rows it replaces),
    in the order of first appearance."""
    out = {}
    for r in rows:
        out[key(r)] = r
    return list(out.values())


def open_loop(path: Path) -> list[dict]:
    """The latest open-loop row (``mode`` "open": Poisson arrivals at ``request_rate``) of each repetition."""
    return latest([r for r in read_jsonl(path) if r.get("mode") == "open"],
                  lambda r: (r.get("study", ""), r["shape"], r["workload"], r["request_rate"], r["arm"], r["rep"]))


def load(path: Path) -> list[dict]:
    """The latest closed-loop row of each repetition of each arm in a runs file, each with ``decode_phase``
    (tokens/s) and ``decode_measure`` set.

    ``decode_phase`` is, in order of preference:
    - "log": the server's logged decode throughput while the whole first wave decodes (the wave
      ``serverlog.decode_wave`` finds in the row's log samples)
      (``serverlog.full_wave_throughput``: two or more samples of 40 steps each inside the decode
      phase, ``decode_phase_s``; for a row without that window on a workload of identical requests,
      which all end together, every sample before the wave shrinks);
    - "steps": ``decode_step_throughput`` (full decode steps, from the wave's chunks);
    - "window": ``decode_phase_throughput``, for rows written before it (tokens over the window,
      which reads low when the window is a few steps long).
    A client-measured phase shorter than ``MIN_PHASE_STEPS`` decode steps is no phase: such a row
    gets ``decode_phase`` None, ``decode_measure`` "short" and its length in ``decode_phase_steps``.
    The client's measures read the chunks as the client got them: where it reads many streams
    slower than they come, its timings bunch up, and only the log's measure still holds.
    """
    rows = latest([r for r in read_jsonl(path) if r.get("mode", "closed") == "closed"],
                  lambda r: (r.get("study", ""), r["shape"], r["workload"], r["concurrency"], r["arm"], r["rep"]))
    for r in rows:
        samples = r.get("decode_steps") or []
        wave = serverlog.decode_wave(r["concurrency"], samples)
        phase = r.get("decode_phase_s")
        if phase is None and workloads.identical(r["workload"]):
            phase = math.inf  # rows without the client's window: identical requests all end at once
        logged = serverlog.full_wave_throughput(samples, wave, phase)
        steps = "decode_step_throughput" in r
        if logged is not None:
            r["decode_phase"], r["decode_measure"] = logged, "log"
        elif (length := phase_steps(r, wave)) is not None and length < MIN_PHASE_STEPS:
            r["decode_phase"], r["decode_measure"], r["decode_phase_steps"] = None, "short", length
        else:
            r["decode_phase"] = r["decode_step_throughput"] if steps else r.get("decode_phase_throughput")
            r["decode_measure"] = "steps" if steps else "window"
    return rows


def on_runtime(rows: list[dict], runtime: str | None) -> list[dict]:
    """``rows`` less those of another runtime than ``runtime`` in every (study, shape, workload,
    concurrency) that has rows of ``runtime``; rows that name no runtime always stay. ``runtime``
    None keeps every row."""
    if runtime is None:
        return rows
    def cell(r: dict) -> tuple:
        return r.get("study", ""), r["shape"], r["workload"], r["concurrency"]

    current = {cell(r) for r in rows if r.get("runtime") == runtime}
    return [r for r in rows if cell(r) not in current or r.get("runtime") in (None, runtime)]


def runtime_state(rows: list[dict], runtime: str | None) -> str:
    """Which runtime ``rows`` ran on: "current", "stale" (some on another runtime, named), or "-" where
    the current runtime or a row's runtime is not known."""
    names = {r.get("runtime") for r in rows}
    if runtime is None or None in names:
        return "-"
    older = sorted(names - {runtime})
    return "current" if not older else "stale: " + ", ".join(f"`{n}`" for n in older)


def phase_steps(row: dict, wave: int) -> float | None:
    """The decode steps a row's client-measured decode phase spans: the tokens that arrived in its
    window over the wave (one token per request a step); None for a row without that window."""
    seconds, rate = row.get("decode_phase_s"), row.get("decode_phase_throughput")
    return None if seconds is None or rate is None or not wave else seconds * rate / wave


def studies(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows by study, in order of first appearance (rows written without a study form study "")."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r.get("study", ""), []).append(r)
    return out


def cells(rows: list[dict]) -> dict[tuple, dict]:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["shape"], r["workload"], r["concurrency"], r["arm"])].append(r)
    out = {}
    for key, rs in groups.items():
        tput = [r["output_throughput"] for r in rs]
        decode = [r["decode_phase"] for r in rs if r.get("decode_phase")]
        out[key] = {
            "decode_phase": statistics.median(decode) if decode else None,
            "decode_measure": "/".join(sorted({r["decode_measure"] for r in rs if r.get("decode_phase")})),
            "decode_spread": (min(decode), max(decode)) if decode else None,
            "reps": len(rs),
            "output_throughput": statistics.median(tput),
            "spread": (min(tput), max(tput)),
            "median_tpot_ms": statistics.median(r["median_tpot_ms"] for r in rs),
            "median_ttft_ms": statistics.median(r["median_ttft_ms"] for r in rs),
            "failed": sum(r["failed"] for r in rs),
        }
    return out


def paired(rows: list[dict], key: tuple, num: str, den: str,
           field: str = "output_throughput") -> tuple[float, float, float] | None:
    """The median of ``num``/``den``'s paired ratios (``paired_ratios``) and their min and max; None
    without a pair."""
    values = paired_ratios(rows, key, num, den, field)
    return (statistics.median(values), min(values), max(values)) if values else None


def aggregate_reps(rows: list[dict], shape: str, concurrency: int) -> tuple[dict[str, dict[int, float]], list[str]]:
    """Time-weighted aggregate output throughput per arm and repetition, and the workloads it covers.

    Only workloads where every arm of this shape and concurrency has a row for every repetition
    count, so each arm's aggregate spans the same requests.
    """
    mine = [r for r in rows if r["shape"] == shape and r["concurrency"] == concurrency]
    arms = sorted({r["arm"] for r in mine})
    reps = sorted({r["rep"] for r in mine})
    have = {(r["workload"], r["arm"], r["rep"]) for r in mine}
    names = sorted(w for w in {r["workload"] for r in mine}
                   if all((w, a, k) in have for a in arms for k in reps))
    per_rep = collections.defaultdict(lambda: [0, 0.0])
    for r in mine:
        if r["workload"] in names:
            acc = per_rep[(r["arm"], r["rep"])]
            acc[0] += r["output_tokens"]
            acc[1] += r["duration_s"]
    by_arm: dict[str, dict[int, float]] = collections.defaultdict(dict)
    for (arm, rep), (tokens, seconds) in per_rep.items():
        by_arm[arm][rep] = tokens / seconds
    return dict(by_arm), names


def aggregate(rows: list[dict], shape: str, concurrency: int) -> tuple[dict[str, float], list[str]]:
    """``aggregate_reps``' median over repetitions per arm, and the workloads it covers."""
    by_arm, names = aggregate_reps(rows, shape, concurrency)
    return {arm: statistics.median(v.values()) for arm, v in by_arm.items()}, names


def paired_ratios(rows: list[dict], key: tuple, num: str, den: str, field: str = "output_throughput") -> list[float]:
    """``num``/``den`` per repetition (rep k against rep k: run back to back, so host drift cancels)."""
    by = {(r["arm"], r["rep"]): r.get(field) for r in rows
          if (r["shape"], r["workload"], r["concurrency"]) == key and r["arm"] in (num, den)}
    return [by[(num, rep)] / by[(den, rep)] for arm, rep in sorted(by)
            if arm == num and by.get((num, rep)) and by.get((den, rep))]


def reproduced(rows: list[dict]) -> int:
    """The requests whose output digests are identical, and present, in every one of ``rows``."""
    return sum(d[0] is not None and len(set(d)) == 1 for d in zip(*(r["output_digests"] for r in rows)))


def arm_rank(arm: str) -> int:
    return ORDER.index(arm) if arm in ORDER else len(ORDER)
