#!/usr/bin/env python3
"""Aggregate the determinism suite's JSON lines into a markdown report and a JSON summary.

usage: scripts/determinism_report.py RESULTS_DIR [--out docs/results/determinism.md] [--title "..."]
       [--command "..." ...] [--host "..."] [--note "..." ...]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

SCENARIOS = {
    "a": "bs 1 vs bs 32 (32 prompts, T 0.6, 16 tokens)",
    "b": "needle at a random position in batches of 64-256 (128 tokens)",
    "c": "arrival-order permutations of 64 prompts (32 tokens)",
    "d": "needle while 1, 7, 63, 255 others run",
    "e": "long outputs (1024 tokens)",
    "f": "prompts longer than 3 chunks",
    "g": "n = 4: reproducible (distinct samples noted)",
    "h": "co-runners aborted mid-generation",
    "i": "top-p / top-k needles among co-runners with mixed filters (64 tokens)",
    "j": "MoE padding rows: `--corun-moe-padding skip` and `compute` against each other (default: SGLang "
         "against `--corun`), alone and among 1-255 others (64 tokens)",
    "http-verify": "OpenAI completions: alone vs 2 concurrent rounds of 128 (`verify`)",
    "http-chat": "OpenAI chat: alone vs 64 concurrent clients",
    "http-restart": "unseeded requests: before vs after a server restart",
}
ARMS = ("default", "deterministic", "corun", "corun-moe-compute", "corun-moe-skip")
MUST_DIVERGE = ("a", "b", "d", "i")  # the scenarios where default SGLang is the negative control


def aggregate(rows: list[dict]) -> dict:
    cells = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        cell = cells[(r["shape"], r["scenario"], r["arm"])]
        cell[0] += r["divergent"]
        cell[1] += r["comparisons"]
    totals = {arm: [sum(v[0] for k, v in cells.items() if k[2] == arm),
                    sum(v[1] for k, v in cells.items() if k[2] == arm)] for arm in ARMS}
    failed = [{"shape": r["shape"], "arm": r["arm"], "error": r["error"]} for r in rows if r.get("error")]
    distinct = {f"{r['shape']}|{r['arm']}": r["distinct_samples"] for r in rows if "distinct_samples" in r}
    return {"cells": {"|".join(k): v for k, v in sorted(cells.items())}, "totals": totals, "failed": failed,
            "distinct_samples": distinct}


def render(summary: dict, commands: list[str], host: str, title: str = "Determinism suite",
           notes: list[str] = ()) -> str:
    cells = {tuple(k.split("|")): v for k, v in summary["cells"].items()}
    shapes = sorted({k[0] for k in cells})
    arms = [a for a in ARMS if any(k[2] == a for k in cells)] or list(ARMS[:3])  # the arms that ran
    lines = [f"# {title}", "", f"Host: {host}", "", "Commands:", ""]
    lines += [f"    {c}" for c in commands] + [""] + [f"{n}\n" for n in notes]
    for shape in shapes:
        lines += [f"## {shape}", "", "| scenario | " + " | ".join(arms) + " |",
                  "| --- | " + " | ".join("---:" for _ in arms) + " |"]
        for s, scenario in SCENARIOS.items():
            if not any((shape, s, arm) in cells for arm in arms):
                continue
            row = []
            for arm in arms:
                v = cells.get((shape, s, arm))
                row.append("-" if v is None else f"{v[0]} / {v[1]}")
            lines.append(f"| {s}. {scenario} | " + " | ".join(row) + " |")
        distinct = [f"{arm} {summary['distinct_samples'][f'{shape}|{arm}']}" for arm in arms
                    if f"{shape}|{arm}" in summary.get("distinct_samples", {})]
        if distinct:
            lines += ["", "g. distinct samples among the n = 4 of one request: " + ", ".join(distinct)]
        lines.append("")
    lines += ["Cells are divergent / compared (token ids and sampled-token logprobs, bitwise).", "",
              "| arm | divergent | comparisons |", "| --- | ---: | ---: |"]
    for arm in arms:
        bad, total = summary["totals"][arm]
        lines.append(f"| {arm} | {bad} | {total} |")
    lines += ["", "Checks:", ""] + [f"- {c}" for c in checks(summary)]
    for f in summary.get("failed", []):
        last = f["error"].strip().splitlines()[-1] if f["error"].strip() else "?"
        lines.append(f"- {f['shape']}: the {f['arm']} arm did not start ({last})")
    return "\n".join(lines) + "\n"


def checks(summary: dict) -> list[str]:
    """The suite's claims, each stated with the counts behind it."""
    cells = {tuple(k.split("|")): v for k, v in summary["cells"].items()}
    out = [f"{arm}: {bad} divergent of {total} comparisons" for arm, (bad, total) in summary["totals"].items()
           if arm.startswith("corun") and (arm == "corun" or total)]
    for shape in sorted({k[0] for k in cells if not k[0].startswith("http-")}):
        diverged = {s: cells.get((shape, s, "default")) for s in MUST_DIVERGE}
        out.append(f"{shape}, default SGLang diverges in {', '.join(MUST_DIVERGE)}: " + ", ".join(
            f"{s} {'not run' if v is None else f'{v[0]} / {v[1]}'}" for s, v in diverged.items()))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--out", default="docs/results/determinism.md")
    parser.add_argument("--title", default="Determinism suite")
    parser.add_argument("--command", action="append", help="a command that made the rows (repeatable)")
    parser.add_argument("--host", default="")
    parser.add_argument("--note", action="append", default=[], help="a paragraph under the commands (repeatable)")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in (Path(args.results) / "suite.jsonl").read_text().splitlines() if line]
    summary = aggregate(rows)
    out = Path(args.out)
    commands = args.command or ["scripts/determinism_suite.sh"]
    out.write_text(render(summary, commands, args.host, args.title, args.note))
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, **summary}, indent=1))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
