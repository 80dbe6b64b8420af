"""Plots of benchmark cells (matplotlib, Agg): throughput per arm, timelines, concurrency sweeps, padding.

Every plot puts its legend beside the axes, never over the data, draws each arm in its colour of
``COLOURS`` (an arm outside it in grey), so an arm looks the same in every plot, and draws each median
with its min-max over repetitions. ``draw`` makes every plot a set of
studies has data for and returns where each went, keyed as the tables look them up.
"""

from __future__ import annotations

from pathlib import Path

from bench.report_rows import CUBLAS_ARM, NOCAL_ARM, NOWAIT_ARM, ORDER, PACK_ARM, PREFIX_ARM, TIERS_ARM, WAIT_ARM

#: Each arm's colour in every plot (matplotlib's tab10, then named colours; gray marks an arm outside it).
COLOURS = {"STD": "tab:blue", "BI": "tab:orange", "SplitKV-off": "tab:purple", "SplitKV-off+IsoPrefill": "tab:brown",
           "CoRun": "tab:green", TIERS_ARM: "tab:red", PACK_ARM: "tab:cyan", WAIT_ARM: "tab:olive",
           "CoRun-moecompute": "tab:pink", NOCAL_ARM: "yellowgreen", "STD-flashinfer": "lightsteelblue",
           "BI-flashinfer": "navajowhite", PREFIX_ARM: "darkgreen", NOWAIT_ARM: "mediumseagreen",
           CUBLAS_ARM: "cadetblue"}
assert set(ORDER) <= set(COLOURS)


def colour(arm: str) -> str:
    return COLOURS.get(arm, "tab:gray")


def _prefix(study: str) -> str:
    return f"{study}-" if study else ""


def plot(c: dict, shape: str, concurrency: int, path: Path, study: str = "") -> None:
    plt = _pyplot()
    names = sorted({k[1] for k in c if k[0] == shape and k[2] == concurrency})
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.5))
    arms = [a for a in ORDER if any(k[0] == shape and k[2] == concurrency and k[3] == a for k in c)]
    width = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        got = [c.get((shape, w, concurrency, arm), {}) for w in names]
        vals = [g.get("output_throughput", 0) for g in got]
        ax.bar([i + j * width for i in range(len(names))], vals, width, label=arm, color=colour(arm),
               yerr=_spread(vals, [g.get("spread") for g in got]), capsize=2, ecolor="black")
    ax.set_xticks([i + width * (len(arms) - 1) / 2 for i in range(len(names))], names, rotation=20, ha="right")
    ax.set_ylabel("output tokens/s (median, min-max bars)")
    _save(plt, fig, ax, f"{study + ': ' if study else ''}{shape}, concurrency {concurrency}", path)


def _spread(values: list[float], spreads: list) -> list[list[float]]:
    """Matplotlib's asymmetric error bars from each value's (min, max) over repetitions (none: zero)."""
    lo = [v - s[0] if s else 0.0 for v, s in zip(values, spreads)]
    hi = [s[1] - v if s else 0.0 for v, s in zip(values, spreads)]
    return [lo, hi]


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
        top.plot([b[0] for b in bins], [b[1] for b in bins], label=arm, color=colour(arm))
        bottom.plot([b[0] for b in bins], [b[2] for b in bins], label=arm, color=colour(arm))
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
        got = [(n, c[(shape, workload, n, arm)]) for n in levels if (shape, workload, n, arm) in c]
        if got:
            vals = [g["output_throughput"] for _, g in got]
            ax.errorbar([n for n, _ in got], vals, yerr=_spread(vals, [g.get("spread") for _, g in got]),
                        marker="o", capsize=2, label=arm, color=colour(arm))
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(n) for n in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s (median, min-max bars)")
    _save(plt, fig, ax, f"{shape}, {workload}", path)
    return True


def plot_padding(rows: list[dict], path: Path) -> None:
    """One request's TPOT against the decode graph size N, STD's as a reference line, per shape (a marker
    per shape, each arm in its colour)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for shape, marker in zip(sorted({r["shape"] for r in rows}), "osD^v<>"):
        pts = sorted((r["n"], r["median_tpot_ms"]) for r in rows if r["shape"] == shape and r["arm"] == "CoRun")
        ax.plot([n for n, _ in pts], [t for _, t in pts], marker=marker, color=colour("CoRun"), label=f"CoRun, {shape}")
        for r in rows:
            if r["shape"] == shape and r["arm"] == "STD":
                ax.axhline(r["median_tpot_ms"], linestyle="--", marker=marker, markevery=[0], color=colour("STD"),
                           label=f"STD, {shape}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (decode graph slots), one request running")
    ax.set_ylabel("TPOT ms (median)")
    ax.set_ylim(bottom=0)
    _save(plt, fig, ax, "padding worst case", path)


def draw(groups: dict[str, tuple[list[dict], dict]], folder: Path, link: Path,
         padding: list[dict] | None = None) -> dict[tuple, str]:
    """Every plot of ``groups`` (``{study: (rows, cells)}``) and ``padding`` into ``folder``; the path of each
    under ``link`` (the folder as the report links it), keyed (study, shape, concurrency) for a study's
    throughput, (study, shape, workload, concurrency, "timeline"), (study, shape, workload, 0, "sweep"),
    and ("padding",). A plot without data to draw is left out."""
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
    if padding:
        plot_padding(padding, folder / "padding.png")
        plots[("padding",)] = (link / "padding.png").as_posix()
    return plots
