"""Aggregate benchmark slices (JSON lines from ``bench/run.py``) into ratios, plots and a markdown report.

Rows are grouped by study (``bench/run.py --study``, the slice that made
them: arms are compared only within one study, which ran them interleaved on
one GPU). Per study and (shape, workload, concurrency, arm): the median over repetitions of
output throughput, median TPOT and median TTFT, with the min-max spread.
Ratios compare medians (CoRun/BI, CoRun/STD, BI/STD); a study's other arms
(tiers, pack, ablations) each get a row of their own ratios to BI, STD and
CoRun. The time-weighted
aggregate throughput of an arm over a set of workloads is the total generated
tokens over the total wall time, per repetition, then the median; it covers the
workloads every arm has run in every repetition. Where rows carry the servers'
decode-step samples (``bench/serverlog.py``), a table gives each arm's decode
time and step cost by number of running requests. Where a run has a decode
phase (``client.decode_step_throughput``) of at least ``MIN_PHASE_STEPS``
steps, its median goes in a table of its own; timelines of prefill and decode
throughput (first repetition), the concurrency sweep and the padding study (``--padding``,
from ``bench/padding.py``) are plotted. Where repetitions kept output digests,
a table counts the requests each arm reproduced token for token, in all
repetitions and in those one GPU ran.

    python -m bench.report docs/results/bench/runs.jsonl --out docs/results/benchmarks.md \
        --plots docs/results/bench [--notes notes.md] [--padding docs/results/bench/padding.jsonl] \
        [--sampler sampler.json ...] [--step-profile step_profile.jsonl ...]

The targets table checks each target on every cell it applies to, with the
ratio of paired repetitions (rep k of one arm against rep k of the other).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import statistics
from pathlib import Path

from bench import serverlog, workloads

ARMS = ("STD", "BI", "CoRun")
ABLATION_ARMS = ("SplitKV-off", "SplitKV-off+IsoPrefill")
#: CoRun serving verified decode tiers (``corun-sglang verify-tiers``) besides the N-slot graph.
TIERS_ARM = "CoRun-tiers"
#: CoRun-tiers serving a verified prefill pack (``corun-sglang verify-prefill-pack``) too.
PACK_ARM = "CoRun-tiers-pack"
#: CoRun-tiers-pack whose packs wait for KV (``--corun-prefill-pack-wait``).
WAIT_ARM = "CoRun-tiers-pack-wait"
#: Every arm, in the order tables and plots show them.
ORDER = ("STD", "BI", *ABLATION_ARMS, "CoRun", TIERS_ARM, PACK_ARM, WAIT_ARM)
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


def load(path: Path) -> list[dict]:
    """The latest row of each repetition of each arm in a runs file, each with ``decode_phase``
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
    rows = latest(read_jsonl(path),
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


def _prefix(study: str) -> str:
    return f"{study}-" if study else ""


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


def ratio(c: dict, key: tuple, num: str, den: str) -> float | None:
    a, b = c.get((*key, num)), c.get((*key, den))
    if not a or not b or not b["output_throughput"]:
        return None
    return a["output_throughput"] / b["output_throughput"]


def aggregate(rows: list[dict], shape: str, concurrency: int) -> tuple[dict[str, float], list[str]]:
    """Time-weighted aggregate output throughput per arm (median over reps), and the workloads it covers.

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
    by_arm = collections.defaultdict(list)
    for (arm, _), (tokens, seconds) in per_rep.items():
        by_arm[arm].append(tokens / seconds)
    return {arm: statistics.median(v) for arm, v in by_arm.items()}, names


#: Running-request ranges of the decode-step table.
LOADS = ((1, 8), (9, 32), (33, 128), (129, 1 << 20))


def _load_label(lo: int, hi: int) -> str:
    return f"{lo}+" if hi == LOADS[-1][1] else f"{lo}-{hi}"


def steps_table(rows: list[dict], shape: str, concurrency: int) -> list[str]:
    """Markdown: per workload and arm, decode wall time per run and ms per step at each load (server logs).

    "Outside" is the run's wall time not covered by logged decode steps: prefill-only iterations,
    the client's ramp, and the last (unlogged) fewer-than-40 steps. The last column, for CoRun and
    CoRun-tiers, is the decode time the arm would save if each of its steps cost what a default
    SGLang step costs at the same load: the measured price of its fixed-shape steps.
    """
    groups = collections.defaultdict(list)
    for r in rows:
        if r["shape"] == shape and r["concurrency"] == concurrency and r.get("decode_steps"):
            groups[(r["workload"], r["arm"])].append(r)
    if not groups:
        return []
    lines = ["| workload | arm | " + " | ".join(f"{_load_label(*b)} running: s/run (ms/step)" for b in LOADS)
             + " | run s | outside logged decode steps s | at STD step cost: s saved |",
             "| --- | --- | " + " | ".join("---:" for _ in LOADS) + " | ---: | ---: | ---: |"]
    for (w, arm) in sorted(groups, key=lambda k: (k[0], ORDER.index(k[1]) if k[1] in ORDER else len(ORDER))):
        rs = groups[(w, arm)]
        pooled = [s for r in rs for s in r["decode_steps"]]
        cols, secs, ms = [], {}, {}
        for b in LOADS:
            secs[b] = statistics.median(serverlog.seconds(r["decode_steps"], *b) for r in rs)
            ms[b] = serverlog.step_ms(pooled, *b)
            cols.append("-" if ms[b] is None else f"{secs[b]:.1f} ({ms[b]:.1f})")
        saved = "-"
        std = groups.get((w, "STD"))
        if arm in ("CoRun", TIERS_ARM, PACK_ARM, WAIT_ARM) and std:
            std_pooled = [s for r in std for s in r["decode_steps"]]
            ref = {b: serverlog.step_ms(std_pooled, *b) for b in LOADS}
            saved = f"{sum(secs[b] * (1 - ref[b] / ms[b]) for b in LOADS if ms[b] and ref[b]):.1f}"
        run_s = statistics.median(r["duration_s"] for r in rs)
        outside = statistics.median(r["duration_s"] - serverlog.seconds(r["decode_steps"], 1, 1 << 20) for r in rs)
        lines.append(f"| {w} | {arm} | " + " | ".join(cols) + f" | {run_s:.1f} | {outside:.1f} | {saved} |")
    return lines


def prefills_table(rows: list[dict], shape: str, concurrency: int) -> list[str]:
    """Markdown: per workload and arm, the prefill iterations of a run (``prefill_batches``, from the
    server's log: a chunk of a long prompt is an iteration of its own) and the prompts one held
    (SGLang's ``#new-seq``, which counts a chunked prompt in each of its chunks).
    Isolated prefill runs one prompt an iteration; a prefill pack or default SGLang runs several."""
    groups = collections.defaultdict(list)
    for r in rows:
        if r["shape"] == shape and r["concurrency"] == concurrency and r.get("prefill_batches"):
            groups[(r["workload"], r["arm"])].append(r["prefill_batches"])
    if not groups:
        return []
    lines = ["| workload | arm | prefill iterations per run (min-max) | #new-seq per iteration: mean, most | runs |",
             "| --- | --- | ---: | ---: | ---: |"]
    for (w, arm) in sorted(groups, key=lambda k: (k[0], ORDER.index(k[1]) if k[1] in ORDER else len(ORDER))):
        runs = groups[(w, arm)]
        counts = [len(b) for b in runs]
        seqs = [s for b in runs for s, _ in b]
        lines.append(f"| {w} | {arm} | {statistics.median(counts):.0f} ({min(counts)}-{max(counts)}) | "
                     f"{sum(seqs) / len(seqs):.2f}, {max(seqs)} | {len(runs)} |")
    return lines


def plot(c: dict, shape: str, concurrency: int, path: Path, study: str = "") -> None:
    plt = _pyplot()
    names = sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency})
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.5))
    arms = [a for a in ORDER if any(k[0] == shape and k[2] == concurrency and k[3] == a for k in c)]
    width = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        vals = [c.get((shape, w, concurrency, arm), {}).get("output_throughput", 0) for w in names]
        ax.bar([i + j * width for i in range(len(names))], vals, width, label=arm)
    ax.set_xticks([i + width * (len(arms) - 1) / 2 for i in range(len(names))], names, rotation=20, ha="right")
    ax.set_ylabel("output tokens/s (median)")
    _save(plt, fig, ax, f"{study + ': ' if study else ''}{shape}, concurrency {concurrency}", path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, ax, title: str, path: Path) -> None:
    """The legend beside the axes, never over the data; the saved canvas grows to hold it and the title."""
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_timeline(rows: list[dict], shape: str, workload: str, concurrency: int, path: Path) -> bool:
    """Prefill and decode throughput over time, first repetition of each arm; False if no timeline."""
    runs = {r["arm"]: r["timeline"] for r in rows if r.get("timeline") and r["rep"] == 0
            and (r["shape"], r["workload"], r["concurrency"]) == (shape, workload, concurrency)}
    if not runs:
        return False
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for arm, bins in runs.items():
        top.plot([b[0] for b in bins], [b[1] for b in bins], label=arm)
        bottom.plot([b[0] for b in bins], [b[2] for b in bins], label=arm)
    top.set_ylabel("prefill tok/s")
    bottom.set_ylabel("decode tok/s")
    bottom.set_xlabel("seconds since the first request")
    _save(plt, fig, top, f"{shape}, {workload}, concurrency {concurrency}", path)
    return True


def plot_sweep(c: dict, shape: str, workload: str, path: Path) -> bool:
    """Output throughput against concurrency per arm; False with fewer than two concurrencies."""
    levels = sorted({k[2] for k in c if k[:2] == (shape, workload)})
    if len(levels) < 2:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for arm in ORDER:
        pts = [(n, c[(shape, workload, n, arm)]["output_throughput"]) for n in levels
               if (shape, workload, n, arm) in c]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=arm)
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(n) for n in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s (median)")
    _save(plt, fig, ax, f"{shape}, {workload}", path)
    return True


def plot_padding(rows: list[dict], path: Path) -> None:
    """One request's TPOT against the decode graph size N, STD's as a reference line, per shape."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for shape in sorted({r["shape"] for r in rows}):
        pts = sorted((r["n"], r["median_tpot_ms"]) for r in rows if r["shape"] == shape and r["arm"] == "CoRun")
        line = ax.plot([n for n, _ in pts], [t for _, t in pts], marker="o", label=f"CoRun, {shape}")
        for r in rows:
            if r["shape"] == shape and r["arm"] == "STD":
                ax.axhline(r["median_tpot_ms"], linestyle="--", color=line[0].get_color(), label=f"STD, {shape}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (decode graph slots), one request running")
    ax.set_ylabel("TPOT ms (median)")
    ax.set_ylim(bottom=0)
    _save(plt, fig, ax, "padding worst case", path)


def padding_table(rows: list[dict]) -> list[str]:
    """Markdown: median TPOT of one request against the graph size N, with default SGLang's for reference."""
    std = {r["shape"]: r["median_tpot_ms"] for r in rows if r["arm"] == "STD"}
    lines = ["| shape | N | CoRun TPOT ms | STD TPOT ms | CoRun/STD |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in sorted((r for r in rows if r["arm"] == "CoRun"), key=lambda r: (r["shape"], r["n"])):
        ref = std.get(r["shape"])
        lines.append(f"| {r['shape']} | {r['n']} | {r['median_tpot_ms']:.2f} | "
                     f"{'-' if ref is None else f'{ref:.2f}'} | {_fmt(r['median_tpot_ms'] / ref if ref else None)} |")
    return lines


def paired_ratios(rows: list[dict], key: tuple, num: str, den: str, field: str = "output_throughput") -> list[float]:
    """``num``/``den`` per repetition (rep k against rep k: run back to back, so host drift cancels)."""
    by = {(r["arm"], r["rep"]): r.get(field) for r in rows
          if (r["shape"], r["workload"], r["concurrency"]) == key and r["arm"] in (num, den)}
    return [by[(num, rep)] / by[(den, rep)] for arm, rep in sorted(by)
            if arm == num and by.get((num, rep)) and by.get((den, rep))]


#: The targets: (name, numerator arm, denominator arm, field, threshold, applies to (shape, concurrency, the
#: study's cells, cell, BI/STD of that cell in the other studies: ``bi_slower_elsewhere``)).
_TARGETS = (
    ("CoRun >= 1.3x BI where BI is slower than STD", "CoRun", "BI", "output_throughput", 1.3,
     lambda shape, n, c, key, elsewhere: (ratio(c, key, "BI", "STD") or elsewhere.get(key) or 1) < 1),
    ("CoRun >= 0.8x STD at concurrency 256, dense", "CoRun", "STD", "output_throughput", 0.8,
     lambda shape, n, c, key, elsewhere: n == 256 and not is_moe(shape)),
    ("decode phase: CoRun >= 0.9x STD", "CoRun", "STD", "decode_phase", 0.9,
     lambda shape, n, c, key, elsewhere: bool((c.get((*key, "STD")) or {}).get("decode_phase"))),
)
#: Each target for CoRun, then for CoRun with decode tiers, with a prefill pack too, and with packs waiting
#: for KV (where a study ran those arms).
TARGETS = _TARGETS + tuple((name.replace("CoRun", arm, 1), arm, *rest)
                           for arm in (TIERS_ARM, PACK_ARM, WAIT_ARM) for name, _, *rest in _TARGETS)


def is_moe(shape: str) -> bool:
    return "moe" in shape or "a3b" in shape


def bi_slower_elsewhere(groups: dict[str, tuple[list[dict], dict]]) -> dict[tuple, float]:
    """Per cell (shape, workload, concurrency), the median BI/STD of the studies that ran both: whether BI
    is slower than STD in a study that ran no STD arm is judged by them (its ratios stay within it)."""
    seen = collections.defaultdict(list)
    for _, c in groups.values():
        for key in {k[:3] for k in c}:
            if (value := ratio(c, key, "BI", "STD")) is not None:
                seen[key].append(value)
    return {key: statistics.median(values) for key, values in seen.items()}


def targets_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: every target against every cell it applies to, in every study (``{study: (rows, cells)}``),
    the ratio as median (min-max) of paired reps."""
    lines = ["| target | study | shape | workload | concurrency | ratio, median (min-max) | met |",
             "| --- | --- | --- | --- | ---: | --- | --- |"]
    elsewhere = bi_slower_elsewhere(groups)
    for name, num, den, field, threshold, applies in TARGETS:
        for study, (rows, c) in groups.items():
            for key in sorted({k[:3] for k in c}):
                if (*key, num) not in c or (*key, den) not in c or not applies(key[0], key[2], c, key, elsewhere):
                    continue
                values = paired_ratios(rows, key, num, den, field)
                if not values:
                    continue
                mid = statistics.median(values)
                met = mid >= threshold
                # three decimals where two would round a miss up to the target
                digits = 3 if not met and float(f"{mid:.2f}") >= threshold else 2
                lines.append(f"| {name} | {study or '-'} | {key[0]} | {key[1]} | {key[2]} | {mid:.{digits}f} "
                             f"({min(values):.{digits}f}-{max(values):.{digits}f}) | {'yes' if met else '**no**'} |")
    return lines if len(lines) > 2 else []


def tiers_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: CoRun with and without decode tiers, relative to STD, with TPOT, the tiers served and
    the requests whose tokens the two arms agree on (``tiers_agree``)."""
    keys = [(study, key) for study, (_, c) in groups.items() for key in sorted({k[:3] for k in c if k[3] == TIERS_ARM})]
    if not keys:
        return []
    lines = ["## Decode tiers (output throughput relative to STD, medians)", "",
             "| study | shape | workload | concurrency | CoRun | CoRun-tiers | CoRun-tiers / CoRun "
             "| TPOT ms STD / CoRun / CoRun-tiers | tiers | same tokens as CoRun |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for study, key in keys:
        rows, c = groups[study]
        tpot = " / ".join(_fmt_ms((c.get((*key, arm)) or {}).get("median_tpot_ms")) for arm in ("STD", "CoRun", TIERS_ARM))
        served = sorted({tuple(r.get("decode_tiers") or ()) for r in rows
                         if r["arm"] == TIERS_ARM and (r["shape"], r["workload"], r["concurrency"]) == key})
        vals = [_fmt(ratio(c, key, "CoRun", "STD")), _fmt(ratio(c, key, TIERS_ARM, "STD")),
                _fmt(ratio(c, key, TIERS_ARM, "CoRun"))]
        lines.append(f"| {study or '-'} | {key[0]} | {key[1]} | {key[2]} | " + " | ".join(vals)
                     + f" | {tpot} | {'; '.join(', '.join(map(str, t)) for t in served) or '-'} "
                     f"| {tiers_agree(rows, key)} |")
    return lines + [""]


def tiers_agree(rows: list[dict], key: tuple) -> str:
    """Of the requests both CoRun and CoRun-tiers served from the same prompts (``prompt_seed``), those
    whose output digests are identical in every run of either arm, as "A of B (runs)"; "-" where no such
    pair kept digests. A tier is verified to give every row the bits of the full N-slot graph, so the
    two arms agree on every request."""
    by_seed = collections.defaultdict(list)
    for r in rows:
        if (r["arm"] in ("CoRun", TIERS_ARM) and (r["shape"], r["workload"], r["concurrency"]) == key
                and r.get("output_digests") and "prompt_seed" in r):
            by_seed[r["prompt_seed"]].append(r)
    pairs = [rs for rs in by_seed.values() if {r["arm"] for r in rs} == {"CoRun", TIERS_ARM}]
    if not pairs:
        return "-"
    agree = sum(_reproduced(rs) for rs in pairs)
    total = sum(len(rs[0]["output_digests"]) for rs in pairs)
    return f"{agree} of {total} ({sum(map(len, pairs))} runs)"


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def sampler_table(results: list[dict]) -> list[str]:
    """Markdown: one decode step's sampling per arm (``bench/sampler_cost.py`` JSON), median ms and ratio."""
    lines = ["| rows x vocab | top-p | top-k | arm | median ms | / default |", "| --- | ---: | ---: | --- | ---: | ---: |"]
    for r in results:
        for arm, ms in r["median_ms"].items():
            lines.append(f"| {r['rows']} x {r['vocab']} | {r['top_p']} | {r['top_k']} | {arm} | {ms:.3f} | "
                         f"{r['ratio_to_default'][arm]:.2f} |")
    return lines


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def step_profile_table(rows: list[dict]) -> list[str]:
    """Markdown: per shape, load and arm, GPU ms per decode step: its span, the kernels in it by kind
    (``bench/step_profile.py``'s kinds, in its order), and the rest of the span (the GPU waiting on the host).
    A load the server ran fewer of says how many ran; "KV tokens" is what its KV cache held during
    the profiled steps (attention time grows with it, so loads compare across arms only near equal KV);
    "graph slots" is the decode graph a ``--corun`` arm replayed (its tier, or N)."""
    kinds = list(dict.fromkeys(k for r in rows for k in r["by_kind_ms"]))
    lines = ["| shape | load | arm | graph slots | KV tokens | GPU span | kernels | waiting | " + " | ".join(kinds) + " |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in kinds) + " |"]
    order = {arm: i for i, arm in enumerate(ORDER)}
    for r in sorted(rows, key=lambda r: (r["shape"], r["load"], order.get(r["arm"], len(order)))):
        per_kind = [f"{r['by_kind_ms'].get(k, 0.0):.2f}" for k in kinds]
        wait = r["span_ms_per_step"] - r["kernel_ms_per_step"]
        ran = r.get("running", r["load"])
        load = f"{r['load']}" if ran == r["load"] else f"{r['load']} ({ran} ran)"
        kv = f"{r['kv_tokens']:,}" if r.get("kv_tokens") is not None else "-"
        graph = r.get("graph_slots") or "-"
        lines.append(f"| {r['shape']} | {load} | {r['arm']} | {graph} | {kv} | {r['span_ms_per_step']:.2f} | "
                     f"{r['kernel_ms_per_step']:.2f} | {wait:.2f} | " + " | ".join(per_kind) + " |")
    return lines


#: The benchmark matrix: both checkpoint shapes, every workload, STD, BI and CoRun at concurrency 256.
MATRIX_SHAPES = ("qwen3-8b", "qwen3-30b-a3b")
MATRIX_CONCURRENCY = 256


def coverage_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: per matrix cell (shape, workload), the studies that ran STD, BI and CoRun in one
    repetition at concurrency 256, and how many repetitions hold all three; "not yet" where none did."""
    lines = ["| shape | workload | studies (repetitions with STD, BI and CoRun) |", "| --- | --- | --- |"]
    for shape in MATRIX_SHAPES:
        for w in workloads.ALL:
            found = []
            for study, (rows, _) in groups.items():
                mine = [r for r in rows if (r["shape"], r["workload"], r["concurrency"]) ==
                        (shape, w, MATRIX_CONCURRENCY) and r["arm"] in ARMS]
                arms_of = collections.defaultdict(set)
                for r in mine:
                    arms_of[r["rep"]].add(r["arm"])
                whole = sum(set(ARMS) <= got for got in arms_of.values())
                if whole:
                    found.append(f"{study or '-'} ({whole})")
            lines.append(f"| {shape} | {w} | {', '.join(found) or 'not yet'} |")
    return lines


def repeats_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: per (study, shape, workload, concurrency, arm) with two or more repetitions of the same
    prompts (``prompt_seed``) that kept output digests, the requests whose output tokens were identical in
    every one of them and, where they ran on more than one GPU (``gpu_uuid``), in the repetitions of the
    GPU that ran the most of them: hosts of one kind may round alike or not, one GPU's repetitions must agree.
    The repetitions' batches differ (closed loop, arrival timing, co-runners), so an arm that is
    deterministic under batching reproduces every request."""
    runs = collections.defaultdict(list)
    for study, (rows, _) in groups.items():
        for r in rows:
            if r.get("output_digests") and "prompt_seed" in r:
                runs[(study, r["shape"], r["workload"], r["concurrency"], r["prompt_seed"], r["arm"])].append(r)
    lines = []
    for (study, shape, w, c, _, arm), rs in sorted(runs.items(), key=lambda kv: (*kv[0][:5], _arm_rank(kv[0][5]))):
        if len(rs) < 2:
            continue
        gpus = collections.defaultdict(list)
        for r in rs:
            gpus[r.get("gpu_uuid")].append(r)
        one = max(gpus.values(), key=len)  # the most repetitions one GPU ran
        within = (f"{_reproduced(one)} of {len(one[0]['output_digests'])} ({len(one)})"
                  if len(gpus) > 1 and len(one) >= 2 else "-")
        lines.append(f"| {study or '-'} | {shape} | {w} | {c} | {arm} | {len(rs)} | {len(gpus)} | "
                     f"{_reproduced(rs)} of {len(rs[0]['output_digests'])} | {within} |")
    if not lines:
        return []
    return ["| study | shape | workload | concurrency | arm | repetitions | GPUs | requests with identical "
            "tokens in all | in those of one GPU (repetitions) |",
            "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |", *lines]


def _reproduced(rows: list[dict]) -> int:
    """The requests whose output digests are identical, and present, in every one of ``rows``."""
    return sum(d[0] is not None and len(set(d)) == 1 for d in zip(*(r["output_digests"] for r in rows)))


def _arm_rank(arm: str) -> int:
    return ORDER.index(arm) if arm in ORDER else len(ORDER)


def short_phases(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """The runs with no decode phase to measure (``MIN_PHASE_STEPS``), per study, shape, workload and
    concurrency: the steps their phases spanned."""
    spans = collections.defaultdict(list)
    for study, (rows, _) in groups.items():
        for r in rows:
            if r.get("decode_measure") == "short":
                spans[(study, r["shape"], r["workload"], r["concurrency"])].append(r["decode_phase_steps"])
    if not spans:
        return []
    lines = [f"No decode phase to measure (the whole first wave decoded together for fewer than "
             f"{MIN_PHASE_STEPS} steps, one interval of the server's decode log; these runs stay out of the "
             "table above and of the decode-phase target):", "",
             "| study | shape | workload | concurrency | runs | steps in the phase, min-max |",
             "| --- | --- | --- | ---: | ---: | --- |"]
    for (study, shape, workload, concurrency), steps in sorted(spans.items()):
        lines.append(f"| {study or '-'} | {shape} | {workload} | {concurrency} | {len(steps)} | "
                     f"{min(steps):.0f}-{max(steps):.0f} |")
    return lines + [""]


def render(groups: dict[str, tuple[list[dict], dict]], plots: dict[tuple, str], header: str,
           padding: list[dict] | None = None, sampler: list[dict] | None = None, notes: str = "",
           step_profile: list[tuple[str, list[dict]]] | None = None) -> str:
    """The report; ``groups`` is ``{study: (rows, cells)}``, ``plots`` is keyed by (study, ...)."""
    lines = ["# Benchmarks: STD vs BI vs CoRun", "", header, ""]
    goals = targets_table(groups)
    if goals:
        lines += ["## Targets", "", *goals, "",
                  "Where a study ran no STD arm, whether BI is slower than STD is read from the studies of the "
                  "same shape, workload and concurrency that ran both; every ratio is the study's own.", ""]
    lines += ["## Coverage", "", *coverage_table(groups), ""]
    if notes:
        lines += [notes.strip(), ""]
    for study, (rows, c) in groups.items():
        lines += _study_sections(study, rows, c, plots)
    arms = (*ARMS, TIERS_ARM, PACK_ARM)
    decode = [(study, k) for study, (_, c) in groups.items()
              for k in sorted({k[:3] for k, v in c.items() if v["decode_phase"] and k[3] in arms})]
    if decode:
        lines += ["## Decode phase (output tok/s while the first wave decodes; medians, min-max)", "",
                  "Measure: \"log\" is the server's own decode throughput (its log's samples, one per 40 "
                  "steps) while the whole first wave runs, where two or more samples fall in that phase; "
                  "else \"steps\", the wave's size over the median of its requests' time per token "
                  "inside the window, from the client's chunks (full decode steps); \"window\" (rows "
                  "written before it) is "
                  "the tokens that arrived in the window over its length, which reads low when the window "
                  "spans a few steps (a first wave holding a request of a few output tokens). The client's "
                  "measures hold only while the client reads its streams as fast as they come.", "",
                  "| study | shape | workload | concurrency | measure | " + " | ".join(arms)
                  + f" | CoRun/STD | CoRun/BI | {TIERS_ARM}/STD | {PACK_ARM}/STD |",
                  "| --- | --- | --- | ---: | --- | " + " | ".join("---:" for _ in arms) + " | ---: | ---: | ---: | ---: |"]
        for study, key in decode:
            c = groups[study][1]
            v = {arm: (c.get((*key, arm)) or {}).get("decode_phase") for arm in arms}
            spread = {arm: (c.get((*key, arm)) or {}).get("decode_spread") for arm in arms}
            measure = "/".join(sorted({(c.get((*key, a)) or {}).get("decode_measure") or "" for a in arms} - {""}))
            cols = ["-" if v[a] is None else f"{v[a]:.0f} ({spread[a][0]:.0f}-{spread[a][1]:.0f})" for a in arms]
            rel = [_fmt(v[a] / v[d] if v[a] and v[d] else None)
                   for a, d in (("CoRun", "STD"), ("CoRun", "BI"), (TIERS_ARM, "STD"), (PACK_ARM, "STD"))]
            lines.append(f"| {study or '-'} | {key[0]} | {key[1]} | {key[2]} | {measure} | "
                         + " | ".join(cols + rel) + " |")
        lines.append("")
    lines += short_phases(groups)
    extra = sorted((k, name) for k, name in plots.items() if len(k) > 3)
    if extra:
        lines += ["## Over time and across concurrency", ""]
        lines += [f"![{name}]({name})" for _, name in extra]
        lines.append("")
    if padding:
        lines += ["## Padding worst case (one request, decode graph of N slots)", ""]
        if ("padding",) in plots:
            lines += [f"![padding]({plots[('padding',)]})", ""]
        lines += padding_table(padding) + [""]
    if sampler:
        lines += ["## Sampler (one decode step; medians of CUDA-event timings)", ""]
        lines += sampler_table(sampler) + [""]
    if step_profile:
        lines += ["## Decode step profiles (GPU ms per step, from SGLang's profiler)", "",
                  "Each arm decodes `load` requests at once; kernels are summed by kind "
                  "(`bench/step_profile.py`); \"waiting\" is the span less the kernels. Each file is one "
                  "run on one GPU: arms compare within a file.", ""]
        for source, rows in step_profile:
            lines += [f"`{source}`:", ""] + step_profile_table(rows) + [""]
    ablation = [(study, key) for study, (_, c) in groups.items()
                for key in sorted({k[:3] for k in c if k[3] in ABLATION_ARMS})]
    if ablation:
        lines += ["## Ablations (output throughput relative to STD, medians)", "",
                  "| study | shape | workload | concurrency | " + " | ".join(ABLATION_ARMS + ("CoRun",)) + " |",
                  "| --- | --- | --- | ---: | " + " | ".join("---:" for _ in ABLATION_ARMS + ("CoRun",)) + " |"]
        for study, key in ablation:
            vals = [_fmt(ratio(groups[study][1], key, arm, "STD")) for arm in ABLATION_ARMS + ("CoRun",)]
            lines.append(f"| {study or '-'} | {key[0]} | {key[1]} | {key[2]} | " + " | ".join(vals) + " |")
        lines.append("")
    lines += tiers_table(groups)
    repeats = repeats_table(groups)
    if repeats:
        lines += ["## Same outputs across repetitions (prompts and seeds alike, batches not)", "",
                  "STD's sampler draws from one generator for the whole batch: SGLang honours a request's "
                  "`sampling_seed` only under `--enable-deterministic-inference` (BI); CoRun draws from the "
                  "request's own seed and step.", "", *repeats, ""]
    lines.append("Throughput cells: median (min-max) over repetitions.")
    return "\n".join(lines) + "\n"


def _study_sections(study: str, rows: list[dict], c: dict, plots: dict[tuple, str]) -> list[str]:
    """Markdown: one section per (shape, concurrency) of one study."""
    lines = []
    for shape, concurrency in sorted({(k[0], k[2]) for k in c}):
        lines += [f"## {study + ': ' if study else ''}{shape}, concurrency {concurrency}", ""]
        if (study, shape, concurrency) in plots:
            lines += [f"![throughput]({plots[(study, shape, concurrency)]})", ""]
        # a study that serves CoRun only with its decode tiers (and a prefill pack) shows its fullest such
        # arm in CoRun's columns
        arms = {k[3] for k in c if k[0] == shape and k[2] == concurrency}
        co = "CoRun" if "CoRun" in arms else next((a for a in (PACK_ARM, TIERS_ARM) if a in arms), "CoRun")
        lines += [f"| workload | STD tok/s | BI tok/s | {co} tok/s | {co}/BI | {co}/STD | BI/STD | "
                  f"TPOT ms STD / BI / {co} | reps |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
        for w in sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency}):
            key = (shape, w, concurrency)
            cell = {arm: c.get((*key, arm)) for arm in ("STD", "BI", co)}
            tput = [("-" if v is None else f"{v['output_throughput']:.0f} "
                     f"({v['spread'][0]:.0f}-{v['spread'][1]:.0f})") for v in cell.values()]
            tpot = " / ".join("-" if v is None else f"{v['median_tpot_ms']:.1f}" for v in cell.values())
            reps = min((v["reps"] for v in cell.values() if v), default=0)
            lines.append(f"| {w} | {' | '.join(tput)} | {_fmt(ratio(c, key, co, 'BI'))} | "
                         f"{_fmt(ratio(c, key, co, 'STD'))} | {_fmt(ratio(c, key, 'BI', 'STD'))} | "
                         f"{tpot} | {reps} |")
        others = [a for a in ORDER if a in arms and a not in ("STD", "BI", co)] + sorted(arms - {*ORDER, co})
        if others:
            lines += ["", "The study's other arms (ratios of medians):", "",
                      f"| workload | arm | tok/s | /BI | /STD | /{co} | TPOT ms | reps |",
                      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for w in sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency}):
                key = (shape, w, concurrency)
                for arm in others:
                    v = c.get((*key, arm))
                    if v:
                        lines.append(f"| {w} | {arm} | {v['output_throughput']:.0f} ({v['spread'][0]:.0f}-"
                                     f"{v['spread'][1]:.0f}) | {_fmt(ratio(c, key, arm, 'BI'))} | "
                                     f"{_fmt(ratio(c, key, arm, 'STD'))} | {_fmt(ratio(c, key, arm, co))} | "
                                     f"{v['median_tpot_ms']:.1f} | {v['reps']} |")
        agg, covered = aggregate(rows, shape, concurrency)
        if agg:
            lines += ["", f"Time-weighted aggregate throughput over {', '.join(covered)} (tok/s): "
                      + ", ".join(f"{arm} {agg[arm]:.0f}" for arm in ORDER if arm in agg)]
            if "BI" in agg and "STD" in agg:
                lines.append("; ".join(f"{arm}/BI {agg[arm] / agg['BI']:.2f}, {arm}/STD {agg[arm] / agg['STD']:.2f}"
                                       for arm in (co, *others) if arm in agg))
        steps = steps_table(rows, shape, concurrency)
        if steps:
            lines += ["", "Decode steps by load, from the servers' logs (medians over repetitions):", "", *steps]
        prefills = prefills_table(rows, shape, concurrency)
        if prefills:
            lines += ["", "Prefill iterations, from the servers' logs:", "", *prefills]
        lines.append("")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="JSON lines written by bench/run.py")
    parser.add_argument("--out", default="docs/results/benchmarks.md")
    parser.add_argument("--header", default="", help="host, versions and commands, as markdown")
    parser.add_argument("--padding", help="JSON lines written by bench/padding.py")
    parser.add_argument("--sampler", action="append", default=[], help="JSON written by bench/sampler_cost.py (repeatable)")
    parser.add_argument("--step-profile", action="append", default=[],
                        help="JSON lines written by bench/step_profile.py in one run (repeatable: a table each)")
    parser.add_argument("--plots", help="folder for the PNGs (default: the report's folder)")
    parser.add_argument("--notes", help="markdown file placed under the targets table (explanations of misses)")
    args = parser.parse_args(argv)
    groups = {study: (rows, cells(rows)) for study, rows in studies(load(Path(args.runs))).items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(args.plots) if args.plots else out.parent
    folder.mkdir(parents=True, exist_ok=True)
    link = folder.resolve().relative_to(out.parent.resolve())  # plots live at or below the report
    plots = {}

    def place(key, name, made):
        if made is not False:
            plots[key] = (link / name).as_posix()

    for study, (rows, c) in groups.items():
        pre = _prefix(study)
        for shape, concurrency in sorted({(k[0], k[2]) for k in c}):
            name = f"bench-{pre}{shape}-c{concurrency}.png"
            place((study, shape, concurrency), name, plot(c, shape, concurrency, folder / name, study))
        for shape, workload, concurrency in sorted({k[:3] for k in c}):
            name = f"timeline-{pre}{shape}-{workload}-c{concurrency}.png"
            place((study, shape, workload, concurrency, "timeline"), name,
                  plot_timeline(rows, shape, workload, concurrency, folder / name))
        for shape, workload in sorted({k[:2] for k in c}):
            name = f"sweep-{pre}{shape}-{workload}.png"
            place((study, shape, workload, 0, "sweep"), name, plot_sweep(c, shape, workload, folder / name))
    padding = read_jsonl(args.padding) if args.padding else None
    if padding:
        plot_padding(padding, folder / "padding.png")
        plots[("padding",)] = (link / "padding.png").as_posix()
    sampler = [json.loads(Path(p).read_text()) for p in args.sampler]
    notes = Path(args.notes).read_text() if args.notes else ""
    profile = [(p, latest(read_jsonl(p), lambda r: (r["shape"], r["arm"], r["load"]))) for p in args.step_profile]
    out.write_text(render(groups, plots, args.header, padding, sampler, notes, profile))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
