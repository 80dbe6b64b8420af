"""``scripts/determinism_report.py``: the report's counts are recomputed from per-request digests."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "determinism_report.py"
spec = importlib.util.spec_from_file_location("determinism_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _req(arm, scenario, key, role, digest, first=None, shape="qwen3-8b", **extra):
    run = extra.pop("run", 0)
    return {"shape": shape, "arm": arm, "config": "--corun" if arm.startswith("corun") else "",
            "scenario": scenario, "key": key, "run": run if isinstance(run, str) else f"{role}-{run}", "role": role,
            "digest": digest, "tokens": 16, "finish": "length", "first_divergence": first, **extra}


def _needle(arm, scenario, key, outputs, null=("same",), shape="qwen3-8b"):
    """A reference, its null control and compared rows: ``outputs`` holds (digest, first_divergence)."""
    rows = [_req(arm, scenario, key, "reference", "ref", shape=shape)]
    rows += [_req(arm, scenario, key, "null", "ref" if n == "same" else n, None if n == "same" else 0,
                  shape=shape, run=i) for i, n in enumerate(null)]
    rows += [_req(arm, scenario, key, "compared", d, f, shape=shape, run=i) for i, (d, f) in enumerate(outputs)]
    return rows


def _suite(arm, scenario, shape="qwen3-8b", **extra):
    return {"shape": shape, "arm": arm, "scenario": scenario, "tp": 1, **extra}


def _write(folder: Path, name: str, rows):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def _clean_run(root: Path):
    """Two lanes' folders: corun identical everywhere, default diverging at step 0 and at step 5."""
    overlap = {"intended": 64, "observed_max": 97, "observed_min": 1, "samples": 412}
    corun = _needle("corun", "b", "needle0", [("ref", None)] * 4)
    default = _needle("default", "b", "needle0", [("x", 0), ("y", 5), ("ref", None), ("z", 0)])
    _write(root / "dense", "requests.jsonl", corun + default)
    _write(root / "dense", "suite.jsonl", [
        _suite("corun", "b", comparisons=4, divergent=0, null_comparisons=1, null_divergent=0, overlap=overlap,
               cached_tokens=0),
        _suite("default", "b", comparisons=4, divergent=3, null_comparisons=1, null_divergent=0, overlap=overlap,
               cached_tokens=0)])
    _write(root / "moe", "requests.jsonl", _needle("corun", "a", "p0", [("ref", None)] * 2, shape="qwen3-moe"))
    _write(root / "moe", "suite.jsonl", [_suite("corun", "a", shape="qwen3-moe", comparisons=2, divergent=0,
                                                overlap={"intended": 32, "observed_max": 32}, cached_tokens=0)])


def test_main_writes_md_and_json_and_returns_0_on_clean_data(tmp_path):
    _clean_run(tmp_path / "results")
    # the suite's script concatenates the lanes' rows at the top: read once, not twice
    lanes = sorted((tmp_path / "results").glob("*/suite.jsonl"))
    (tmp_path / "results" / "suite.jsonl").write_text("".join(p.read_text() for p in lanes))
    out = tmp_path / "docs" / "determinism.md"
    rc = report.main([str(tmp_path / "results"), "--out", str(out), "--commit", "0123abc", "--host", "H200",
                      "--command", "one", "--command", "two", "--note", "A note.", "--title", "TP 1"])
    assert rc == 0
    text = out.read_text()
    assert text.startswith("# TP 1\n")
    assert "Commit: `0123abc`" in text and "Host: H200" in text and "    one\n    two\n" in text
    assert "A note." in text and "Skipped as concatenations" in text
    assert "| qwen3-8b | 3 / 4 | 0 / 4 |" in text and "| qwen3-moe | - | 0 / 2 |" in text
    assert "Under the `corun*` arms: 0 divergent of 6 comparisons." in text
    assert "| b. needle at a random position in batches of 64-256 (128 tokens) | 3 / 4 | 0 / 4 |" in text
    assert "## Consistency\n\nNone.\n" in text and "NOT PROVEN" not in text
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["commit"] == "0123abc" and summary["commands"] == ["one", "two"]
    assert summary["totals"] == {"qwen3-moe": {"corun": [0, 2]}, "qwen3-8b": {"default": [3, 4], "corun": [0, 4]}}
    assert summary["cells"]["qwen3-8b|b|default"] == [3, 4]
    assert summary["problems"] == [] and summary["unverified"] == []
    assert "rows" not in summary and "digest" not in json.dumps(summary)  # the raw rows stay in the jsonl files
    assert "corun: 0 divergent of 6 comparisons: holds" in summary["checks"]


def test_counts_come_from_digests_not_from_first_divergence():
    rows = _needle("corun", "b", "n", [("ref", None), ("other", None), ("ref", None)])
    del rows[-2]["first_divergence"]  # a divergent output whose first_divergence the suite never wrote
    summary = report.recompute(rows, [])
    assert summary["cells"]["qwen3-8b|b|corun"] == [1, 3]
    assert summary["problems"] == ["qwen3-8b|b|corun: rows whose digest differs from the reference but "
                                   "first_divergence is null (key n, run compared-1, role compared)"]
    same = report.recompute(_needle("corun", "b", "n", [("ref", 3)]), [])
    assert same["cells"]["qwen3-8b|b|corun"] == [0, 1]
    assert "digest equals the reference but first_divergence is set" in same["problems"][0]


def test_null_control_rows_are_counted_apart_from_compared_rows():
    rows = _needle("corun", "b", "n", [("ref", None)] * 3, null=("same", "drift"))
    summary = report.recompute(rows, [])
    assert summary["cells"]["qwen3-8b|b|corun"] == [0, 3]
    assert summary["controls"]["null"] == {"corun": [1, 2]}
    assert "null control: corun 1 / 2 divergent of 2 on 1 arm: FAILS" in report.checks(summary)


def test_a_cross_arm_row_is_compared_with_the_other_arms_reference():
    rows = _needle("corun", "j", "p", [("ref", None)])
    rows += [_req("corun-moe-compute", "j", "p", "compared", "ref", reference_arm="corun"),
             _req("corun-moe-compute", "j", "p", "compared", "moe", 2, reference_arm="corun", run=1)]
    summary = report.recompute(rows, [])
    assert summary["cells"]["qwen3-8b|j|corun-moe-compute"] == [1, 2]
    assert summary["problems"] == []
    # without reference_arm the same rows look for a reference of their own arm, and find none
    for r in rows:
        r.pop("reference_arm", None)
    lost = report.recompute(rows, [])
    assert "qwen3-8b|j|corun-moe-compute" not in lost["cells"]
    assert lost["problems"] == ["qwen3-8b|j|corun-moe-compute: compared rows without a reference "
                                "(arm corun-moe-compute) (2 rows, e.g. key p, run compared-0, role compared)"]


def test_the_default_arms_divergences_split_into_prefill_decode_and_prompt_logprobs():
    rows = _needle("default", "a", "p", [("x", 0), ("y", 0), ("z", 7), ("w", 1), ("v", -1), ("ref", None)])
    summary = report.recompute(rows, [])
    assert summary["controls"]["negative"]["default"]["qwen3-8b|a"] == {
        "divergent": 5, "compared": 6, "prefill": 2, "decode": 2, "prompt_logprobs": 1, "unlocated": 0}
    text = report.render(summary)
    assert "| qwen3-8b, a | 5 / 6 | 2 | 2 | 1 |" in text
    assert "qwen3-8b, default SGLang diverges in a, b, d, i: a 5 / 6 (2 after step 0), b not run, d not run, " \
           "i not run: holds" in report.checks(summary)


def test_the_surface_scenarios_are_negative_controls_where_they_ran():
    rows = (_needle("default", "a", "p", [("x", 0)], shape="smollm2")
            + _needle("default", "n", "needle0", [("x", 3)], shape="smollm2")
            + _needle("default", "q", "json", [("ref", None)], shape="smollm2"))
    (line,) = [c for c in report.checks(report.recompute(rows, [])) if "default SGLang diverges" in c]
    assert line == ("smollm2, default SGLang diverges in a, b, d, i, n, q: a 1 / 1 (0 after step 0), b not run, "
                    "d not run, i not run, n 1 / 1 (1 after step 0), q 0 / 1 (0 after step 0): FAILS")
    assert "n" in report.SCENARIOS and "r" in report.SCENARIOS


def test_overlap_below_the_intended_count_or_missing_is_not_proven():
    rows = _needle("corun", "b", "n", [("ref", None)]) + _needle("corun", "d", "n", [("ref", None)])
    suite = [_suite("corun", "b", comparisons=1, divergent=0, overlap={"intended": 64, "observed_max": 40}),
             _suite("corun", "d", comparisons=1, divergent=0)]
    summary = report.recompute(rows, suite)
    assert [e["proven"] for e in summary["controls"]["overlap"]["qwen3-8b|b|corun"]] == [False]
    assert [e["proven"] for e in summary["controls"]["overlap"]["qwen3-8b|d|corun"]] == [False]
    text = report.render(summary)
    assert "| b | **40 < 64: NOT PROVEN** |" in text and "| d | **NOT PROVEN** (not measured) |" in text
    assert "overlap: NOT PROVEN in 2 of 2 cells (qwen3-8b: b/corun, d/corun)" in report.checks(summary)
    suite[0]["overlap"]["observed_max"] = 64
    suite[1]["overlap"] = {"intended": 255, "observed_max": 256}
    assert "overlap: proven in all 2 cells" in report.checks(report.recompute(rows, suite))


def test_a_control_that_diverged_needs_no_overlap_and_one_that_did_not_still_does():
    rows = (_needle("default", "r", "tool", [("x", 0)], shape="smollm2")
            + _needle("default", "q", "json", [("ref", None)], shape="smollm2"))
    low = {"intended": 14, "observed_max": 2, "samples": 32}
    suite = [_suite("default", "r", shape="smollm2", comparisons=1, divergent=1, overlap=low),
             _suite("default", "q", shape="smollm2", comparisons=1, divergent=0, overlap=dict(low))]
    summary = report.recompute(rows, suite)
    overlap = summary["controls"]["overlap"]
    assert [e["proven"] for e in overlap["smollm2|r|default"]] == [True]
    assert [e["proven"] for e in overlap["smollm2|q|default"]] == [False]  # no divergence: the 0 may be vacuous
    assert "| r | 2 < 14, diverged |" in report.render(summary)
    assert "overlap: NOT PROVEN in 1 of 2 cells (smollm2: q/default)" in report.checks(summary)
    suite[0]["null_divergent"] = 1  # a divergence its null control also shows is no co-runner effect
    assert [e["proven"] for e in report.recompute(rows, suite)["controls"]["overlap"]["smollm2|r|default"]] == [False]


def test_a_row_with_no_tokens_is_flagged_and_main_exits_1(tmp_path):
    rows = _needle("corun", "b", "n", [("ref", None)])
    rows[1]["tokens"] = 0
    _write(tmp_path / "dense", "requests.jsonl", rows)
    out = tmp_path / "determinism.md"
    assert report.main([str(tmp_path), "--out", str(out)]) == 1
    assert "- qwen3-8b|b|corun: rows with tokens == 0 (key n, run null-0, role null)" in out.read_text()
    assert json.loads(out.with_suffix(".json").read_text())["problems"]


def test_rows_without_output_are_no_comparisons():
    """A server that stopped answering gives empty outputs, whose digests agree with each other: they count
    neither as identical nor as divergent, and each is flagged."""
    rows = _needle("corun-prefix", "a", "p0", [("ref", None)])
    rows += _needle("corun-prefix", "a", "p1", [("ref", None), ("ref", None)])
    for row in rows[3:]:  # p1's reference, null and compared rows: all empty
        row["tokens"] = 0
    rows.append(_req("corun-prefix", "a", "p0", "compared", "empty", 0, run=1, tokens=0))
    summary = report.recompute(rows, [])
    assert summary["cells"]["qwen3-8b|a|corun-prefix"] == [0, 1]  # p0's one answered comparison
    assert summary["controls"]["null"]["corun-prefix"] == [0, 1]
    assert sum("rows with tokens == 0" in p for p in summary["problems"]) == 1
    assert "rows with tokens == 0 (5 rows, e.g. key p1, run reference-0" in summary["problems"][0]


def test_a_missing_or_doubled_reference_is_flagged():
    rows = [r for r in _needle("corun", "b", "n", [("ref", None)]) if r["role"] != "reference"]
    summary = report.recompute(rows, [])
    assert "qwen3-8b|b|corun" not in summary["cells"]  # nothing to compare against: not counted
    assert [p.split(": ")[1] for p in summary["problems"]] == [
        "null rows without a reference (arm corun) (key n, run null-0, role null)",
        "compared rows without a reference (arm corun) (key n, run compared-0, role compared)"]
    doubled = _needle("corun", "b", "n", [("ref", None)]) + [_req("corun", "b", "n", "reference", "ref")]
    assert report.recompute(doubled, [])["problems"] == ["qwen3-8b|b|corun: 2 references for key n"]


def test_the_suites_own_counts_are_cross_checked():
    rows = _needle("corun", "b", "n", [("ref", None), ("ref", None)])
    suite = [_suite("corun", "b", comparisons=2, divergent=1, null_comparisons=1, null_divergent=0)]
    assert report.recompute(rows, suite)["problems"] == [
        "qwen3-8b|b|corun: suite.jsonl says 1 / 2 divergent, requests.jsonl gives 0 / 2"]


def test_older_suite_rows_without_the_new_keys_still_render():
    suite = [_suite("corun", "a", comparisons=32, divergent=0, first_steps=[]),
             _suite("default", "a", comparisons=32, divergent=30, first_steps=[0] * 29 + [3]),
             _suite("corun", "g", comparisons=4, divergent=0, first_steps=[], distinct_samples=4),
             _suite("deterministic", "start", comparisons=0, divergent=0, error="server exited:\nValueError: x"),
             _suite("corun", "http-verify", shape="http-qwen3-8b", comparisons=32, divergent=0, first_steps=[]),
             _suite("default", "b", comparisons=0, divergent=0, restarted=True,
                    error="its server exited with status -6 during scenario b: torch.AcceleratorError: CUDA error")]
    summary = report.recompute([], suite)
    assert summary["problems"] == []
    assert summary["unverified"] == ["http-qwen3-8b|http-verify|corun", "qwen3-8b|a|corun", "qwen3-8b|a|default",
                                     "qwen3-8b|g|corun"]
    assert summary["controls"]["negative"]["default"]["qwen3-8b|a"]["decode"] == 1
    text = report.render(summary)
    assert "| a. bs 1 vs bs 32 (32 prompts, T 0.6, 16 tokens) | 30 / 32* | 0 / 32* |" in text
    assert "| http-verify. OpenAI completions" in text and "| e. long outputs" not in text
    assert "\\* from suite.jsonl alone" in text
    assert "- qwen3-8b, g: corun 4" in text and "| corun | not measured |" in text
    assert "- qwen3-8b: the deterministic arm did not start (ValueError: x)" in text
    assert ("- qwen3-8b, b: the default arm failed: its server exited with status -6 during scenario b: "
            "torch.AcceleratorError: CUDA error") in text


def test_only_the_arms_that_ran_get_a_column_and_corun_arms_their_check():
    rows = (_needle("corun", "j", "p", [("ref", None)], shape="qwen3-moe")
            + [_req("corun-moe-compute", "j", "p", "compared", "ref", shape="qwen3-moe", reference_arm="corun")])
    summary = report.recompute(rows, [])
    text = report.render(summary)
    assert "| scenario | corun | corun-moe-compute |" in text and "| j. MoE padding rows:" in text
    assert report.checks(summary)[:2] == ["corun: 0 divergent of 1 comparisons: holds",
                                          "corun-moe-compute: 0 divergent of 1 comparisons: holds"]


def test_a_row_that_claims_no_overlap_is_not_flagged():
    rows = [{"shape": "m", "arm": "corun", "scenario": "g", "comparisons": 1, "divergent": 0, "claims_overlap": False,
             "overlap": None}]
    reqs = [{"shape": "m", "arm": "corun", "scenario": "g", "key": "k", "run": r, "role": role, "digest": "aa",
             "tokens": 3, "finish": "length", "first_divergence": None} for r, role in (("alone", "reference"),
                                                                                       ("again", "compared"))]
    summary = report.recompute(reqs, rows)
    assert summary["controls"]["overlap"] and all(
        e["proven"] for entries in summary["controls"]["overlap"].values() for e in entries)


def _prefix_rows(arm, warm):
    """Scenario n rows of one needle: cold reference and null, then warm and whole runs ``warm`` (digest, first
    divergence, cached tokens) among co-runners."""
    rows = [_req(arm, "s", "needle0", "reference", "ref", run="alone", cached_tokens=0),
            _req(arm, "s", "needle0", "null", "ref", run="again", cached_tokens=0)]
    return rows + [_req(arm, "s", "needle0", "compared", d, f, run=run, cached_tokens=c)
                   for run, (d, f, c) in warm.items()]


def test_each_control_arm_has_its_own_negative_control_and_scenario_s_its_hits():
    rows = _needle("default", "a", "p", [("x", 0)])
    rows += _prefix_rows("default-radix", {"warm": ("w", 0, 2500), "whole": ("v", 3, 2599)})
    rows += _prefix_rows("corun-prefix", {"warm": ("ref", None, 2048), "whole": ("ref", None, 2599)})
    summary = report.recompute(rows, [])
    assert summary["controls"]["negative"] == {
        "default": {"qwen3-8b|a": {"divergent": 1, "compared": 1, "prefill": 1, "decode": 0, "prompt_logprobs": 0,
                                   "unlocated": 0}},
        "default-radix": {"qwen3-8b|s": {"divergent": 2, "compared": 2, "prefill": 1, "decode": 1,
                                         "prompt_logprobs": 0, "unlocated": 0}}}
    checks = report.checks(summary)
    assert "corun-prefix: 0 divergent of 2 comparisons: holds" in checks
    assert "qwen3-8b, default SGLang diverges in a, b, d, i: a 1 / 1 (0 after step 0), b not run, d not run, " \
           "i not run: holds" in checks
    assert "qwen3-8b, default SGLang with its radix cache diverges in s: s 2 / 2 (1 after step 0): holds" in checks
    hits = summary["controls"]["hits"]
    assert hits["qwen3-8b|corun-prefix"] == {
        "alone": {"role": "reference", "rows": 1, "divergent": 0, "cached": [0, 0]},
        "again": {"role": "null", "rows": 1, "divergent": 0, "cached": [0, 0]},
        "warm": {"role": "compared", "rows": 1, "divergent": 0, "cached": [2048, 2048]},
        "whole": {"role": "compared", "rows": 1, "divergent": 0, "cached": [2599, 2599]}}
    assert hits["qwen3-8b|default-radix"]["warm"]["divergent"] == 1
    text = report.render(summary)
    assert "Negative control, default SGLang with its radix cache (`default-radix`), which must diverge in s" in text
    assert "| qwen3-8b, s | 2 / 2 | 1 | 1 | 0 |" in text
    assert "Prefix-cache hits in scenario s, qwen3-8b, corun-prefix" in text
    assert "| warm | compared | 1 | 2048 | 0 |" in text
    # a control arm that does not diverge where it must fails its check
    quiet = _prefix_rows("default-radix", {"warm": ("ref", None, 2500)})
    assert "qwen3-8b, default SGLang with its radix cache diverges in s: s 0 / 1 (0 after step 0): FAILS" in \
        report.checks(report.recompute(quiet, []))


def test_a_parametrized_scenarios_rows_meet_the_reference_written_before_them():
    """Scenario b runs once per temperature under the same keys: each run's rows follow its own reference."""
    greedy = _needle("corun", "b", "n", [("ref", None), ("ref", None)])
    sampled = [dict(row, digest="other") for row in _needle("corun", "b", "n", [("ref", None), ("ref", None)])]
    summary = report.recompute(greedy + sampled, [])
    assert summary["problems"] == []
    assert summary["cells"]["qwen3-8b|b|corun"] == [0, 4]
    # the control: one digest changed in the second run diverges against its own reference, not the first's
    sampled[-1]["digest"], sampled[-1]["first_divergence"] = "ref", 3
    assert report.recompute(greedy + sampled, [])["cells"]["qwen3-8b|b|corun"] == [1, 4]
