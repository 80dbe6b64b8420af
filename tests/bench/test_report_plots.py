"""``bench/report_plots.py``: every arm in one colour across plots, and the plots ``draw`` places."""

import pytest
from matplotlib.colors import to_hex

from bench import report_plots, report_rows


@pytest.fixture
def drawn(monkeypatch):
    """The axes each plot would save, by title, instead of the files."""
    axes = {}

    def keep(plt, fig, ax, title, path):
        axes[title] = fig.axes

    monkeypatch.setattr(report_plots, "_save", keep)
    return axes


def _bar_colours(axes) -> dict[str, str]:
    """Each bar series' label and its one colour, as hex."""
    from matplotlib.colors import to_hex
    from matplotlib.container import BarContainer

    colours = {c.get_label(): {to_hex(bar.get_facecolor()) for bar in c} for ax in axes for c in ax.containers
               if isinstance(c, BarContainer)}
    assert all(len(c) == 1 for c in colours.values())
    return {label: c.pop() for label, c in colours.items()}


def test_an_arm_keeps_its_colour_whichever_arms_share_the_plot(tmp_path, drawn, bench_row):
    rows = [{**bench_row(arm, 0, "sharegpt", 100.0), "study": study}
            for study, arms in (("a", ("STD", "BI", "CoRun")), ("b", ("CoRun", "CoRun-tiers")))
            for arm in arms]
    groups = {study: (rs, report_rows.cells(rs)) for study, rs in report_rows.studies(rows).items()}
    places = report_plots.draw(groups, tmp_path, tmp_path.relative_to(tmp_path))
    assert set(places) == {("a", "qwen3-8b", 256), ("b", "qwen3-8b", 256)}
    a, b = _bar_colours(drawn["a: qwen3-8b, concurrency 256"]), _bar_colours(drawn["b: qwen3-8b, concurrency 256"])
    assert a["CoRun"] == b["CoRun"] == to_hex(report_plots.COLOURS["CoRun"]) != a["STD"]
    assert len({a["STD"], a["BI"], a["CoRun"], b["CoRun-tiers"]}) == 4
    assert set(report_rows.ORDER) <= set(report_plots.COLOURS) and report_plots.colour("other") == "tab:gray"


def test_every_bar_and_sweep_point_draws_its_min_max(tmp_path, drawn, bench_row):
    from matplotlib.container import ErrorbarContainer

    rows = [bench_row(arm, rep, "sharegpt", value) for arm, values in (("STD", (90.0, 100.0, 110.0)),
                                                                      ("CoRun", (95.0, 96.0, 99.0)))
            for rep, value in enumerate(values)]
    report_plots.plot(report_rows.cells(rows), "qwen3-8b", 256, tmp_path / "bars.png")
    (ax,) = drawn["qwen3-8b, concurrency 256"]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2
    lows, highs = zip(*(sorted(seg[:, 1]) for c in bars for seg in c.lines[2][0].get_segments()))
    assert sorted(lows) == [90.0, 95.0] and sorted(highs) == [99.0, 110.0]


def test_timelines_and_padding_draw_each_arm_in_its_colour(tmp_path, drawn, bench_row):
    rows = [{**bench_row(arm, 0, "sharegpt", 100.0), "timeline": [[0, 1.0, 2.0], [1, 3.0, 4.0]]} for arm in ("BI", "CoRun")]
    assert report_plots.plot_timeline(rows, "qwen3-8b", "sharegpt", 256, tmp_path / "t.png")
    (top, bottom), = [v for k, v in drawn.items() if "sharegpt" in k]
    for ax in (top, bottom):
        assert {line.get_label(): line.get_color() for line in ax.lines} == {
            "BI": report_plots.COLOURS["BI"], "CoRun": report_plots.COLOURS["CoRun"]}
    padding = [{"shape": s, "arm": arm, "n": n, "median_tpot_ms": 5.0 + n / 100}
               for s in ("qwen3-8b", "qwen3-30b-a3b") for arm, ns in (("CoRun", (1, 8, 256)), ("STD", (1,))) for n in ns]
    report_plots.plot_padding(padding, tmp_path / "p.png")
    lines = {line.get_label(): line for line in drawn["padding worst case"][0].lines}
    assert {label: line.get_color() for label, line in lines.items()} == {
        f"{arm}, {s}": report_plots.COLOURS[arm] for s in ("qwen3-8b", "qwen3-30b-a3b") for arm in ("CoRun", "STD")}
    assert lines["CoRun, qwen3-8b"].get_marker() != lines["CoRun, qwen3-30b-a3b"].get_marker()
