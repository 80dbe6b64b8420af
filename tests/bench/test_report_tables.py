"""``bench/report_tables.py``: the matrix coverage and the requests each arm reproduced."""

from bench import report_rows, report_tables, workloads


def test_report_counts_the_requests_corun_and_its_tiers_agree_on(bench_row):
    def row(arm, rep, digests, seed=7):
        return {**bench_row(arm, rep, "sharegpt", 100.0), "prompt_seed": seed, "output_digests": digests}

    key = ("qwen3-8b", "sharegpt", 256)
    rows = [row("CoRun", 0, ["a", "b", "c"]), row("CoRun-tiers", 0, ["a", "b", "c"]),
            row("CoRun", 1, ["a", "b", "c"]), row("CoRun-tiers", 1, ["a", "x", "c"]),
            row("STD", 0, ["q", "r", "s"]),  # another arm: not compared
            row("CoRun-tiers", 2, ["z", "z", "z"], seed=8)]  # prompts CoRun did not serve
    assert report_tables.tiers_agree(rows, key) == "2 of 3 (4 runs)"
    assert report_tables.tiers_agree(rows[:1] + rows[-1:], key) == "-"
    rows.append(row("CoRun", 2, ["z", "z", "z"], seed=8))
    assert report_tables.tiers_agree(rows, key) == "5 of 6 (6 runs)"


def test_report_counts_the_requests_every_repetition_reproduced(bench_row):
    def row(arm, rep, digests, seed=7, study="s"):
        return {**bench_row(arm, rep, "sharegpt", 100.0), "study": study, "prompt_seed": seed, "output_digests": digests}

    rows = [row("STD", 0, ["a", "b", "c"]), row("STD", 1, ["a", "x", "c"]), row("STD", 2, ["a", "b", None]),
            row("CoRun", 0, ["a", "b", "c"]), row("CoRun", 1, ["a", "b", "c"]),
            row("BI", 0, ["a", "b", "c"]),  # one repetition: nothing to compare
            row("BI", 1, ["a", "b", "c"], seed=8),  # other prompts
            {**bench_row("CoRun", 2, "sharegpt", 100.0), "study": "s"}]  # written before digests
    table = report_tables.repeats_table({"s": (rows, report_rows.cells(rows))})
    assert table[2:] == ["| s | qwen3-8b | sharegpt | 256 | STD | 3 | 1 | 1 of 3 | - |",
                         "| s | qwen3-8b | sharegpt | 256 | CoRun | 2 | 1 | 3 of 3 | - |"]
    assert report_tables.repeats_table({"s": (rows[-1:], {})}) == []
    # BI on two GPUs: the two repetitions of the second differ in a request the first agrees with
    bi = [{**row("BI", rep, digests), "gpu_uuid": gpu} for rep, (gpu, digests) in
          enumerate([("GPU-a", ["a", "b", "c"]), ("GPU-b", ["a", "b", "c"]), ("GPU-b", ["a", "y", "c"])])]
    assert report_tables.repeats_table({"s": (bi, report_rows.cells(bi))})[2:] == [
        "| s | qwen3-8b | sharegpt | 256 | BI | 3 | 2 | 2 of 3 | 2 of 3 (2) |"]


def test_report_covers_the_matrix_cell_by_cell_and_peer_by_peer(bench_row):
    rows = [bench_row(arm, rep, "sharegpt", 1000) for arm in report_rows.ARMS for rep in range(3)]
    rows += [bench_row(arm, 0, "fixed-1024-128", 1000) for arm in report_rows.ARMS] + [bench_row("STD", 1, "fixed-1024-128", 900)]
    pair = [bench_row(arm, rep, "azure-conv", 1000) for arm in ("STD", "CoRun") for rep in range(3)]
    bi = [bench_row(arm, rep, "azure-conv", 1000) for arm in ("BI", "CoRun") for rep in range(2)]
    stray = [bench_row("BI", 0, "blazedit-synthetic", 1000), bench_row("STD", 0, "blazedit-synthetic", 1000)]
    lines = report_tables.coverage_table({name: (r, report_rows.cells(r)) for name, r in
                                          (("core", rows), ("pair", pair), ("bi", bi), ("stray", stray))})
    assert lines[0] == "| shape | workload | CoRun with STD: studies (repetitions) | CoRun with BI: studies (repetitions) |"
    assert "| qwen3-8b | sharegpt | core (3) | core (3) |" in lines
    assert "| qwen3-8b | fixed-1024-128 | core (1) | core (1) |" in lines  # repetition 1 ran STD alone
    assert "| qwen3-8b | azure-conv | pair (3) | bi (2) |" in lines  # two studies, one pair each
    assert "| qwen3-8b | blazedit-synthetic | not yet | not yet |" in lines  # no CoRun: no pair
    assert "| qwen3-30b-a3b | sharegpt | not yet | not yet |" in lines
    assert len(lines) == 2 + 2 * len(workloads.ALL)


def test_open_loop_rows_tabulate_latency_against_load_and_stay_out_of_the_closed_loop_cells(tmp_path):
    import json

    from bench import report_rows

    rows = [{"study": "s", "shape": "qwen3-8b", "workload": "sharegpt", "arm": arm, "rep": rep, "mode": "open",
             "request_rate": rate, "concurrency": None, "median_ttft_ms": ttft, "median_tpot_ms": 10.0 + rep,
             "output_throughput": 1000.0 * rate}
            for arm, base in (("STD", 50.0), ("CoRun", 80.0)) for rate in (2.0, 8.0) for rep, ttft in
            enumerate((base, base + 10, base + 20))]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert report_rows.load(path) == [] and len(report_rows.open_loop(path)) == 12
    text = report_tables.open_loop_table(report_rows.open_loop(path))
    assert "| requests/s | CoRun | STD |" in text
    assert "| 8 | TTFT 90 (80-100), TPOT 11.0 (10.0-12.0), 8000 (8000-8000) tok/s | TTFT 60 (50-70)" in text


def _prefix_rows(bench_row, workload="rl-group"):
    """Three repetitions of the prefix-cache study: each arm's steady throughput and the prefill it computed
    of 100,000 prompt tokens."""
    arms = {"STD": (1000, 20_000), "BI": (450, 20_000), "CoRun-prefix": (1100, 14_000), "CoRun": (600, 100_000)}
    return [{**bench_row(arm, rep, workload, tput), "steady_output_throughput": tput + rep, "study": "prefix",
             "prompt_tokens": 100_000, "cached_tokens": 100_000 - computed, "prefill_tokens": computed}
            for rep in range(3) for arm, (tput, computed) in arms.items()]


def test_each_arm_shows_the_prefill_it_computed_of_its_prompt_tokens(bench_row):
    rows = _prefix_rows(bench_row) + [bench_row("STD", 0, "sharegpt", 100.0)]  # a row without the counts
    lines = report_tables.prefill_tokens_table(rows, "qwen3-8b", 256)
    assert lines[2:] == ["| rl-group | STD | 100,000 | 80,000 | 20,000 | 20.0% | 3 |",
                         "| rl-group | BI | 100,000 | 80,000 | 20,000 | 20.0% | 3 |",
                         "| rl-group | CoRun | 100,000 | 0 | 100,000 | 100.0% | 3 |",
                         "| rl-group | CoRun-prefix | 100,000 | 86,000 | 14,000 | 14.0% | 3 |"]
    assert report_tables.prefill_tokens_table([bench_row("STD", 0, "sharegpt", 100.0)], "qwen3-8b", 256) == []


def test_the_prefix_caches_targets_apply_to_its_workloads_steady_state(bench_row):
    rows = _prefix_rows(bench_row) + _prefix_rows(bench_row, "sessions")
    rows += [{**r, "workload": "sharegpt"} for r in _prefix_rows(bench_row)]  # not a prefix-cache workload
    groups = {"prefix": (rows, report_rows.cells(rows))}
    lines = [line for line in report_tables.targets_table(groups) if line.startswith("| CoRun-prefix")]
    assert len(lines) == 6 and not any("sharegpt" in line for line in lines)
    # paired steady throughputs (1100 + k) / (1000 + k), (1100 + k) / (450 + k), (1100 + k) / (600 + k)
    assert "| CoRun-prefix >= 1.0x STD, steady state | prefix | qwen3-8b | rl-group | 256 | 1.10 (1.10-1.10) | 3 | - | yes |" in lines
    assert "| CoRun-prefix >= 2.0x BI, steady state | prefix | qwen3-8b | sessions | 256 | 2.44 (2.44-2.44) | 3 | - | yes |" in lines
    assert "| CoRun-prefix >= 1.5x CoRun, steady state | prefix | qwen3-8b | rl-group | 256 | 1.83 (1.83-1.83) | 3 | - | yes |" in lines


def test_a_target_says_how_many_pairs_it_rests_on_and_their_runtime(bench_row):
    def rows(runtime, corun):
        return [{**bench_row(arm, rep, "sharegpt", tput), "runtime": runtime}
                for rep in range(2) for arm, tput in (("STD", 100.0), ("CoRun", corun))]

    current, stale = rows("new", 95.0), rows("old", 85.0)
    for runs, runtime, expected in ((current, "new", "| 0.95 (0.95-0.95) | 2 | current | yes |"),
                                    (stale, "new", "| 0.85 (0.85-0.85) | 2 | stale: `old` | **no** |"),
                                    (current, None, "| 0.95 (0.95-0.95) | 2 | - | yes |")):
        line = next(line for line in report_tables.targets_table({"s": (runs, report_rows.cells(runs))}, runtime)
                    if line.startswith("| CoRun >= 0.9x STD"))
        assert line.endswith(expected), line
