"""Aggregate benchmark slices (JSON lines from ``bench/run.py``) into a summary, a page per study, and plots.

Rows load and pair in ``report_rows``, tables come from ``report_tables``, pages from
``report_pages``, plots from ``report_plots``. ``--out`` is the summary; the study pages, the
profiles page (``--padding``, ``--sampler``, ``--step-profile``), the setup page (``--header``) and
the plots go to ``--plots``, beside it or below it; the lab notes (``--notes``) are linked.

    python -m bench.report docs/results/bench/runs.jsonl --out docs/results/benchmarks.md \
        --plots docs/results/bench [--notes docs/results/bench/notes.md] [--header "$(cat header.md)"] \
        [--padding padding.jsonl] [--sampler sampler.json ...] [--step-profile step_profile.jsonl ...] \
        [--runtime HASH]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench import report_pages, report_plots, report_rows, report_tables


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="JSON lines written by bench/run.py")
    parser.add_argument("--out", default="docs/results/benchmarks.md", help="the summary page")
    parser.add_argument("--header", default="", help="host, versions and commands, as markdown (the setup page)")
    parser.add_argument("--padding", help="JSON lines written by bench/padding.py")
    parser.add_argument("--sampler", action="append", default=[], help="JSON written by bench/sampler_cost.py (repeatable)")
    parser.add_argument("--step-profile", action="append", default=[],
                        help="JSON lines written by bench/step_profile.py in one run (repeatable: a table each)")
    parser.add_argument("--plots", help="folder for the other pages and the PNGs (default: the summary's folder)")
    parser.add_argument("--notes", help="markdown lab notes, linked from the summary")
    parser.add_argument("--runtime", help="the current runtime: where a study has rows of it, rows naming another "
                                          "runtime are left out (report_rows.on_runtime)")
    args = parser.parse_args(argv)
    kept = report_rows.on_runtime(report_rows.load(Path(args.runs)), args.runtime)
    groups = {study: (rows, report_rows.cells(rows)) for study, rows in report_rows.studies(kept).items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(args.plots) if args.plots else out.parent
    folder.mkdir(parents=True, exist_ok=True)
    pages = folder.resolve().relative_to(out.parent.resolve()).as_posix()  # pages live at or below the summary
    back = os.path.relpath(out.resolve(), folder.resolve())
    padding = report_rows.read_jsonl(args.padding) if args.padding else None
    plots = report_plots.draw(groups, folder, Path("."), padding)
    sampler = [json.loads(Path(p).read_text()) for p in args.sampler]
    profile = [(p, report_rows.latest(report_rows.read_jsonl(p), lambda r: (r["shape"], r["arm"], r["load"])))
               for p in args.step_profile]
    for study in groups:
        (folder / report_pages.page_name(study)).write_text(
            report_pages.study_page(study, groups, plots, back, args.runtime))
    has_profiles = bool(padding or sampler or profile)
    if has_profiles:
        (folder / "profiles.md").write_text(report_pages.profiles_page(plots, back, padding, sampler, profile))
    if args.header:
        (folder / "setup.md").write_text(report_pages.setup_page(args.header, back))
    notes = os.path.relpath(Path(args.notes).resolve(), out.parent.resolve()) if args.notes else ""
    out.write_text(report_pages.summary(groups, pages, Path(notes).as_posix() if notes else "", bool(args.header),
                                        has_profiles, args.runtime))
    opened = report_rows.open_loop(Path(args.runs))
    if opened:  # latency against load, from the open-loop rows (Poisson arrivals)
        (folder / "open_loop.md").write_text(
            "# Latency against load\n\nOpen-loop runs (`bench/run.py --request-rate`): Poisson arrivals; each cell "
            "is median TTFT, median TPOT (ms) and output tokens/s, the median over repetitions (min-max).\n\n"
            + report_tables.open_loop_table(opened))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
