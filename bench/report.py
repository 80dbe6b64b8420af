"""Aggregate benchmark slices (JSON lines from ``bench/run.py``) into ratios, plots and a markdown report.

Rows load and reduce in ``report_rows``, tables and the report's text come from ``report_tables``,
plots from ``report_plots``; timelines of prefill and decode throughput (first repetition), the
concurrency sweep and the padding study (``--padding``, from ``bench/padding.py``) are plotted.

    python -m bench.report docs/results/bench/runs.jsonl --out docs/results/benchmarks.md \
        --plots docs/results/bench [--notes notes.md] [--padding docs/results/bench/padding.jsonl] \
        [--sampler sampler.json ...] [--step-profile step_profile.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import report_plots, report_rows, report_tables


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
    groups = {study: (rows, report_rows.cells(rows))
              for study, rows in report_rows.studies(report_rows.load(Path(args.runs))).items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(args.plots) if args.plots else out.parent
    folder.mkdir(parents=True, exist_ok=True)
    link = folder.resolve().relative_to(out.parent.resolve())  # plots live at or below the report
    padding = report_rows.read_jsonl(args.padding) if args.padding else None
    plots = report_plots.draw(groups, folder, link, padding)
    sampler = [json.loads(Path(p).read_text()) for p in args.sampler]
    notes = Path(args.notes).read_text() if args.notes else ""
    profile = [(p, report_rows.latest(report_rows.read_jsonl(p), lambda r: (r["shape"], r["arm"], r["load"])))
               for p in args.step_profile]
    out.write_text(report_tables.render(groups, plots, args.header, padding, sampler, notes, profile))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
