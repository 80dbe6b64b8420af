"""The report's pages: a one-page summary, a page per study, the profiles, and the setup.

The summary defines the one statistic every ratio shows (``DEFINITION``), checks the targets, gives the
matrix's coverage and links every other page and the lab notes. A study's page holds its throughput
tables and plots, its decode phase, ablations, decode tiers and repetitions, each only for the arms
it ran side by side. The profiles page holds the padding, sampler and decode-step profiles, which
come from runs of their own; the setup page the hosts, versions and commands (``--header``).
"""

from __future__ import annotations

import statistics
from pathlib import PurePosixPath

from bench.report_rows import ORDER, PACK_ARM, TIERS_ARM, aggregate_reps
from bench.report_tables import (ablation_table, coverage_table, decode_table, pair, padding_table, prefill_tokens_table,
                                 prefills_table, repeats_table, sampler_table, short_phases, step_profile_table,
                                 steps_table, targets_table, tiers_table)

TITLE = "Benchmarks: STD vs BI vs CoRun"
#: How every ratio on every page reads, stated once at the top of the summary.
DEFINITION = ("Every ratio on these pages, A/B, is the median of paired ratios: repetition k of arm A over "
              "repetition k of arm B, which ran back to back on one GPU (so host drift cancels), with the "
              "min-max over repetitions in parentheses. Throughput cells are output tokens/s, median "
              "(min-max) over repetitions. Arms compare only within a study: one slice, its arms "
              "interleaved on one GPU.")


def page_name(study: str) -> str:
    """The file of a study's page (rows written without a study form study "": ``unnamed.md``)."""
    return f"{study or 'unnamed'}.md"


def summary(groups: dict[str, tuple[list[dict], dict]], pages: str, notes: str = "", setup: bool = False,
            profiles: bool = False, runtime: str | None = None) -> str:
    """The summary page; ``pages`` is the folder of the other pages as the summary links it, ``notes``
    the lab notes' path as it links them ("" for none), ``runtime`` the current runtime (None: unknown)."""
    lines = [f"# {TITLE}", "", DEFINITION, ""]
    def at(name: str) -> str:
        return (PurePosixPath(pages) / name).as_posix()

    links = [f"[setup: models, hosts, commands]({at('setup.md')})"] if setup else []
    links += [f"[lab notes: what the measurements show]({notes})"] if notes else []
    links += [f"[padding, sampler and decode-step profiles]({at('profiles.md')})"] if profiles else []
    if links:
        lines += ["See also: " + "; ".join(links) + ".", ""]
    goals = targets_table(groups, runtime)
    if goals:
        lines += ["## Targets", "", *goals, "",
                  "Where a study ran no STD arm, whether BI is slower than STD is read from the studies of the "
                  "same shape, workload and concurrency that ran both; every ratio is the study's own.", ""]
        if runtime:
            lines += [f"The current runtime is `{runtime}`. Where a study has runs on it, its runs on older runtimes "
                      "are left out of every table (they stay in the runs files); a ratio marked stale rests "
                      "on runs of the runtime it names only.", ""]
    lines += ["## Coverage", "", *coverage_table(groups), ""]
    lines += ["## Studies", "", "| study | shape | concurrency | workloads | arms | repetitions |",
              "| --- | --- | --- | --- | --- | ---: |"]
    for study, (rows, c) in groups.items():
        arms = sorted({k[3] for k in c}, key=lambda a: (ORDER.index(a) if a in ORDER else len(ORDER), a))
        lines.append(f"| [{study or '-'}]({at(page_name(study))}) | {', '.join(sorted({k[0] for k in c}))} | "
                     f"{', '.join(str(n) for n in sorted({k[2] for k in c}))} | "
                     f"{', '.join(sorted({k[1] for k in c}))} | {', '.join(arms)} | {len({r['rep'] for r in rows})} |")
    return "\n".join(lines) + "\n"


def study_page(study: str, groups: dict[str, tuple[list[dict], dict]], plots: dict[tuple, str], summary: str,
               runtime: str | None = None) -> str:
    """One study's page; ``plots`` as ``report_plots.draw`` keys them, linked from the page's folder,
    ``summary`` the summary's path from there, ``runtime`` the current runtime (None: unknown)."""
    rows, c = groups[study]
    mine = {study: groups[study]}
    lines = [f"# {study or 'Rows without a study'}", "", f"[Summary and the statistics' definition]({summary}).", ""]
    ran_on = sorted({r["runtime"] for r in rows if r.get("runtime")})
    if runtime and ran_on:
        lines += ["Runs on runtime " + ", ".join(f"`{n}` ({'current' if n == runtime else 'stale'})" for n in ran_on)
                  + ".", ""]
    lines += study_sections(study, rows, c, plots)
    extra = sorted((k, name) for k, name in plots.items() if len(k) > 3 and k[0] == study)
    if extra:
        lines += ["## Over time and across concurrency", ""]
        lines += [f"![{name}]({name})" for _, name in extra]
        lines.append("")
    lines += decode_table(mine) + short_phases(mine) + ablation_table(mine) + tiers_table(mine)
    repeats = repeats_table(mine)
    if repeats:
        lines += ["## Same outputs across repetitions (prompts and seeds alike, batches not)", "",
                  "STD's sampler draws from one generator for the whole batch: SGLang honours a request's "
                  "`sampling_seed` only under `--enable-deterministic-inference` (BI); CoRun draws from the "
                  "request's own seed and step.", "", *repeats, ""]
    return "\n".join(lines) + "\n"


def study_sections(study: str, rows: list[dict], c: dict, plots: dict[tuple, str]) -> list[str]:
    """Markdown: one section per (shape, concurrency) of one study."""
    lines = []
    for shape, concurrency in sorted({(k[0], k[2]) for k in c}):
        lines += [f"## {shape}, concurrency {concurrency}", ""]
        if (study, shape, concurrency) in plots:
            lines += [f"![throughput]({plots[(study, shape, concurrency)]})", ""]
        # a study that serves CoRun only with its decode tiers (and a prefill pack) shows its fullest such
        # arm in CoRun's columns
        arms = {k[3] for k in c if k[0] == shape and k[2] == concurrency}
        co = "CoRun" if "CoRun" in arms else next((a for a in (PACK_ARM, TIERS_ARM) if a in arms), "CoRun")
        lines += [f"| workload | STD tok/s | BI tok/s | {co} tok/s | {co}/BI | {co}/STD | BI/STD | "
                  f"TPOT ms STD / BI / {co} | reps |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
        workloads = sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency})
        for w in workloads:
            key = (shape, w, concurrency)
            cell = {arm: c.get((*key, arm)) for arm in ("STD", "BI", co)}
            tput = [("-" if v is None else f"{v['output_throughput']:.0f} "
                     f"({v['spread'][0]:.0f}-{v['spread'][1]:.0f})") for v in cell.values()]
            tpot = " / ".join("-" if v is None else f"{v['median_tpot_ms']:.1f}" for v in cell.values())
            reps = min((v["reps"] for v in cell.values() if v), default=0)
            lines.append(f"| {w} | {' | '.join(tput)} | {pair(rows, key, co, 'BI')} | {pair(rows, key, co, 'STD')} | "
                         f"{pair(rows, key, 'BI', 'STD')} | {tpot} | {reps} |")
        others = [a for a in ORDER if a in arms and a not in ("STD", "BI", co)] + sorted(arms - {*ORDER, co})
        if others:
            lines += ["", "The study's other arms:", "",
                      f"| workload | arm | tok/s | /BI | /STD | /{co} | TPOT ms | reps |",
                      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for w in workloads:
                key = (shape, w, concurrency)
                for arm in others:
                    v = c.get((*key, arm))
                    if v:
                        lines.append(f"| {w} | {arm} | {v['output_throughput']:.0f} ({v['spread'][0]:.0f}-"
                                     f"{v['spread'][1]:.0f}) | {pair(rows, key, arm, 'BI')} | "
                                     f"{pair(rows, key, arm, 'STD')} | {pair(rows, key, arm, co)} | "
                                     f"{v['median_tpot_ms']:.1f} | {v['reps']} |")
        lines += _aggregate_lines(rows, shape, concurrency, [co, *others])
        steps = steps_table(rows, shape, concurrency)
        if steps:
            lines += ["", "Decode steps by load, from the servers' logs (medians over repetitions):", "", *steps]
        prefills = prefills_table(rows, shape, concurrency)
        if prefills:
            lines += ["", "Prefill iterations, from the servers' logs:", "", *prefills]
        computed = prefill_tokens_table(rows, shape, concurrency)
        if computed:
            lines += ["", "Prefill tokens computed, from each reply's prompt and cached tokens (medians over "
                      "repetitions):", "", *computed]
        lines.append("")
    return lines


def _aggregate_lines(rows: list[dict], shape: str, concurrency: int, arms: list[str]) -> list[str]:
    """The time-weighted aggregate throughput of each arm, and ``arms``' paired ratios to BI and STD."""
    agg, covered = aggregate_reps(rows, shape, concurrency)
    if not agg:
        return []
    lines = ["", f"Time-weighted aggregate throughput over {', '.join(covered)} (tok/s): "
             + ", ".join(f"{arm} {statistics.median(agg[arm].values()):.0f}" for arm in ORDER if arm in agg)]
    if "BI" in agg and "STD" in agg:
        def ratio(arm: str, den: str) -> str:
            values = [agg[arm][k] / agg[den][k] for k in agg[arm] if k in agg[den]]
            return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

        lines.append("; ".join(f"{arm}/BI {ratio(arm, 'BI')}, {arm}/STD {ratio(arm, 'STD')}"
                               for arm in arms if arm in agg))
    return lines


def profiles_page(plots: dict[tuple, str], summary: str, padding: list[dict] | None = None,
                  sampler: list[dict] | None = None, step_profile: list[tuple[str, list[dict]]] | None = None) -> str:
    """The padding study, the sampler microbenchmark and the decode-step profiles."""
    lines = [f"# {TITLE}: profiles", "", f"[Summary]({summary}).", ""]
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
    return "\n".join(lines) + "\n"


def setup_page(header: str, summary: str) -> str:
    """The hosts, versions and commands the rows came from (``--header``)."""
    return "\n".join([f"# {TITLE}: setup", "", f"[Summary]({summary}).", "", header.strip(), ""]) + "\n"

