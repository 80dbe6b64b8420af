"""``python -m bench.report``: the report it writes from benchmark rows, and its plots."""

import json

import pytest

from bench import report, report_rows


def _report(tmp_path, rows, *args) -> str:
    """The report bench/report.py writes for these rows (and options), as text."""
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), *args]) == 0
    return _pages(out)


def _pages(out, folder=None) -> str:
    """The summary ``out`` and, after it, every other page the report wrote (into ``folder``, else beside it)."""
    others = sorted(p for p in (folder or out.parent).glob("*.md") if p != out)
    return "\n".join(page.read_text() for page in [out, *others])


def test_report_medians_ratios_aggregate_and_plot(tmp_path, bench_row):
    rows = []
    for rep in range(3):
        for w, (std, bi, corun) in {"sharegpt": (1000, 500, 900), "fixed-1024-128": (2000, 1800, 1900)}.items():
            rows += [bench_row("STD", rep, w, std + rep), bench_row("BI", rep, w, bi + rep), bench_row("CoRun", rep, w, corun + rep)]
    text = _report(tmp_path, rows, "--header", "Host: test")
    assert "| sharegpt | 1001 (1000-1002) | 501 (500-502) | 901 (900-902) | 1.80 (1.80-1.80) | 0.90 (0.90-0.90) | 0.50 (0.50-0.50) |" in text
    assert (tmp_path / "bench-qwen3-8b-c256.png").stat().st_size > 1000
    assert "Ablations" not in text
    agg, names = report_rows.aggregate(rows, "qwen3-8b", 256)
    assert names == ["fixed-1024-128", "sharegpt"]
    assert agg["STD"] == pytest.approx(2000 / (1000 / 1001 + 1000 / 2001), rel=1e-6)
    # a workload some arm has not run yet stays out of every arm's aggregate
    partial = rows + [bench_row("STD", rep, "azure-conv", 10) for rep in range(3)]
    assert report_rows.aggregate(partial, "qwen3-8b", 256) == (agg, names)


def test_report_counts_each_arms_prefill_iterations_and_the_prompts_they_held(tmp_path, bench_row):
    # isolated prefill: one prompt an iteration (a long prompt in two chunks, each counted as SGLang
    # counts it: #new-seq 1); a pack: up to 3 prompts
    batches = {"CoRun": [[[1, 100]] * 4 + [[1, 8192], [1, 1808]]] * 3,
               "CoRun-tiers-pack": [[[3, 1024], [1, 1024], [1, 8192], [1, 1808]],
                                    [[3, 1024], [1, 1024], [1, 8192], [1, 1808]],
                                    [[2, 1024], [2, 1024], [1, 8192], [1, 1808]]]}
    rows = [{**bench_row(arm, rep, "azure-conv", 1000), "prefill_batches": b}
            for arm, runs in batches.items() for rep, b in enumerate(runs)]
    rows += [bench_row("STD", rep, "azure-conv", 1000) for rep in range(3)]  # rows without them: no line
    text = _report(tmp_path, rows)
    assert "Prefill iterations, from the servers' logs:" in text
    assert "| azure-conv | CoRun | 6 (6-6) | 1.00, 1 | 3 |" in text
    assert "| azure-conv | CoRun-tiers-pack | 4 (4-4) | 1.50, 3 | 3 |" in text
    assert "| azure-conv | STD |" not in text.split("Prefill iterations")[1]


def test_report_tables_decode_steps_by_load_and_prices_fixed_shapes(tmp_path, bench_row):
    # STD: 5 ms steps at 4 running, 10 ms at 200; CoRun: 12 ms at any load (one N-slot graph);
    # CoRun-tiers: 6 ms at 4 running (a smaller graph), 12 ms at 200
    steps = {"STD": [[4, 800.0], [200, 20000.0]], "CoRun": [[4, 4 / 0.012], [200, 200 / 0.012]],
             "CoRun-tiers": [[4, 4 / 0.006], [200, 200 / 0.012]]}
    rows = [{**bench_row(arm, rep, "sharegpt", 1000), "decode_steps": steps[arm]} for rep in range(3) for arm in steps]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    notes = tmp_path / "notes.md"
    notes.write_text("## Missed targets\n\nmeasured reasons\n")
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--plots", str(tmp_path / "bench"), "--notes", str(notes)]) == 0
    text = _pages(out, tmp_path / "bench")
    assert "| sharegpt | STD | 0.2 (5.0) | - | - | 0.4 (10.0) | 1.0 | 0.4 | - |" in text
    # CoRun at STD's step cost: 0.48 s * (1 - 5/12) + 0.48 s * (1 - 10/12) = 0.36 s
    assert "| sharegpt | CoRun | 0.5 (12.0) | - | - | 0.5 (12.0) | 1.0 | 0.0 | 0.4 |" in text
    # CoRun-tiers: 0.24 s * (1 - 5/6) + 0.48 s * (1 - 10/12) = 0.12 s
    assert "| sharegpt | CoRun-tiers | 0.2 (6.0) | - | - | 0.5 (12.0) | 1.0 | 0.3 | 0.1 |" in text
    # the lab notes are linked from the summary, not copied into it
    summary = out.read_text()
    assert "[lab notes: what the measurements show](notes.md)" in summary and "measured reasons" not in text
    assert summary.index("## Targets") < summary.index("## Coverage") and "## qwen3-8b, concurrency 256" in text
    # the study's page sits beside its plots, the summary links it
    assert "![throughput](bench-qwen3-8b-c256.png)" in (tmp_path / "bench" / "unnamed.md").read_text()
    assert "[-](bench/unnamed.md)" in summary
    assert (tmp_path / "bench" / "bench-qwen3-8b-c256.png").exists()


def test_report_checks_targets_on_paired_repetitions_and_tables_the_sampler(tmp_path, bench_row):
    rows = []
    for rep, (std, bi, corun) in enumerate([(1000, 500, 900), (1100, 520, 700), (1000, 480, 950)]):
        rows += [bench_row("STD", rep, "sharegpt", std), bench_row("BI", rep, "sharegpt", bi), bench_row("CoRun", rep, "sharegpt", corun)]
        rows += [{**bench_row(arm, rep, "fixed-64-448", 1000), "decode_phase_throughput": d}
                 for arm, d in (("STD", 2000), ("CoRun", 1900 + rep))]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    sampler = tmp_path / "sampler.json"
    sampler.write_text(json.dumps({"rows": 256, "vocab": 151936, "top_p": 0.9, "top_k": 50,
                                   "median_ms": {"sglang_default": 1.0, "corun": 0.5},
                                   "ratio_to_default": {"sglang_default": 1.0, "corun": 0.5}}))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--sampler", str(sampler)]) == 0
    text = _pages(out)
    # paired ratios 900/500, 700/520, 950/480 -> median 1.80; 0.90, 0.64, 0.95 -> median 0.90
    assert "| CoRun >= 1.5x BI at concurrency 256 | - | qwen3-8b | sharegpt | 256 | 1.80 (1.35-1.98) | 3 | - | yes |" in text
    assert "| CoRun >= 0.9x STD at concurrency 256 | - | qwen3-8b | sharegpt | 256 | 0.90 (0.64-0.95) | 3 | - | yes |" in text
    assert "| decode phase: CoRun >= 0.9x STD | - | qwen3-8b | fixed-64-448 | 256 | 0.95 (0.95-0.95) | 3 | - | yes |" in text
    assert "1.5x BI at concurrency 256 | - | qwen3-8b | fixed-64-448" not in text  # no BI arm there
    assert "| 256 x 151936 | 0.9 | 50 | corun | 0.500 | 0.50 |" in text
    assert report_rows.paired_ratios(rows, ("qwen3-8b", "sharegpt", 256), "STD", "CoRun")[1] == pytest.approx(1100 / 700)


def test_a_missed_target_shows_the_digits_that_tell_it_from_the_target(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "fixed-64-448", 1000), "decode_phase_throughput": d}
            for rep in range(3) for arm, d in (("STD", 2000), ("CoRun", 1798))]
    runs, out = tmp_path / "runs.jsonl", tmp_path / "benchmarks.md"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    assert report.main([str(runs), "--out", str(out)]) == 0
    assert "| decode phase: CoRun >= 0.9x STD | - | qwen3-8b | fixed-64-448 | 256 | 0.899 (0.899-0.899) | 3 | - | **no** |" \
        in _pages(out)


def test_the_decode_phase_table_shows_the_pack_arm_beside_the_others(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "fixed-64-448", 1000), "decode_phase_throughput": d, "study": "pack"}
            for rep in range(3) for arm, d in (("STD", 2000), ("BI", 1000), ("CoRun", 1800), ("CoRun-tiers-pack", 1900))]
    text = _report(tmp_path, rows)
    assert "| CoRun/STD | CoRun/BI | CoRun-tiers/STD | CoRun-tiers-pack/STD |" in text
    assert ("| pack | qwen3-8b | fixed-64-448 | 256 | window | 2000 (2000-2000) | 1000 (1000-1000) | 1800 (1800-1800) "
            "| - | 1900 (1900-1900) | 0.90 (0.90-0.90) | 1.80 (1.80-1.80) | - | 0.95 (0.95-0.95) |") in text


def test_report_tables_each_step_profile_run_on_its_own(tmp_path, bench_row):
    def prof(arm, load, span, kv):
        return {"shape": "qwen3-8b", "arm": arm, "load": load, "running": load, "kv_tokens": kv,
                "span_ms_per_step": span, "kernel_ms_per_step": span - 0.5, "by_kind_ms": {"attention": 1.0},
                **({"graph_slots": 256} if arm == "CoRun" else {})}

    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(bench_row("STD", 0, "sharegpt", 1000)))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("\n".join(json.dumps(r) for r in (prof("STD", 16, 6.0, 8704), prof("CoRun", 16, 9.0, 8704))))
    second.write_text(json.dumps(prof("CoRun", 16, 10.0, 8704)))  # another run's rows stay in their own table
    out = tmp_path / "benchmarks.md"
    report.main([str(runs), "--out", str(out), "--step-profile", str(first), "--step-profile", str(second)])
    text = _pages(out)
    tables = text.split(f"`{second}`:")
    assert f"`{first}`:" in tables[0] and "| qwen3-8b | 16 | CoRun | 256 | 8,704 | 9.00 | 8.50 | 0.50 | 1.00 |" in tables[0]
    assert "| qwen3-8b | 16 | STD | - | 8,704 | 6.00 |" in tables[0] and "STD" not in tables[1].split("##")[0]
    assert "| qwen3-8b | 16 | CoRun | 256 | 8,704 | 10.00 |" in tables[1]


def test_report_lists_ablations_relative_to_std(tmp_path, bench_row):
    rows = [bench_row("STD", 0, "sharegpt", 1000), bench_row("SplitKV-off", 0, "sharegpt", 950),
            bench_row("SplitKV-off+IsoPrefill", 0, "sharegpt", 920), bench_row("CoRun", 0, "sharegpt", 900)]
    assert "| - | qwen3-8b | sharegpt | 256 | 0.95 (0.95-0.95) | 0.92 (0.92-0.92) | 0.90 (0.90-0.90) |" in _report(tmp_path, rows)


def test_report_tables_decode_tiers_and_checks_their_targets(tmp_path, bench_row):
    rows = [bench_row("STD", 0, "sharegpt", 1000), bench_row("CoRun", 0, "sharegpt", 600),
            {**bench_row("CoRun-tiers", 0, "sharegpt", 850), "decode_tiers": [72, 128]}]
    text = _report(tmp_path, rows)
    assert "| - | qwen3-8b | sharegpt | 256 | 0.60 (0.60-0.60) | 0.85 (0.85-0.85) | 1.42 (1.42-1.42) | 10.0 / 10.0 / 10.0 | 72, 128 | - |" in text
    assert "| CoRun-tiers >= 0.9x STD at concurrency 256 | - | qwen3-8b | sharegpt | 256 | 0.85 (0.85-0.85) | 1 | - | **no** |" in text
    assert "| CoRun >= 0.9x STD at concurrency 256 | - | qwen3-8b | sharegpt | 256 | 0.60 (0.60-0.60) | 1 | - | **no** |" in text


def test_report_checks_the_targets_of_corun_with_a_prefill_pack(tmp_path, bench_row):
    rows = [bench_row("STD", 0, "fixed-64-448", 1000), bench_row("BI", 0, "fixed-64-448", 500),
            bench_row("CoRun-tiers", 0, "fixed-64-448", 740), {**bench_row("CoRun-tiers-pack", 0, "fixed-64-448", 810),
                                                           "prefill_pack": 1024}]
    text = _report(tmp_path, rows)
    assert ("| CoRun-tiers-pack >= 1.5x BI at concurrency 256 | - | qwen3-8b | fixed-64-448 | 256 "
            "| 1.62 (1.62-1.62) | 1 | - | yes |") in text
    assert "| CoRun-tiers >= 1.5x BI at concurrency 256 | - | qwen3-8b | fixed-64-448 | 256 | 1.48 (1.48-1.48) | 1 | - | **no** |" in text
    assert "| CoRun-tiers-pack tok/s | CoRun-tiers-pack/BI |" in text
    assert "STD 1000, BI 500, CoRun-tiers 740, CoRun-tiers-pack 810" in text


def test_report_checks_the_targets_of_packs_waiting_for_kv(tmp_path, bench_row):
    rows = [bench_row("STD", 0, "sharegpt", 1000), {**bench_row("CoRun-tiers-pack", 0, "sharegpt", 890), "prefill_pack": 1024},
            {**bench_row("CoRun-tiers-pack-wait", 0, "sharegpt", 930), "prefill_pack": 1024}]
    text = _report(tmp_path, rows)
    assert ("| CoRun-tiers-pack-wait >= 0.9x STD at concurrency 256 | - | qwen3-8b | sharegpt | 256 "
            "| 0.93 (0.93-0.93) | 1 | - | yes |") in text
    assert "| CoRun-tiers-pack >= 0.9x STD at concurrency 256 | - | qwen3-8b | sharegpt | 256 | 0.89 (0.89-0.89) | 1 | - | **no** |" in text


def test_a_study_of_one_peer_checks_the_targets_against_that_peer_only(tmp_path, bench_row):
    def row(study, arm, tput, rep=0, workload="sharegpt"):
        return {**bench_row(arm, rep, workload, tput), "study": study}

    # the pairs the queue runs: STD with CoRun in one study, BI with CoRun in another, each on its own host
    rows = [row("std", "STD", 1000), row("std", "CoRun", 950), row("bi", "BI", 400), row("bi", "CoRun", 700),
            row("std", "STD", 1000, workload="fixed-1024-128", rep=0), row("std", "CoRun", 850, workload="fixed-1024-128")]
    text = _report(tmp_path, rows)
    assert "| CoRun >= 0.9x STD at concurrency 256 | std | qwen3-8b | sharegpt | 256 | 0.95 (0.95-0.95) | 1 | - | yes |" in text
    assert "| CoRun >= 1.5x BI at concurrency 256 | bi | qwen3-8b | sharegpt | 256 | 1.75 (1.75-1.75) | 1 | - | yes |" in text
    assert "| CoRun >= 0.9x STD at concurrency 256 | std | qwen3-8b | fixed-1024-128 | 256 | 0.85 (0.85-0.85) | 1 | - | **no** |" in text
    assert "0.9x STD at concurrency 256 | bi |" not in text  # CoRun of one study never over STD of another
    assert "1.5x BI at concurrency 256 | std |" not in text
    # a target applies at concurrency 256 only
    assert "0.9x STD" not in _report(tmp_path, [{**r, "concurrency": 64} for r in rows[:2]])


def test_report_compares_arms_only_within_a_study(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "sharegpt", t), "study": "core"}
            for rep in range(3) for arm, t in (("STD", 1000), ("BI", 400), ("CoRun", 800))]
    rows += [{**bench_row(arm, rep, "sharegpt", t), "study": "ablation"}  # another GPU: slower for every arm
             for rep in range(3) for arm, t in (("STD", 500), ("SplitKV-off", 450), ("CoRun", 300))]
    text = _report(tmp_path, rows)
    pages = {study: (tmp_path / f"{study}.md").read_text() for study in ("core", "ablation")}
    assert all(page.startswith(f"# {study}\n") and "## qwen3-8b, concurrency 256" in page for study, page in pages.items())
    assert "| sharegpt | 500 (500-500) |" in pages["ablation"] and "| sharegpt | 500 (500-500) |" not in pages["core"]
    assert "| sharegpt | 1000 (1000-1000) | 400 (400-400) | 800 (800-800) | 2.00 (2.00-2.00) | 0.80 (0.80-0.80) | 0.40 (0.40-0.40) |" in text
    assert "| sharegpt | 500 (500-500) | - | 300 (300-300) | - | 0.60 (0.60-0.60) | - |" in text
    assert "| CoRun >= 0.9x STD at concurrency 256 | ablation | qwen3-8b | sharegpt | 256 | 0.60 (0.60-0.60) | 3 | - | **no** |" in text
    assert "| ablation | qwen3-8b | sharegpt | 256 | 0.90 (0.90-0.90) | - | 0.60 (0.60-0.60) |" in text
    for png in ("bench-core-qwen3-8b-c256.png", "bench-ablation-qwen3-8b-c256.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_a_study_of_corun_with_tiers_alone_shows_it_in_corun_columns(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "fixed-64-448", t), "study": "tiers-bi"}
            for rep in range(3) for arm, t in (("STD", 1000), ("BI", 600), ("CoRun-tiers", 840))]
    text = _report(tmp_path, rows)
    assert "| workload | STD tok/s | BI tok/s | CoRun-tiers tok/s | CoRun-tiers/BI | CoRun-tiers/STD | BI/STD |" in text
    assert "| fixed-64-448 | 1000 (1000-1000) | 600 (600-600) | 840 (840-840) | 1.40 (1.40-1.40) | 0.84 (0.84-0.84) | 0.60 (0.60-0.60) |" in text
    assert "CoRun-tiers/BI 1.40 (1.40-1.40), CoRun-tiers/STD 0.84 (0.84-0.84)" in text


def test_a_study_shows_every_arm_beside_corun_with_its_ratios(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "fixed-64-448", t), "study": "pack"}
            for rep in range(3) for arm, t in (("STD", 1000), ("BI", 500), ("CoRun", 600), ("CoRun-tiers-pack", 1100))]
    text = _report(tmp_path, rows)
    assert "| fixed-64-448 | 1000 (1000-1000) | 500 (500-500) | 600 (600-600) | 1.20 (1.20-1.20) | 0.60 (0.60-0.60) | 0.50 (0.50-0.50) |" in text
    assert "| workload | arm | tok/s | /BI | /STD | /CoRun | TPOT ms | reps |" in text
    assert "| fixed-64-448 | CoRun-tiers-pack | 1100 (1100-1100) | 2.20 (2.20-2.20) | 1.10 (1.10-1.10) | 1.83 (1.83-1.83) |" in text
    assert "CoRun/BI 1.20 (1.20-1.20), CoRun/STD 0.60 (0.60-0.60); CoRun-tiers-pack/BI 2.20 (2.20-2.20), CoRun-tiers-pack/STD 1.10 (1.10-1.10)" in text


def test_a_study_of_corun_through_cublas_shows_it_beside_corun_and_in_the_aggregate(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "sharegpt", t), "study": "gemm"}
            for rep in range(3) for arm, t in (("CoRun-cublas", 900), ("CoRun", 1000))]
    text = _report(tmp_path, rows)
    assert "| sharegpt | CoRun-cublas | 900 (900-900) | - | - | 0.90 (0.90-0.90) |" in text
    assert "(tok/s): CoRun-cublas 900, CoRun 1000" in text


def test_a_decode_phase_of_fewer_steps_than_a_log_interval_is_not_measured(tmp_path, bench_row):
    # azure-conv's first wave decodes together for 10 steps (0.4 s at 6400 tok/s, a wave of 256);
    # fixed-1024-128's for 100
    rows = [{**bench_row(arm, 0, "azure-conv", 1000), "decode_wave": 256, "decode_steps": [],
             "decode_phase_s": 0.4, "decode_phase_throughput": 6400.0, "decode_step_throughput": rate}
            for arm, rate in (("STD", 9000.0), ("BI", 6000.0), ("CoRun", 3000.0))]
    rows += [{**bench_row(arm, 0, "fixed-1024-128", 1000), "decode_wave": 256, "decode_steps": [],
              "decode_phase_s": 4.0, "decode_phase_throughput": 6400.0, "decode_step_throughput": rate}
             for arm, rate in (("STD", 9000.0), ("BI", 6000.0), ("CoRun", 8500.0))]
    runs, out = tmp_path / "runs.jsonl", tmp_path / "benchmarks.md"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = {(r["arm"], r["workload"]): (r["decode_phase"], r["decode_measure"]) for r in report_rows.load(runs)}
    assert got[("CoRun", "azure-conv")] == (None, "short")
    assert got[("CoRun", "fixed-1024-128")] == (8500.0, "steps")
    assert report.main([str(runs), "--out", str(out)]) == 0
    text = _pages(out)
    assert "| - | qwen3-8b | azure-conv | 256 | 3 | 10-10 |" in text
    assert "| - | qwen3-8b | fixed-1024-128 | 256 | steps |" in text
    assert "| - | qwen3-8b | azure-conv | 256 | steps |" not in text
    assert "decode phase: CoRun >= 0.9x STD | - | qwen3-8b | azure-conv" not in text
    assert "decode phase: CoRun >= 0.9x STD | - | qwen3-8b | fixed-1024-128 | 256 | 0.94" in text


def test_report_decode_phase_timelines_sweep_and_padding(tmp_path, bench_row):
    rows = []
    for rep in range(3):
        for c, scale in ((64, 0.5), (256, 1.0)):
            for arm, tput, decode in (("STD", 1000, 4000), ("BI", 500, 2000), ("CoRun", 900, 3800)):
                row = bench_row(arm, rep, "fixed-64-448", tput * scale + rep)
                row.update(concurrency=c, decode_phase_throughput=decode + rep,
                           timeline=[[0.0, 5000.0, 0.0], [1.0, 0.0, float(decode)]])
                if c == 64:  # rows that also measured full decode steps report those
                    row.update(decode_step_throughput=2 * decode + rep)
                rows.append(row)
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    padding = tmp_path / "padding.jsonl"
    padding.write_text("\n".join(json.dumps(r) for r in [
        {"shape": "qwen3-8b", "arm": "STD", "n": None, "median_tpot_ms": 5.0},
        {"shape": "qwen3-8b", "arm": "CoRun", "n": 256, "median_tpot_ms": 7.5},
        {"shape": "qwen3-8b", "arm": "CoRun", "n": 1, "median_tpot_ms": 5.0}]))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--padding", str(padding)]) == 0
    text = _pages(out)
    assert ("| qwen3-8b | fixed-64-448 | 256 | window | 4001 (4000-4002) | 2001 (2000-2002) | 3801 (3800-3802) | - | - "
            "| 0.95 (0.95-0.95) | 1.90 (1.90-1.90) | - | - |") in text
    assert ("| qwen3-8b | fixed-64-448 | 64 | steps | 8001 (8000-8002) | 4001 (4000-4002) | 7601 (7600-7602) | - | - "
            "| 0.95 (0.95-0.95) | 1.90 (1.90-1.90) | - | - |") in text
    assert "| qwen3-8b | 1 | 5.00 | 5.00 | 1.00 |" in text and "| qwen3-8b | 256 | 7.50 | 5.00 | 1.50 |" in text
    assert "![padding](padding.png)" in text and (tmp_path / "padding.png").stat().st_size > 1000
    for png in ("timeline-qwen3-8b-fixed-64-448-c256.png", "sweep-qwen3-8b-fixed-64-448.png"):
        assert f"]({png})" in text and (tmp_path / png).stat().st_size > 1000


def test_report_tables_step_profiles(tmp_path, bench_row):
    rows = [{"shape": "qwen3-8b", "arm": arm, "load": 16, "span_ms_per_step": span, "kernel_ms_per_step": kern,
             "by_kind_ms": {"gemm": gemm, "attention": 1.0}} for arm, span, kern, gemm in
            (("CoRun-tiers", 8.0, 7.5, 5.0), ("STD", 6.4, 6.0, 4.0), ("STD", 6.5, 6.0, 4.0))]
    rows.append({**rows[-1], "load": 256, "running": 255, "kv_tokens": 239954})  # a server ran fewer
    rows[0]["graph_slots"] = 72  # the tier a --corun arm replayed
    profile = tmp_path / "step_profile.jsonl"
    profile.write_text("\n".join(json.dumps(r) for r in rows))
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(bench_row("STD", 0, "sharegpt", 1000)))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--step-profile", str(profile)]) == 0
    text = _pages(out)
    assert "| shape | load | arm | graph slots | KV tokens | GPU span | kernels | waiting | gemm | attention |" in text
    std = text.index("| qwen3-8b | 16 | STD | - | - | 6.50 | 6.00 | 0.50 | 4.00 | 1.00 |")  # the latest row only
    assert "6.40" not in text and "| qwen3-8b | 256 (255 ran) | STD | - | 239,954 | 6.50 |" in text
    assert std < text.index("| qwen3-8b | 16 | CoRun-tiers | 72 | - | 8.00 | 7.50 | 0.50 | 5.00 | 1.00 |")


def test_every_ratio_is_the_median_of_paired_repetitions_with_their_spread(tmp_path, bench_row):
    # CoRun's repetitions against STD's, k against k: 1.0, 0.5 and 2.0; the ratio of the arms' medians
    # (100 / 200) would read 0.50
    rows = [bench_row(arm, rep, "sharegpt", t) for arm, ts in (("STD", (100, 200, 300)), ("CoRun", (100, 100, 600)))
            for rep, t in enumerate(ts)]
    text = _report(tmp_path, rows, "--header", "Host: one H200")
    assert "| sharegpt | 200 (100-300) | - | 100 (100-600) | - | 1.00 (0.50-2.00) | - |" in text
    summary = (tmp_path / "benchmarks.md").read_text()
    assert "Every ratio on these pages, A/B, is the median of paired ratios" in summary
    # the hosts and commands go to a page of their own, linked from the summary
    assert "Host: one H200" not in summary and "(setup.md)" in summary
    assert "Host: one H200" in (tmp_path / "setup.md").read_text()


def test_a_study_page_shows_the_prefill_each_arm_computed(tmp_path, bench_row):
    rows = [{**bench_row(arm, rep, "sessions", 1000), "prompt_tokens": 9000, "cached_tokens": cached,
             "prefill_tokens": 9000 - cached} for rep in range(2) for arm, cached in (("STD", 6000), ("CoRun", 0))]
    text = _report(tmp_path, rows)
    assert "Prefill tokens computed, from each reply's prompt and cached tokens" in text
    assert "| sessions | STD | 9,000 | 6,000 | 3,000 | 33.3% | 2 |" in text
