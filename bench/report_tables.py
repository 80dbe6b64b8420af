"""Markdown tables of benchmark cells, and the report that holds them.

Throughput cells read median (min-max) over repetitions. The targets table checks each target on
every cell it applies to, with the ratio of paired repetitions (rep k of one arm against rep k of the
other). Where rows carry the servers' decode-step samples (``bench/serverlog.py``), a table gives each
arm's decode time and step cost by number of running requests. Where a run has a decode phase
(``client.decode_step_throughput``) of at least ``MIN_PHASE_STEPS`` steps, its median goes in a table
of its own. Where repetitions kept output digests, a table counts the requests each arm reproduced
token for token, in all repetitions and in those one GPU ran. Where rows count their prompt tokens and
those a prefix cache served (``client.prefill``), a table gives each arm's prefill tokens computed.
"""

from __future__ import annotations

import collections
import statistics

from bench import serverlog, workloads
from bench.report_rows import (ABLATION_ARMS, ARMS, MIN_PHASE_STEPS, ORDER, PACK_ARM, PREFIX_ARM, TIERS_ARM, WAIT_ARM,
                               arm_rank, paired, paired_ratios, reproduced, runtime_state)

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


def prefill_tokens_table(rows: list[dict], shape: str, concurrency: int) -> list[str]:
    """Markdown: per workload and arm, the prompt tokens of a run, those the server's prefix cache served and
    the prefill tokens it computed (each reply's ``prompt_tokens`` less its ``cached_tokens``), medians over
    repetitions, and the computed share of the prompt tokens; rows without the counts stay out."""
    groups = collections.defaultdict(list)
    for r in rows:
        if r["shape"] == shape and r["concurrency"] == concurrency and r.get("prefill_tokens") is not None:
            groups[(r["workload"], r["arm"])].append(r)
    if not groups:
        return []
    lines = ["| workload | arm | prompt tokens | from the prefix cache | prefill computed | computed share | runs |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (w, arm) in sorted(groups, key=lambda k: (k[0], arm_rank(k[1]))):
        rs = groups[(w, arm)]
        prompt, cached, computed = (statistics.median(r[f] for r in rs)
                                    for f in ("prompt_tokens", "cached_tokens", "prefill_tokens"))
        share = f"{computed / prompt:.1%}" if prompt else "-"
        lines.append(f"| {w} | {arm} | {prompt:,.0f} | {cached:,.0f} | {computed:,.0f} | {share} | {len(rs)} |")
    return lines


def padding_table(rows: list[dict]) -> list[str]:
    """Markdown: median TPOT of one request against the graph size N, with default SGLang's for reference."""
    std = {r["shape"]: r["median_tpot_ms"] for r in rows if r["arm"] == "STD"}
    lines = ["| shape | N | CoRun TPOT ms | STD TPOT ms | CoRun/STD |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in sorted((r for r in rows if r["arm"] == "CoRun"), key=lambda r: (r["shape"], r["n"])):
        ref = std.get(r["shape"])
        lines.append(f"| {r['shape']} | {r['n']} | {r['median_tpot_ms']:.2f} | "
                     f"{'-' if ref is None else f'{ref:.2f}'} | {_fmt(r['median_tpot_ms'] / ref if ref else None)} |")
    return lines


#: The targets: (name, numerator arm, denominator arm, field, threshold, applies to (shape, concurrency, the
#: study's rows and cells, cell)). Output throughput against each peer at its best, on every shape and
#: workload at concurrency 256, and the decode phase against STD wherever it was measured.
_TARGETS = (
    ("CoRun >= 0.9x STD at concurrency 256", "CoRun", "STD", "output_throughput", 0.9,
     lambda shape, n, rows, c, key: n == 256),
    ("CoRun >= 1.5x BI at concurrency 256", "CoRun", "BI", "output_throughput", 1.5,
     lambda shape, n, rows, c, key: n == 256),
    ("decode phase: CoRun >= 0.9x STD", "CoRun", "STD", "decode_phase", 0.9,
     lambda shape, n, rows, c, key: bool((c.get((*key, "STD")) or {}).get("decode_phase"))),
)


#: Each target for CoRun, then for CoRun with decode tiers, with a prefill pack too, and with packs waiting
#: for KV (where a study ran those arms).
TARGETS = _TARGETS + tuple((name.replace("CoRun", arm, 1), arm, *rest)
                           for arm in (TIERS_ARM, PACK_ARM, WAIT_ARM) for name, _, *rest in _TARGETS)


def _prefix_study(shape, n, rows, c, key) -> bool:
    """A cell of a prefix-cache workload at concurrency 256 (where the prefix cache's targets apply)."""
    return n == 256 and key[1] in workloads.PREFIX


#: The prefix cache's targets (issue 54), on its workloads' steady-state output throughput.
TARGETS += tuple((f"{PREFIX_ARM} >= {t}x {den}, steady state", PREFIX_ARM, den, "steady_output_throughput", t,
                  _prefix_study) for den, t in (("STD", 1.0), ("BI", 2.0), ("CoRun", 1.5)))


def targets_table(groups: dict[str, tuple[list[dict], dict]], runtime: str | None = None) -> list[str]:
    """Markdown: every target against every cell it applies to, in every study (``{study: (rows, cells)}``),
    the ratio as median (min-max) of paired reps, with how many pairs and the runtime they ran on
    (``runtime_state`` against ``runtime``, the current one)."""
    lines = ["| target | study | shape | workload | concurrency | ratio, median (min-max) | pairs | runtime | met |",
             "| --- | --- | --- | --- | ---: | --- | ---: | --- | --- |"]
    for name, num, den, field, threshold, applies in TARGETS:
        for study, (rows, c) in groups.items():
            for key in sorted({k[:3] for k in c}):
                if (*key, num) not in c or (*key, den) not in c or not applies(key[0], key[2], rows, c, key):
                    continue
                values = paired_ratios(rows, key, num, den, field)
                if not values:
                    continue
                mid = statistics.median(values)
                met = mid >= threshold
                # three decimals where two would round a miss up to the target
                digits = 3 if not met and float(f"{mid:.2f}") >= threshold else 2
                state = runtime_state([r for r in rows if (r["shape"], r["workload"], r["concurrency"]) == key
                                       and r["arm"] in (num, den)], runtime)
                lines.append(f"| {name} | {study or '-'} | {key[0]} | {key[1]} | {key[2]} | {mid:.{digits}f} "
                             f"({min(values):.{digits}f}-{max(values):.{digits}f}) | {len(values)} | {state} | "
                             f"{'yes' if met else '**no**'} |")
    return lines if len(lines) > 2 else []


def tiers_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: CoRun with and without decode tiers, relative to STD, with TPOT, the tiers served and
    the requests whose tokens the two arms agree on (``tiers_agree``)."""
    keys = [(study, key) for study, (_, c) in groups.items() for key in sorted({k[:3] for k in c if k[3] == TIERS_ARM})]
    if not keys:
        return []
    lines = ["## Decode tiers (output throughput relative to STD)", "",
             "| study | shape | workload | concurrency | CoRun | CoRun-tiers | CoRun-tiers / CoRun "
             "| TPOT ms STD / CoRun / CoRun-tiers | tiers | same tokens as CoRun |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for study, key in keys:
        rows, c = groups[study]
        tpot = " / ".join(_fmt_ms((c.get((*key, arm)) or {}).get("median_tpot_ms")) for arm in ("STD", "CoRun", TIERS_ARM))
        served = sorted({tuple(r.get("decode_tiers") or ()) for r in rows
                         if r["arm"] == TIERS_ARM and (r["shape"], r["workload"], r["concurrency"]) == key})
        vals = [pair(rows, key, "CoRun", "STD"), pair(rows, key, TIERS_ARM, "STD"), pair(rows, key, TIERS_ARM, "CoRun")]
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
    agree = sum(reproduced(rs) for rs in pairs)
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


def pair(rows: list[dict], key: tuple, num: str, den: str, field: str = "output_throughput") -> str:
    """``num``/``den`` as the report shows every ratio: the median of paired ratios, with their min-max."""
    got = paired(rows, key, num, den, field)
    return "-" if got is None else f"{got[0]:.2f} ({got[1]:.2f}-{got[2]:.2f})"


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
    """Markdown: per matrix cell (shape, workload) and peer (STD, BI), the studies that ran CoRun and that
    peer in one repetition at concurrency 256, with how many repetitions hold the pair; "not yet" where
    none did. A pair is what every ratio is paired within, so a study of STD and CoRun and a study of BI
    and CoRun cover a cell as one study of all three does."""
    peers = [arm for arm in ARMS if arm != "CoRun"]
    lines = ["| shape | workload | " + " | ".join(f"CoRun with {p}: studies (repetitions)" for p in peers) + " |",
             "| --- | --- |" + " --- |" * len(peers)]
    for shape in MATRIX_SHAPES:
        for w in workloads.ALL:
            found = {p: [] for p in peers}
            for study, (rows, _) in groups.items():
                arms_of = collections.defaultdict(set)
                for r in rows:
                    if (r["shape"], r["workload"], r["concurrency"]) == (shape, w, MATRIX_CONCURRENCY):
                        arms_of[r["rep"]].add(r["arm"])
                for p in peers:
                    if whole := sum({"CoRun", p} <= got for got in arms_of.values()):
                        found[p].append(f"{study or '-'} ({whole})")
            lines.append(f"| {shape} | {w} | " + " | ".join(", ".join(found[p]) or "not yet" for p in peers) + " |")
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
    for (study, shape, w, c, _, arm), rs in sorted(runs.items(), key=lambda kv: (*kv[0][:5], arm_rank(kv[0][5]))):
        if len(rs) < 2:
            continue
        gpus = collections.defaultdict(list)
        for r in rs:
            gpus[r.get("gpu_uuid")].append(r)
        one = max(gpus.values(), key=len)  # the most repetitions one GPU ran
        within = (f"{reproduced(one)} of {len(one[0]['output_digests'])} ({len(one)})"
                  if len(gpus) > 1 and len(one) >= 2 else "-")
        lines.append(f"| {study or '-'} | {shape} | {w} | {c} | {arm} | {len(rs)} | {len(gpus)} | "
                     f"{reproduced(rs)} of {len(rs[0]['output_digests'])} | {within} |")
    if not lines:
        return []
    return ["| study | shape | workload | concurrency | arm | repetitions | GPUs | requests with identical "
            "tokens in all | in those of one GPU (repetitions) |",
            "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |", *lines]


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


def decode_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: the decode phase's throughput of STD, BI, CoRun and its tiers and pack arms per cell, and
    their paired ratios; with the measure each read (``report_rows.load``)."""
    arms = (*ARMS, TIERS_ARM, PACK_ARM)
    decode = [(study, k) for study, (_, c) in groups.items()
              for k in sorted({k[:3] for k, v in c.items() if v["decode_phase"] and k[3] in arms})]
    if not decode:
        return []
    lines = ["## Decode phase (output tok/s while the first wave decodes; medians, min-max)", "",
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
        rows, c = groups[study]
        v = {arm: (c.get((*key, arm)) or {}).get("decode_phase") for arm in arms}
        spread = {arm: (c.get((*key, arm)) or {}).get("decode_spread") for arm in arms}
        measure = "/".join(sorted({(c.get((*key, a)) or {}).get("decode_measure") or "" for a in arms} - {""}))
        cols = ["-" if v[a] is None else f"{v[a]:.0f} ({spread[a][0]:.0f}-{spread[a][1]:.0f})" for a in arms]
        rel = [pair(rows, key, a, d, "decode_phase")
               for a, d in (("CoRun", "STD"), ("CoRun", "BI"), (TIERS_ARM, "STD"), (PACK_ARM, "STD"))]
        lines.append(f"| {study or '-'} | {key[0]} | {key[1]} | {key[2]} | {measure} | " + " | ".join(cols + rel) + " |")
    return lines + [""]


def ablation_table(groups: dict[str, tuple[list[dict], dict]]) -> list[str]:
    """Markdown: the ablation arms' and CoRun's output throughput relative to STD, per cell."""
    ablation = [(study, key) for study, (_, c) in groups.items()
                for key in sorted({k[:3] for k in c if k[3] in ABLATION_ARMS})]
    if not ablation:
        return []
    lines = ["## Ablations (output throughput relative to STD)", "",
             "| study | shape | workload | concurrency | " + " | ".join(ABLATION_ARMS + ("CoRun",)) + " |",
             "| --- | --- | --- | ---: | " + " | ".join("---:" for _ in ABLATION_ARMS + ("CoRun",)) + " |"]
    for study, key in ablation:
        vals = [pair(groups[study][0], key, arm, "STD") for arm in ABLATION_ARMS + ("CoRun",)]
        lines.append(f"| {study or '-'} | {key[0]} | {key[1]} | {key[2]} | " + " | ".join(vals) + " |")
    return lines + [""]


def open_loop_table(rows: list[dict]) -> str:
    """Latency against load: per study, shape and workload, a row per request rate and a column per arm
    of median TTFT / median TPOT (ms) and output tokens/s, each the median over repetitions with its
    min-max (the report's one statistic). Empty without open-loop rows."""
    import collections
    import statistics

    cells = collections.defaultdict(list)
    for r in rows:
        cells[(r.get("study", ""), r["shape"], r["workload"], r["request_rate"], r["arm"])].append(r)

    def stat(group, field, fmt):
        vals = [g[field] for g in group if g.get(field) is not None]
        if not vals:
            return "-"
        return f"{fmt.format(statistics.median(vals))} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"

    out = []
    for study, shape, workload in sorted({k[:3] for k in cells}):
        arms = sorted({k[4] for k in cells if k[:3] == (study, shape, workload)})
        rates = sorted({k[3] for k in cells if k[:3] == (study, shape, workload)})
        out += [f"### {study + ': ' if study else ''}{shape}, {workload}", "",
                "| requests/s | " + " | ".join(arms) + " |", "| ---: | " + " | ".join("---" for _ in arms) + " |"]
        for rate in rates:
            row = []
            for arm in arms:
                group = cells.get((study, shape, workload, rate, arm), [])
                row.append("-" if not group else (f"TTFT {stat(group, 'median_ttft_ms', '{:.0f}')}, "
                                                  f"TPOT {stat(group, 'median_tpot_ms', '{:.1f}')}, "
                                                  f"{stat(group, 'output_throughput', '{:.0f}')} tok/s"))
            out.append(f"| {rate:g} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)
