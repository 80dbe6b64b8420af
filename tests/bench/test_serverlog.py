"""Decode-step samples and prefill batches parsed from SGLang server logs (lines as SGLang 0.5.17 writes them)."""

import json

import pytest

from bench import client, serverlog

LOG = """\
[2026-11-30 09:48:10 TP0] Prefill batch, #new-seq: 1, #new-token: 75, #cached-token: 0, token usage: 0.00, \
#running-req: 0, #queue-req: 19, #pending-token: 0, cuda graph: True, input throughput (token/s): 1.23
[2026-11-30 09:48:18 TP0] Decode batch, #running-req: 238, #token: 86463, token usage: 0.20, cuda graph: True, \
gen throughput (token/s): 134.30, #queue-req: 0
[2026-11-30 09:48:19 TP0] Decode batch, #running-req: 224, #token: 92863, token usage: 0.22, cuda graph: True, \
gen throughput (token/s): 16064.63, #queue-req: 0
[2026-11-30 09:48:21] Decode batch, #running-req: 4, #token: 3000, token usage: 0.01, cuda graph: True, \
gen throughput (token/s): 400.00, #queue-req: 0
"""


def test_samples_read_time_running_and_throughput_with_or_without_a_rank_tag():
    rows = serverlog.samples(LOG)
    assert [(r, g) for _, r, g in rows] == [(238, 134.30), (224, 16064.63), (4, 400.0)]
    assert rows[2][0] - rows[0][0] == 3  # seconds, from the timestamps
    assert serverlog.samples(LOG, utc_offset_hours=1)[0][0] == rows[0][0] - 3600


def test_the_first_sample_of_a_run_is_dropped_it_spans_the_idle_time_before():
    assert serverlog.decode_steps(LOG) == [[224, 16064.63], [4, 400.0]]
    assert serverlog.decode_steps("no decode lines\n") == []


def test_prefill_batches_are_one_pair_of_prompts_and_tokens_per_prefill_line():
    chunked = LOG.splitlines()[0].replace("#new-seq: 1, #new-token: 75", "#new-seq: 3, #new-token: 8192")
    assert serverlog.prefill_batches(LOG + chunked + "\n") == [[1, 75], [3, 8192]]
    assert serverlog.prefills(LOG)[0][0] == serverlog.samples(LOG)[0][0] - 8
    assert serverlog.prefill_batches("[2026-11-30 09:48:10] Decode batch, #running-req: 1, \n") == []


def test_kv_tokens_at_each_profile_come_from_the_first_decode_line_after_it():
    start = "[2026-12-01 01:51:54] Profiling starts. Traces will be saved to: /r/traces/STD-{} (with profile id: x)\n"
    text = start.format(1) + LOG + start.format(256) + LOG.splitlines()[-1] + "\n" + start.format(16)
    assert serverlog.kv_at_profiles(text) == {"/r/traces/STD-1": 86463, "/r/traces/STD-256": 3000,
                                              "/r/traces/STD-16": None}
    staged = "[t] Profiling starts for prefill. Traces will be saved to: /r/traces/x (with profile id: y)\n"
    assert serverlog.kv_at_profiles(staged + LOG) == {"/r/traces/x": 86463}


def test_step_time_and_seconds_by_load():
    steps = [[224, 16000.0], [4, 400.0], [8, 400.0]]
    assert serverlog.step_ms(steps, 129, 256) == pytest.approx(14.0)
    assert serverlog.step_ms(steps, 1, 8) == pytest.approx(15.0)  # median of 10 ms and 20 ms
    assert serverlog.step_ms(steps, 9, 32) is None
    assert serverlog.seconds(steps, 1, 8) == pytest.approx(40 * 0.01 + 40 * 0.02)


def test_backfill_takes_each_rows_window_from_its_arms_log(tmp_path):
    (tmp_path / "CoRun.log").write_text(LOG)
    t0 = serverlog.samples(LOG)[0][0]
    rows = [
        {"arm": "CoRun", "time": t0 + 3, "duration_s": 11.0, "timeline": [[0, 75, 0], [1, 0, 9]]},  # the whole log
        {"arm": "CoRun", "time": t0 + 100, "duration_s": 5.0},  # no lines in its window: another run's log
        {"arm": "STD", "time": t0 + 3, "duration_s": 3.0},  # no log for this arm
        {"arm": "CoRun", "time": t0, "duration_s": 1.0, "decode_steps": [[1, 1.0]], "prefill_batches": []},  # kept
        {"arm": "CoRun", "time": t0 + 3, "duration_s": 3.0, "decode_steps": [[1, 1.0]]},  # its decode steps kept
    ]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert serverlog.main([str(runs), str(tmp_path)]) == 0
    out = [json.loads(line) for line in runs.read_text().splitlines()]
    assert out[0]["decode_steps"] == [[224, 16064.63], [4, 400.0]] and out[0]["prefill_batches"] == [[1, 75]]
    assert out[1]["decode_steps"] == [] and "prefill_batches" not in out[1]
    assert "decode_steps" not in out[2]
    assert out[3] == rows[3]
    # a window without a prefill line leaves prefill_batches unset: every run prefills
    assert out[4]["decode_steps"] == [[1, 1.0]] and "prefill_batches" not in out[4]


def test_a_runs_prefills_are_the_last_of_its_window_that_sum_to_its_prompt_tokens():
    warm_up, run = [[2, 40], [1, 5]], [[1, 75], [3, 1024], [0, 6]]
    assert serverlog.run_prefills(warm_up + run, 1105) == run
    assert serverlog.run_prefills(run, 1105) == run
    assert serverlog.run_prefills(warm_up + run, 1104) == []  # no run of them sums to its tokens
    assert serverlog.run_prefills(run, None) == [] and serverlog.run_prefills([], 0) == []
    assert serverlog.prompt_tokens({"timeline": [[0, 75.0, 0], [1, 1030.0, 8.0]]}) == 1105
    assert serverlog.prompt_tokens({}) is None


def test_backfill_reads_a_studys_own_log_before_the_arms_shared_one(tmp_path):
    (tmp_path / "CoRun.log").write_text(LOG)
    (tmp_path / "s1-CoRun.log").write_text(LOG.replace("#new-token: 75", "#new-token: 9"))
    t0 = serverlog.samples(LOG)[0][0]
    rows = [{"study": s, "arm": "CoRun", "time": t0 + 3, "duration_s": 11.0, "timeline": [[0, n, 0]]}
            for s, n in (("s1", 9), ("s2", 75), ("", 75), ("", 76))]
    assert serverlog.backfill(rows, tmp_path) == 4
    assert [r.get("prefill_batches") for r in rows] == [[[1, 9]], [[1, 75]], [[1, 75]], None]
    assert serverlog.log_name("s1", "STD") == "s1-STD.log" and serverlog.log_name("", "STD") == "STD.log"


def test_the_decode_wave_is_what_the_server_ran_at_once(finished_request):
    # default SGLang running 255 of 256, a KV pool holding 179 long requests, a closed loop overlapping
    assert serverlog.decode_wave(256, [[120, 9e3], [255, 1e4]]) == 255
    assert serverlog.decode_wave(256, [[179, 5e3]]) == 179
    assert serverlog.decode_wave(16, [[18, 1e3]]) == 16 and serverlog.decode_wave(8, []) == 8
    # default SGLang admitting 136, retracting, then running up to 152 once the first answers end
    assert serverlog.decode_wave(256, [[136, 4e3], [136, 4e3], [133, 4e3], [20, 1e3], [152, 4e3]]) == 136
    # with 2 of 3 running, the third waits for room: the two decode alone until the first ends
    a, b = finished_request(0.0, [(1.0, 1), (2.0, 2), (3.0, 3)], 3.0), finished_request(0.0, [(1.0, 1), (2.0, 2), (3.5, 3)], 3.5)
    waiting = finished_request(0.0, [(4.0, 1), (5.0, 2)], 5.0)
    assert client.decode_step_throughput([a, b, waiting], wave=3) is None
    assert client.decode_step_throughput([a, b, waiting], wave=serverlog.decode_wave(3, [[2, 1.0]])) == pytest.approx(2.0)
