"""``bench/report_rows.py``: the decode-phase measure each loaded row gets, and paired repetitions."""

import json

from bench import report_rows


def test_the_report_prefers_the_servers_own_decode_throughput_over_the_clients(tmp_path, bench_row):
    # samples of 40 steps: the ramp, three of the whole wave (255 of 256 still counts; 40 steps of
    # 256 at 10240 tok/s take 1 s), then the wave's remainder
    steps = [[100, 5000.0], [256, 10240.0], [256, 10240.0], [255, 7000.0], [44, 2000.0]]
    rows = [{**bench_row("STD", 0, "fixed-64-448", 1000), "decode_wave": 256, "decode_steps": steps,
             "decode_phase_s": 10.0, "decode_step_throughput": 4e6},  # a client that fell behind its streams
            {**bench_row("CoRun", 0, "fixed-64-448", 1000), "decode_wave": 256, "decode_steps": steps[3:],
             "decode_phase_s": 10.0, "decode_step_throughput": 7500.0},  # one sample of the whole wave: too few
            {**bench_row("STD", 0, "sharegpt", 1000), "decode_wave": 256, "decode_steps": steps * 3,
             "decode_phase_s": 1.5, "decode_step_throughput": 9000.0},  # a phase one sample long
            {**bench_row("BI", 0, "fixed-64-448", 1000), "decode_phase_throughput": 6000.0}]
    out = tmp_path / "runs.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = {(r["arm"], r["workload"]): (r["decode_phase"], r["decode_measure"]) for r in report_rows.load(out)}
    assert got == {("STD", "fixed-64-448"): (10240.0, "log"), ("CoRun", "fixed-64-448"): (7500.0, "steps"),
                   ("STD", "sharegpt"): (9000.0, "steps"), ("BI", "fixed-64-448"): (6000.0, "window")}


def test_the_logged_decode_phase_is_the_first_waves_not_a_larger_later_one(tmp_path, bench_row):
    # default SGLang admits 136 requests of 6,144 tokens, retracts some once its pool fills, and runs
    # 152 once the first answers end; the run stored that 152 as its wave
    steps = [[136, 4400.0], [136, 4400.0], [136, 4300.0], [133, 4000.0], [20, 1000.0], [152, 4600.0], [152, 4600.0]]
    out = tmp_path / "runs.jsonl"
    out.write_text(json.dumps({**bench_row("STD", 0, "fixed-4096-2048", 1000), "decode_wave": 152, "decode_steps": steps}) + "\n")
    (row,) = report_rows.load(out)
    assert (row["decode_phase"], row["decode_measure"]) == (4400.0, "log")


def test_paired_ratios_pair_repetition_k_with_repetition_k(bench_row):
    rows = [bench_row(arm, rep, "sharegpt", t) for arm, ts in (("STD", (100, 200, 300)), ("CoRun", (100, 100, 600)))
            for rep, t in enumerate(ts)] + [bench_row("CoRun", 3, "sharegpt", 50)]  # no STD of rep 3: unpaired
    key = ("qwen3-8b", "sharegpt", 256)
    assert report_rows.paired_ratios(rows, key, "CoRun", "STD") == [1.0, 0.5, 2.0]
    assert report_rows.paired(rows, key, "CoRun", "STD") == (1.0, 0.5, 2.0)
    assert report_rows.paired(rows, key, "CoRun", "BI") is None
    by_rep, names = report_rows.aggregate_reps(rows[:6], "qwen3-8b", 256)
    assert names == ["sharegpt"] and by_rep["CoRun"] == {0: 100.0, 1: 100.0, 2: 600.0}


def test_rows_of_the_current_runtime_supersede_older_ones_cell_by_cell(bench_row):
    def row(arm, rep, runtime, workload="sharegpt"):
        return {**bench_row(arm, rep, workload, 100.0 + rep), "study": "s", "runtime": runtime}

    old = [row(arm, rep, "old") for rep in range(3) for arm in ("STD", "CoRun")]
    new = [row(arm, rep, "new") for rep in range(2) for arm in ("STD", "CoRun")]
    elsewhere = [row(arm, 0, "old", "azure-conv") for arm in ("STD", "CoRun")]  # no run on "new" here
    unnamed = [{**bench_row("CoRun", 5, "sharegpt", 1.0), "study": "s"}]  # names no runtime
    kept = report_rows.on_runtime(old + new + elsewhere + unnamed, "new")
    assert kept == new + elsewhere + unnamed
    assert report_rows.on_runtime(old + new, None) == old + new  # the current runtime unknown: every row
    assert report_rows.runtime_state(new, "new") == "current"
    assert report_rows.runtime_state(elsewhere, "new") == "stale: `old`"
    assert report_rows.runtime_state(new + unnamed, "new") == "-"
    assert report_rows.runtime_state(new, None) == "-"
