"""``scripts/determinism_report.py``: suite rows aggregate into per-cell and per-arm counts."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "determinism_report.py"
spec = importlib.util.spec_from_file_location("determinism_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _row(shape, arm, scenario, divergent, comparisons):
    return {"shape": shape, "arm": arm, "scenario": scenario, "divergent": divergent,
            "comparisons": comparisons, "first_steps": []}


def test_cells_and_totals_add_up(tmp_path):
    rows = [
        _row("qwen3-8b", "corun", "a", 0, 32), _row("qwen3-8b", "corun", "b", 0, 4),
        _row("qwen3-8b", "corun", "b", 0, 4), _row("qwen3-8b", "default", "a", 30, 32),
        _row("qwen3-moe-small", "deterministic", "d", 0, 4),
    ]
    (tmp_path / "suite.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "determinism.md"
    assert report.main([str(tmp_path), "--out", str(out), "--host", "H200"]) == 0
    text = out.read_text()
    assert "| b. needle at a random position in batches of 64-256 (128 tokens) | - | - | 0 / 8 |" in text
    assert "| a. bs 1 vs bs 32 (32 prompts, T 0.6, 16 tokens) | 30 / 32 | - | 0 / 32 |" in text
    assert "| corun | 0 | 40 |" in text and "| default | 30 | 32 |" in text
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["totals"]["deterministic"] == [0, 4]


def test_checks_state_the_corun_total_and_the_negative_controls(tmp_path):
    rows = [_row("qwen3-8b", "corun", "c", 0, 1024), _row("qwen3-8b", "default", "a", 30, 32),
            _row("qwen3-8b", "default", "b", 5, 8), _row("http-qwen3-small", "corun", "http-verify", 0, 32)]
    summary = report.aggregate(rows)
    assert report.checks(summary) == [
        "corun: 0 divergent of 1056 comparisons",
        "qwen3-8b, default SGLang diverges in a, b, d, i: a 30 / 32, b 5 / 8, d not run, i not run",
    ]
    text = report.render(summary, ["cmd"], "H200")
    assert "## http-qwen3-small" in text and "| http-verify." in text
    assert "| e. long outputs" not in text


def test_an_arm_that_did_not_start_is_named():
    rows = [_row("qwen3-8b", "corun", "a", 0, 32),
            {**_row("qwen3-8b", "deterministic", "start", 0, 0), "error": "server exited with 1:\nValueError: x"}]
    text = report.render(report.aggregate(rows), ["cmd"], "H200")
    assert "- qwen3-8b: the deterministic arm did not start (ValueError: x)" in text


def test_commands_notes_and_distinct_samples_are_rendered():
    rows = [{**_row("qwen3-8b", "corun", "g", 0, 4), "distinct_samples": 4},
            {**_row("qwen3-8b", "deterministic", "g", 0, 4), "distinct_samples": 1}]
    text = report.render(report.aggregate(rows), ["one", "two"], "H200", "TP 2", ["A note."])
    assert text.startswith("# TP 2\n")
    assert "    one\n    two\n" in text and "A note." in text
    assert "g. distinct samples among the n = 4 of one request: deterministic 1, corun 4" in text


@pytest.mark.parametrize("other", ["corun-moe-compute", "corun-moe-skip"])
def test_the_moe_padding_arm_and_scenario_j_get_their_column_and_check(other):
    rows = [_row("qwen3-moe-small", "corun", "a", 0, 32), _row("qwen3-moe-small", other, "a", 0, 32),
            _row("qwen3-moe-small", other, "j", 0, 8), _row("qwen3-moe-small", "default", "j", 8, 8)]
    summary = report.aggregate(rows)
    text = report.render(summary, ["cmd"], "H200")
    assert f"| scenario | default | corun | {other} |" in text  # only the arms that ran
    assert "| j. MoE padding rows:" in text and "| 8 / 8 | - | 0 / 8 |" in text
    assert report.checks(summary)[:2] == ["corun: 0 divergent of 32 comparisons",
                                          f"{other}: 0 divergent of 40 comparisons"]
