"""Aggregate benchmark slices (JSON lines from ``bench/run.py``) into ratios, plots and a markdown report.

Per (shape, workload, concurrency, arm): the median over repetitions of
output throughput, median TPOT and median TTFT, with the min-max spread.
Ratios compare medians (CoRun/BI, CoRun/STD, BI/STD). The time-weighted
aggregate throughput of an arm over a set of workloads is the total generated
tokens over the total wall time, per repetition, then the median.

    python bench/report.py docs/results/bench/runs.jsonl --out docs/results/benchmarks.md
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

ARMS = ("STD", "BI", "CoRun")
ABLATION_ARMS = ("SplitKV-off", "SplitKV-off+IsoPrefill")


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cells(rows: list[dict]) -> dict[tuple, dict]:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["shape"], r["workload"], r["concurrency"], r["arm"])].append(r)
    out = {}
    for key, rs in groups.items():
        tput = [r["output_throughput"] for r in rs]
        out[key] = {
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


def aggregate(rows: list[dict], shape: str, concurrency: int) -> dict[str, float]:
    """Time-weighted aggregate output throughput per arm over all workloads (median over reps)."""
    per_rep = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        if r["shape"] == shape and r["concurrency"] == concurrency:
            acc = per_rep[(r["arm"], r["rep"])]
            acc[0] += r["output_tokens"]
            acc[1] += r["duration_s"]
    by_arm = collections.defaultdict(list)
    for (arm, _), (tokens, seconds) in per_rep.items():
        by_arm[arm].append(tokens / seconds)
    return {arm: statistics.median(v) for arm, v in by_arm.items()}


def plot(c: dict, shape: str, concurrency: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency})
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.5))
    width = 0.8 / len(ARMS)
    for j, arm in enumerate(ARMS):
        vals = [c.get((shape, w, concurrency, arm), {}).get("output_throughput", 0) for w in names]
        ax.bar([i + j * width for i in range(len(names))], vals, width, label=arm)
    ax.set_xticks([i + width for i in range(len(names))], names, rotation=20, ha="right")
    ax.set_ylabel("output tokens/s (median)")
    ax.set_title(f"{shape}, concurrency {concurrency}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def render(rows: list[dict], c: dict, plots: dict[tuple, str], header: str) -> str:
    lines = ["# Benchmarks: STD vs BI vs CoRun", "", header, ""]
    for shape, concurrency in sorted({(k[0], k[2]) for k in c}):
        lines += [f"## {shape}, concurrency {concurrency}", ""]
        if (shape, concurrency) in plots:
            lines += [f"![throughput]({plots[(shape, concurrency)]})", ""]
        lines += ["| workload | STD tok/s | BI tok/s | CoRun tok/s | CoRun/BI | CoRun/STD | BI/STD | "
                  "TPOT ms STD / BI / CoRun | reps |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
        for w in sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency}):
            key = (shape, w, concurrency)
            cell = {arm: c.get((*key, arm)) for arm in ARMS}
            tput = [("-" if v is None else f"{v['output_throughput']:.0f} "
                     f"({v['spread'][0]:.0f}-{v['spread'][1]:.0f})") for v in cell.values()]
            tpot = " / ".join("-" if v is None else f"{v['median_tpot_ms']:.1f}" for v in cell.values())
            reps = min((v["reps"] for v in cell.values() if v), default=0)
            lines.append(f"| {w} | {' | '.join(tput)} | {_fmt(ratio(c, key, 'CoRun', 'BI'))} | "
                         f"{_fmt(ratio(c, key, 'CoRun', 'STD'))} | {_fmt(ratio(c, key, 'BI', 'STD'))} | "
                         f"{tpot} | {reps} |")
        agg = aggregate(rows, shape, concurrency)
        if agg:
            lines += ["", "Time-weighted aggregate throughput (tok/s): "
                      + ", ".join(f"{arm} {agg[arm]:.0f}" for arm in ARMS if arm in agg)]
            if "CoRun" in agg and "BI" in agg and "STD" in agg:
                lines.append(f"CoRun/BI {agg['CoRun'] / agg['BI']:.2f}, CoRun/STD {agg['CoRun'] / agg['STD']:.2f}")
        lines.append("")
    ablation = sorted({k for k in c if k[3] in ABLATION_ARMS})
    if ablation:
        lines += ["## Ablations (output throughput relative to STD, medians)", "",
                  "| shape | workload | concurrency | " + " | ".join(ABLATION_ARMS + ("CoRun",)) + " |",
                  "| --- | --- | ---: | " + " | ".join("---:" for _ in ABLATION_ARMS + ("CoRun",)) + " |"]
        for key in sorted({k[:3] for k in ablation}):
            vals = [_fmt(ratio(c, key, arm, "STD")) for arm in ABLATION_ARMS + ("CoRun",)]
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(vals) + " |")
        lines.append("")
    lines.append("Throughput cells: median (min-max) over repetitions.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="JSON lines written by bench/run.py")
    parser.add_argument("--out", default="docs/results/benchmarks.md")
    parser.add_argument("--header", default="", help="host, versions and commands, as markdown")
    args = parser.parse_args(argv)
    rows = load(Path(args.runs))
    c = cells(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plots = {}
    for shape, concurrency in sorted({(k[0], k[2]) for k in c}):
        name = f"bench-{shape}-c{concurrency}.png"
        plot(c, shape, concurrency, out.parent / name)
        plots[(shape, concurrency)] = name
    out.write_text(render(rows, c, plots, args.header))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
