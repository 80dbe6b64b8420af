"""``bench/``: workloads, the streaming client's metrics, slice scheduling and the report."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from bench import client, common, prefill_shapes, report, run, serverlog, workloads


def test_workloads_are_the_first_rows_and_fixed_shapes():
    pairs = workloads.lengths("sharegpt", 300)
    assert len(pairs) == 300 and pairs[0] == (18, 407)
    assert workloads.lengths("fixed-4096-128", 3) == [(4096, 128)] * 3
    prompts = workloads.prompts([(5, 1), (7, 1)], seed=1)
    assert [len(p) for p in prompts] == [5, 7] and prompts == workloads.prompts([(5, 1), (7, 1)], seed=1)
    for name in workloads.ALL:
        assert len(workloads.lengths(name, 300)) == 300


def test_summary_follows_bench_serving_definitions():
    r = client.Record(start=0.0, first=0.1, chunks=[0.1, 0.15, 0.25], end=0.25, output_tokens=6)
    s = client.summarize([r, client.Record(start=0.0, error="boom")], duration=2.0)
    assert s["completed"] == 1 and s["failed"] == 1
    assert s["median_ttft_ms"] == pytest.approx(100)
    assert s["median_tpot_ms"] == pytest.approx(30)  # (0.25 - 0.1) / (6 - 1)
    assert s["mean_itl_ms"] == pytest.approx(75)
    assert s["output_throughput"] == pytest.approx(3.0)


DECODE_LINE = ("[{}] Decode batch, #running-req: {}, #token: 20, token usage: 0.00, cuda graph: True, "
               "gen throughput (token/s): {:.2f}, #queue-req: 0\n")


PREFILL_LINE = ("[{}] Prefill batch, #new-seq: 1, #new-token: {}, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 1.00\n")


def _streaming_server(log=None, capacity=None, cumulative=False):
    """A stand-in SGLang: /generate streams a token every 10 ms, its id a function of the prompt and
    position, one new id per chunk (``cumulative``: every id so far); with ``log``, it appends an
    SGLang prefill-batch line and two decode-batch lines per request; with ``capacity``, at most that
    many stream at once, the others wait their turn. /start_profile writes an empty trace a moment later; /flush_cache answers
    400 while a request streams, as SGLang does, else 200."""
    slots = threading.BoundedSemaphore(capacity or 1 << 30)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/flush_cache":
                busy = self.server.streaming > 0
                self.server.flushes.append(not busy)
                self.send_response(400 if busy else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.loads(raw)
            if self.path == "/start_profile":
                self.server.profiles.append(body)
                out = Path(body["output_dir"]) / f"{body['profile_id']}-TP-0.trace.json"
                threading.Timer(0.3, out.write_text, [json.dumps({"traceEvents": []})]).start()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.server.received.append(body["input_ids"])
            n = body["sampling_params"]["max_new_tokens"]
            if log is not None:  # each request prefilled alone
                with open(log, "a") as f:
                    f.write(PREFILL_LINE.format(time.strftime("%Y-%m-%d %H:%M:%S"), len(body["input_ids"])))
            with slots:
                self.server.streaming += 1
                try:
                    self._stream(n, sum(body["input_ids"]))
                finally:
                    self.server.streaming -= 1

        def _stream(self, n, base):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(text):
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            try:
                for k in range(1, n + 1):
                    time.sleep(0.01)
                    ids = [(base + j) % 1000 for j in range(1 if cumulative else k, k + 1)]
                    chunk("data: " + json.dumps({"output_ids": ids, "meta_info": {"completion_tokens": k}}) + "\n\n")
                if log is not None:  # logged while the request runs, as SGLang does
                    now = time.strftime("%Y-%m-%d %H:%M:%S")
                    with open(log, "a") as f:
                        f.write(DECODE_LINE.format(now, 1, 1.0) + DECODE_LINE.format(now, 2, 200.0))
                chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.server.finished += 1
            except OSError:  # the client dropped the request
                self.server.dropped += 1

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.received = []  # the prompts of the requests served, in arrival order
    server.profiles, server.finished, server.dropped = [], 0, 0
    server.flushes, server.streaming = [], 0  # each /flush_cache: whether it flushed
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_client_streams_and_measures():
    server = _streaming_server()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        bodies = [client.request([1, 2, 3], 5, seed=i) for i in range(6)]
        records, duration = asyncio.run(client.run(url, bodies, concurrency=3))
    finally:
        server.shutdown()
    s = client.summarize(records, duration)
    assert s["completed"] == 6 and s["output_tokens"] == 30
    assert all(len(r.chunks) == 5 for r in records)
    assert 5 < s["median_ttft_ms"] < 500 and s["median_tpot_ms"] > 5
    assert duration >= 2 * 0.05  # closed loop: two waves of three
    assert all(r.output_ids == [(6 + j) % 1000 for j in range(1, 6)] for r in records)


def test_digests_read_incremental_and_cumulative_streams_alike():
    digests = {}
    for cumulative in (False, True):
        server = _streaming_server(cumulative=cumulative)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            bodies = [client.request([k, 2], 4, seed=0) for k in (1, 1, 5)]
            records, _ = asyncio.run(client.run(url, bodies, concurrency=3))
        finally:
            server.shutdown()
        digests[cumulative] = [client.digest(r) for r in records]
    assert digests[False] == digests[True]
    same_prompt, other = digests[False][:2], digests[False][2]
    assert same_prompt[0] == same_prompt[1] != other
    assert client.digest(client.Record(start=0.0, end=1.0, error="HTTPError")) is None


def test_flush_cache_waits_for_the_server_to_go_idle():
    server = _streaming_server()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    async def flush_while_one_streams():
        running = asyncio.create_task(client.run(url, [client.request([1], 60, seed=0)], 1))
        while not server.received:
            await asyncio.sleep(0.01)
        await client.flush_cache(url)
        finished = server.finished
        await running
        return finished

    try:
        finished_at_flush = asyncio.run(flush_while_one_streams())
        with pytest.raises(RuntimeError, match="flush_cache: 400"):
            server.streaming += 1  # a request that never ends
            asyncio.run(client.flush_cache(url, timeout=0.5))
    finally:
        server.shutdown()
    assert server.flushes[0] is False and server.flushes[-1] is False and True in server.flushes
    assert finished_at_flush == 1


def test_schedule_rotates_arms_and_resume_skips_whole_repetitions_only(tmp_path):
    order = run.schedule(["STD", "BI", "CoRun"], 3)
    assert order[:3] == [(0, "STD"), (0, "BI"), (0, "CoRun")]
    assert order[3:6] == [(1, "CoRun"), (1, "STD"), (1, "BI")]
    assert order[6:] == [(2, "BI"), (2, "CoRun"), (2, "STD")]  # each arm once in each place
    assert order[2][1] == order[3][1] and order[5][1] == order[6][1]  # one server at a time: 7 starts, not 9
    out = tmp_path / "runs.jsonl"
    row = {"shape": "s", "workload": "w", "concurrency": 8, "arm": "BI", "rep": 1}
    out.write_text(json.dumps(row) + "\n" + json.dumps({**row, "study": "x"}) + "\n")
    assert run.done_keys(out) == {("", "s", "w", 8, "BI", 1), ("x", "s", "w", 8, "BI", 1)}
    assert run.done_reps(out, ["BI"]) == {("", "s", "w", 8, 1), ("x", "s", "w", 8, 1)}
    assert run.done_reps(out, ["STD", "BI"]) == set()  # BI alone ran in rep 1: the repetition is not done


def test_plan_one_at_a_time_shares_server_starts_between_resumed_and_new_workloads():
    arms = ["STD", "BI", "CoRun"]
    fresh = {("a", 8): [0, 1, 2], ("b", 8): [0, 1, 2]}
    side = run.plan(fresh, arms, 3, one_at_a_time=False)
    assert side == [("a", 8, *step) for step in run.schedule(arms, 3)] + [("b", 8, *step) for step in run.schedule(arms, 3)]
    alone = run.plan(fresh, arms, 3, one_at_a_time=True)
    assert [(rep, arm) for _, _, rep, arm in alone[::2]] == run.schedule(arms, 3)  # nothing done: rep-major
    assert [w for w, *_ in alone] == ["a", "b"] * 9

    def starts(todo):
        return 1 + sum(x[3] != y[3] for x, y in zip(todo, todo[1:]))

    # two workloads left at repetition 2, one not begun: repetition 2 and the new one's 0 share servers
    resumed = {("a", 8): [2], ("b", 8): [2], ("c", 8): [0, 1, 2]}
    todo = run.plan(resumed, arms, 3, one_at_a_time=True)
    assert todo[:9] == [(w, 8, rep, arm) for arm in ("BI", "CoRun", "STD") for w, rep in (("a", 2), ("b", 2), ("c", 0))]
    assert [(rep, arm) for _, _, rep, arm in todo[9:]] == [(1, "STD"), (1, "BI"), (1, "CoRun"), (2, "CoRun"), (2, "STD"), (2, "BI")]
    assert starts(todo) == 7  # 3 for the first round, and none at a boundary between rounds
    assert sorted(todo) == sorted(run.plan(resumed, arms, 3, one_at_a_time=False))  # the same runs
    assert {(w, rep) for w, _, rep, _ in todo if w == "c"} == {("c", 0), ("c", 1), ("c", 2)}
    assert run.plan({("a", 8): []}, arms, 3, one_at_a_time=True) == []


def test_arm_args_reach_only_the_arm_named():
    extra = run.arm_args(["BI=--disable-prefill-cuda-graph", "BI=--foo 1"], ["STD", "BI", "CoRun"])
    assert extra == {"STD": [], "BI": ["--disable-prefill-cuda-graph", "--foo", "1"], "CoRun": []}
    for bad in ("BI", "XX=--foo"):  # no arm given, or an arm this run does not serve
        with pytest.raises(SystemExit, match="ARM=ARGS"):
            run.arm_args([bad], ["STD", "BI"])


def test_arm_env_reaches_only_the_arm_named():
    env = run.arm_env(["CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1", "CoRun-tiers=A=x=y"], ["STD", "CoRun-tiers"])
    assert env == {"STD": {}, "CoRun-tiers": {"TORCH_BLAS_PREFER_CUBLASLT": "1", "A": "x=y"}}
    for bad in ("CoRun-tiers=A", "CoRun-tiers==1", "BI=A=1"):  # no value, no name, an arm not served
        with pytest.raises(SystemExit, match="ARM=NAME=VALUE"):
            run.arm_env([bad], ["STD", "CoRun-tiers"])


def test_the_decode_wave_is_what_the_server_ran_at_once():
    # default SGLang running 255 of 256, a KV pool holding 179 long requests, a closed loop overlapping
    assert serverlog.decode_wave(256, [[120, 9e3], [255, 1e4]]) == 255
    assert serverlog.decode_wave(256, [[179, 5e3]]) == 179
    assert serverlog.decode_wave(16, [[18, 1e3]]) == 16 and serverlog.decode_wave(8, []) == 8
    # default SGLang admitting 136, retracting, then running up to 152 once the first answers end
    assert serverlog.decode_wave(256, [[136, 4e3], [136, 4e3], [133, 4e3], [20, 1e3], [152, 4e3]]) == 136
    # with 2 of 3 running, the third waits for room: the two decode alone until the first ends
    a, b = _rec(0.0, [(1.0, 1), (2.0, 2), (3.0, 3)], 3.0), _rec(0.0, [(1.0, 1), (2.0, 2), (3.5, 3)], 3.5)
    waiting = _rec(0.0, [(4.0, 1), (5.0, 2)], 5.0)
    assert client.decode_step_throughput([a, b, waiting], wave=3) is None
    assert client.decode_step_throughput([a, b, waiting], wave=serverlog.decode_wave(3, [[2, 1.0]])) == pytest.approx(2.0)


def _row(arm, rep, workload, tput, tokens=1000):
    return {"shape": "qwen3-8b", "workload": workload, "concurrency": 256, "arm": arm, "rep": rep,
            "output_throughput": tput, "output_tokens": tokens, "duration_s": tokens / tput,
            "median_tpot_ms": 10.0, "median_ttft_ms": 100.0, "failed": 0}


def _report(tmp_path, rows, *args) -> str:
    """The report bench/report.py writes for these rows (and options), as text."""
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), *args]) == 0
    return out.read_text()


def test_report_medians_ratios_aggregate_and_plot(tmp_path):
    rows = []
    for rep in range(3):
        for w, (std, bi, corun) in {"sharegpt": (1000, 500, 900), "fixed-1024-128": (2000, 1800, 1900)}.items():
            rows += [_row("STD", rep, w, std + rep), _row("BI", rep, w, bi + rep), _row("CoRun", rep, w, corun + rep)]
    text = _report(tmp_path, rows, "--header", "Host: test")
    assert "| sharegpt | 1001 (1000-1002) | 501 (500-502) | 901 (900-902) | 1.80 | 0.90 | 0.50 |" in text
    assert (tmp_path / "bench-qwen3-8b-c256.png").stat().st_size > 1000
    assert "Ablations" not in text
    agg, names = report.aggregate(rows, "qwen3-8b", 256)
    assert names == ["fixed-1024-128", "sharegpt"]
    assert agg["STD"] == pytest.approx(2000 / (1000 / 1001 + 1000 / 2001), rel=1e-6)
    # a workload some arm has not run yet stays out of every arm's aggregate
    partial = rows + [_row("STD", rep, "azure-conv", 10) for rep in range(3)]
    assert report.aggregate(partial, "qwen3-8b", 256) == (agg, names)


def test_report_counts_each_arms_prefill_iterations_and_the_prompts_they_held(tmp_path):
    # isolated prefill: one prompt an iteration (a long prompt in two chunks, each counted as SGLang
    # counts it: #new-seq 1); a pack: up to 3 prompts
    batches = {"CoRun": [[[1, 100]] * 4 + [[1, 8192], [1, 1808]]] * 3,
               "CoRun-tiers-pack": [[[3, 1024], [1, 1024], [1, 8192], [1, 1808]],
                                    [[3, 1024], [1, 1024], [1, 8192], [1, 1808]],
                                    [[2, 1024], [2, 1024], [1, 8192], [1, 1808]]]}
    rows = [{**_row(arm, rep, "azure-conv", 1000), "prefill_batches": b}
            for arm, runs in batches.items() for rep, b in enumerate(runs)]
    rows += [_row("STD", rep, "azure-conv", 1000) for rep in range(3)]  # rows without them: no line
    text = _report(tmp_path, rows)
    assert "Prefill iterations, from the servers' logs:" in text
    assert "| azure-conv | CoRun | 6 (6-6) | 1.00, 1 | 3 |" in text
    assert "| azure-conv | CoRun-tiers-pack | 4 (4-4) | 1.50, 3 | 3 |" in text
    assert "| azure-conv | STD |" not in text.split("Prefill iterations")[1]


def test_report_tables_decode_steps_by_load_and_prices_fixed_shapes(tmp_path):
    # STD: 5 ms steps at 4 running, 10 ms at 200; CoRun: 12 ms at any load (one N-slot graph);
    # CoRun-tiers: 6 ms at 4 running (a smaller graph), 12 ms at 200
    steps = {"STD": [[4, 800.0], [200, 20000.0]], "CoRun": [[4, 4 / 0.012], [200, 200 / 0.012]],
             "CoRun-tiers": [[4, 4 / 0.006], [200, 200 / 0.012]]}
    rows = [{**_row(arm, rep, "sharegpt", 1000), "decode_steps": steps[arm]} for rep in range(3) for arm in steps]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    notes = tmp_path / "notes.md"
    notes.write_text("## Missed targets\n\nmeasured reasons\n")
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--plots", str(tmp_path / "bench"), "--notes", str(notes)]) == 0
    text = out.read_text()
    assert "| sharegpt | STD | 0.2 (5.0) | - | - | 0.4 (10.0) | 1.0 | 0.4 | - |" in text
    # CoRun at STD's step cost: 0.48 s * (1 - 5/12) + 0.48 s * (1 - 10/12) = 0.36 s
    assert "| sharegpt | CoRun | 0.5 (12.0) | - | - | 0.5 (12.0) | 1.0 | 0.0 | 0.4 |" in text
    # CoRun-tiers: 0.24 s * (1 - 5/6) + 0.48 s * (1 - 10/12) = 0.12 s
    assert "| sharegpt | CoRun-tiers | 0.2 (6.0) | - | - | 0.5 (12.0) | 1.0 | 0.3 | 0.1 |" in text
    assert text.index("## Targets") < text.index("measured reasons") < text.index("## qwen3-8b, concurrency 256")
    assert "![throughput](bench/bench-qwen3-8b-c256.png)" in text
    assert (tmp_path / "bench" / "bench-qwen3-8b-c256.png").exists()


def test_report_checks_targets_on_paired_repetitions_and_tables_the_sampler(tmp_path):
    rows = []
    for rep, (std, bi, corun) in enumerate([(1000, 500, 900), (1100, 520, 700), (1000, 480, 950)]):
        rows += [_row("STD", rep, "sharegpt", std), _row("BI", rep, "sharegpt", bi), _row("CoRun", rep, "sharegpt", corun)]
        rows += [{**_row(arm, rep, "fixed-64-448", 1000), "decode_phase_throughput": d}
                 for arm, d in (("STD", 2000), ("CoRun", 1900 + rep))]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    sampler = tmp_path / "sampler.json"
    sampler.write_text(json.dumps({"rows": 256, "vocab": 151936, "top_p": 0.9, "top_k": 50,
                                   "median_ms": {"sglang_default": 1.0, "corun": 0.5},
                                   "ratio_to_default": {"sglang_default": 1.0, "corun": 0.5}}))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--sampler", str(sampler)]) == 0
    text = out.read_text()
    # paired ratios 900/500, 700/520, 950/480 -> median 1.80; 0.90, 0.64, 0.95 -> median 0.90
    assert "| CoRun >= 1.3x BI where BI is slower than STD | - | qwen3-8b | sharegpt | 256 | 1.80 (1.35-1.98) | yes |" in text
    assert "| CoRun >= 0.8x STD at concurrency 256, dense | - | qwen3-8b | sharegpt | 256 | 0.90 (0.64-0.95) | yes |" in text
    assert "| decode phase: CoRun >= 0.9x STD | - | qwen3-8b | fixed-64-448 | 256 | 0.95 (0.95-0.95) | yes |" in text
    assert "BI where BI is slower than STD | qwen3-8b | fixed-64-448" not in text  # no BI arm there
    assert "| 256 x 151936 | 0.9 | 50 | corun | 0.500 | 0.50 |" in text
    assert report.paired_ratios(rows, ("qwen3-8b", "sharegpt", 256), "STD", "CoRun")[1] == pytest.approx(1100 / 700)


def test_a_missed_target_shows_the_digits_that_tell_it_from_the_target(tmp_path):
    rows = [{**_row(arm, rep, "fixed-64-448", 1000), "decode_phase_throughput": d}
            for rep in range(3) for arm, d in (("STD", 2000), ("CoRun", 1798))]
    runs, out = tmp_path / "runs.jsonl", tmp_path / "benchmarks.md"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    assert report.main([str(runs), "--out", str(out)]) == 0
    assert "| decode phase: CoRun >= 0.9x STD | - | qwen3-8b | fixed-64-448 | 256 | 0.899 (0.899-0.899) | **no** |" \
        in out.read_text()


def test_the_decode_phase_table_shows_the_pack_arm_beside_the_others(tmp_path):
    rows = [{**_row(arm, rep, "fixed-64-448", 1000), "decode_phase_throughput": d, "study": "pack"}
            for rep in range(3) for arm, d in (("STD", 2000), ("BI", 1000), ("CoRun", 1800), ("CoRun-tiers-pack", 1900))]
    text = _report(tmp_path, rows)
    assert "| CoRun/STD | CoRun/BI | CoRun-tiers/STD | CoRun-tiers-pack/STD |" in text
    assert ("| pack | qwen3-8b | fixed-64-448 | 256 | window | 2000 (2000-2000) | 1000 (1000-1000) | 1800 (1800-1800) "
            "| - | 1900 (1900-1900) | 0.90 | 1.80 | - | 0.95 |") in text


def test_report_tables_each_step_profile_run_on_its_own(tmp_path):
    def prof(arm, load, span, kv):
        return {"shape": "qwen3-8b", "arm": arm, "load": load, "running": load, "kv_tokens": kv,
                "span_ms_per_step": span, "kernel_ms_per_step": span - 0.5, "by_kind_ms": {"attention": 1.0},
                **({"graph_slots": 256} if arm == "CoRun" else {})}

    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(_row("STD", 0, "sharegpt", 1000)))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("\n".join(json.dumps(r) for r in (prof("STD", 16, 6.0, 8704), prof("CoRun", 16, 9.0, 8704))))
    second.write_text(json.dumps(prof("CoRun", 16, 10.0, 8704)))  # another run's rows stay in their own table
    out = tmp_path / "benchmarks.md"
    report.main([str(runs), "--out", str(out), "--step-profile", str(first), "--step-profile", str(second)])
    text = out.read_text()
    tables = text.split(f"`{second}`:")
    assert f"`{first}`:" in tables[0] and "| qwen3-8b | 16 | CoRun | 256 | 8,704 | 9.00 | 8.50 | 0.50 | 1.00 |" in tables[0]
    assert "| qwen3-8b | 16 | STD | - | 8,704 | 6.00 |" in tables[0] and "STD" not in tables[1].split("##")[0]
    assert "| qwen3-8b | 16 | CoRun | 256 | 8,704 | 10.00 |" in tables[1]


def test_report_lists_ablations_relative_to_std(tmp_path):
    rows = [_row("STD", 0, "sharegpt", 1000), _row("SplitKV-off", 0, "sharegpt", 950),
            _row("SplitKV-off+IsoPrefill", 0, "sharegpt", 920), _row("CoRun", 0, "sharegpt", 900)]
    assert "| - | qwen3-8b | sharegpt | 256 | 0.95 | 0.92 | 0.90 |" in _report(tmp_path, rows)


def test_report_tables_decode_tiers_and_checks_their_targets(tmp_path):
    rows = [_row("STD", 0, "sharegpt", 1000), _row("CoRun", 0, "sharegpt", 600),
            {**_row("CoRun-tiers", 0, "sharegpt", 850), "decode_tiers": [72, 128]}]
    text = _report(tmp_path, rows)
    assert "| - | qwen3-8b | sharegpt | 256 | 0.60 | 0.85 | 1.42 | 10.0 / 10.0 / 10.0 | 72, 128 | - |" in text
    assert "| CoRun-tiers >= 0.8x STD at concurrency 256, dense | - | qwen3-8b | sharegpt | 256 | 0.85 (0.85-0.85) | yes |" in text
    assert "| CoRun >= 0.8x STD at concurrency 256, dense | - | qwen3-8b | sharegpt | 256 | 0.60 (0.60-0.60) | **no** |" in text


def test_report_checks_the_targets_of_corun_with_a_prefill_pack(tmp_path):
    rows = [_row("STD", 0, "fixed-64-448", 1000), _row("BI", 0, "fixed-64-448", 600),
            _row("CoRun-tiers", 0, "fixed-64-448", 760), {**_row("CoRun-tiers-pack", 0, "fixed-64-448", 810),
                                                           "prefill_pack": 1024}]
    text = _report(tmp_path, rows)
    assert ("| CoRun-tiers-pack >= 1.3x BI where BI is slower than STD | - | qwen3-8b | fixed-64-448 | 256 "
            "| 1.35 (1.35-1.35) | yes |") in text
    assert "| CoRun-tiers >= 1.3x BI where BI is slower than STD | - | qwen3-8b | fixed-64-448 | 256 | 1.27" in text
    assert "| CoRun-tiers-pack tok/s | CoRun-tiers-pack/BI |" in text
    assert "STD 1000, BI 600, CoRun-tiers 760, CoRun-tiers-pack 810" in text


def test_report_checks_the_targets_of_packs_waiting_for_kv(tmp_path):
    rows = [_row("STD", 0, "sharegpt", 1000), {**_row("CoRun-tiers-pack", 0, "sharegpt", 790), "prefill_pack": 1024},
            {**_row("CoRun-tiers-pack-wait", 0, "sharegpt", 830), "prefill_pack": 1024}]
    text = _report(tmp_path, rows)
    assert ("| CoRun-tiers-pack-wait >= 0.8x STD at concurrency 256, dense | - | qwen3-8b | sharegpt | 256 "
            "| 0.83 (0.83-0.83) | yes |") in text
    assert "| CoRun-tiers-pack >= 0.8x STD at concurrency 256, dense | - | qwen3-8b | sharegpt | 256 | 0.79" in text


def test_a_study_without_std_judges_bi_slower_than_std_by_the_other_studies(tmp_path):
    def row(study, arm, tput):
        return {**_row(arm, 0, "fixed-64-448", tput), "study": study}

    # BI is slower than STD where both ran (study "a"); study "b" ran no STD: its ratio stays its own
    rows = [row("a", "STD", 1000), row("a", "BI", 600), row("a", "CoRun", 700),
            row("b", "BI", 500), row("b", "CoRun-tiers-pack", 800)]
    text = _report(tmp_path, rows)
    assert "| CoRun-tiers-pack >= 1.3x BI where BI is slower than STD | b | qwen3-8b | fixed-64-448 | 256 | 1.60" in text
    # where no study shows BI slower than STD, the target does not apply
    rows[1] = row("a", "BI", 1100)
    assert "CoRun-tiers-pack >= 1.3x BI" not in _report(tmp_path, rows)


def test_report_counts_the_requests_corun_and_its_tiers_agree_on():
    def row(arm, rep, digests, seed=7):
        return {**_row(arm, rep, "sharegpt", 100.0), "prompt_seed": seed, "output_digests": digests}

    key = ("qwen3-8b", "sharegpt", 256)
    rows = [row("CoRun", 0, ["a", "b", "c"]), row("CoRun-tiers", 0, ["a", "b", "c"]),
            row("CoRun", 1, ["a", "b", "c"]), row("CoRun-tiers", 1, ["a", "x", "c"]),
            row("STD", 0, ["q", "r", "s"]),  # another arm: not compared
            row("CoRun-tiers", 2, ["z", "z", "z"], seed=8)]  # prompts CoRun did not serve
    assert report.tiers_agree(rows, key) == "2 of 3 (4 runs)"
    assert report.tiers_agree(rows[:1] + rows[-1:], key) == "-"
    rows.append(row("CoRun", 2, ["z", "z", "z"], seed=8))
    assert report.tiers_agree(rows, key) == "5 of 6 (6 runs)"


def test_report_counts_the_requests_every_repetition_reproduced():
    def row(arm, rep, digests, seed=7, study="s"):
        return {**_row(arm, rep, "sharegpt", 100.0), "study": study, "prompt_seed": seed, "output_digests": digests}

    rows = [row("STD", 0, ["a", "b", "c"]), row("STD", 1, ["a", "x", "c"]), row("STD", 2, ["a", "b", None]),
            row("CoRun", 0, ["a", "b", "c"]), row("CoRun", 1, ["a", "b", "c"]),
            row("BI", 0, ["a", "b", "c"]),  # one repetition: nothing to compare
            row("BI", 1, ["a", "b", "c"], seed=8),  # other prompts
            {**_row("CoRun", 2, "sharegpt", 100.0), "study": "s"}]  # written before digests
    table = report.repeats_table({"s": (rows, report.cells(rows))})
    assert table[2:] == ["| s | qwen3-8b | sharegpt | 256 | STD | 3 | 1 | 1 of 3 | - |",
                         "| s | qwen3-8b | sharegpt | 256 | CoRun | 2 | 1 | 3 of 3 | - |"]
    assert report.repeats_table({"s": (rows[-1:], {})}) == []
    # BI on two GPUs: the two repetitions of the second differ in a request the first agrees with
    bi = [{**row("BI", rep, digests), "gpu_uuid": gpu} for rep, (gpu, digests) in
          enumerate([("GPU-a", ["a", "b", "c"]), ("GPU-b", ["a", "b", "c"]), ("GPU-b", ["a", "y", "c"])])]
    assert report.repeats_table({"s": (bi, report.cells(bi))})[2:] == [
        "| s | qwen3-8b | sharegpt | 256 | BI | 3 | 2 | 2 of 3 | 2 of 3 (2) |"]


def test_report_covers_the_matrix_cell_by_cell():
    rows = [_row(arm, rep, "sharegpt", 1000) for arm in report.ARMS for rep in range(3)]
    rows += [_row(arm, 0, "fixed-1024-128", 1000) for arm in report.ARMS] + [_row("STD", 1, "fixed-1024-128", 900)]
    pair = [_row(arm, rep, "azure-conv", 1000) for arm in ("STD", "CoRun") for rep in range(3)]
    lines = report.coverage_table({"core": (rows, report.cells(rows)), "pair": (pair, report.cells(pair))})
    assert "| qwen3-8b | azure-conv | not yet |" in lines  # without BI, no cell of the matrix
    assert "| qwen3-8b | sharegpt | core (3) |" in lines
    assert "| qwen3-8b | fixed-1024-128 | core (1) |" in lines  # repetition 1 ran STD alone
    assert "| qwen3-8b | fixed-4096-2048 | not yet |" in lines and "| qwen3-30b-a3b | sharegpt | not yet |" in lines
    assert len(lines) == 2 + 2 * len(workloads.ALL)


def test_report_compares_arms_only_within_a_study(tmp_path):
    rows = [{**_row(arm, rep, "sharegpt", t), "study": "core"}
            for rep in range(3) for arm, t in (("STD", 1000), ("BI", 400), ("CoRun", 800))]
    rows += [{**_row(arm, rep, "sharegpt", t), "study": "ablation"}  # another GPU: slower for every arm
             for rep in range(3) for arm, t in (("STD", 500), ("SplitKV-off", 450), ("CoRun", 300))]
    text = _report(tmp_path, rows)
    assert "## core: qwen3-8b, concurrency 256" in text and "## ablation: qwen3-8b, concurrency 256" in text
    assert "| sharegpt | 1000 (1000-1000) | 400 (400-400) | 800 (800-800) | 2.00 | 0.80 | 0.40 |" in text
    assert "| sharegpt | 500 (500-500) | - | 300 (300-300) | - | 0.60 | - |" in text
    assert "| CoRun >= 0.8x STD at concurrency 256, dense | ablation | qwen3-8b | sharegpt | 256 | 0.60 (0.60-0.60) | **no** |" in text
    assert "| ablation | qwen3-8b | sharegpt | 256 | 0.90 | - | 0.60 |" in text
    for png in ("bench-core-qwen3-8b-c256.png", "bench-ablation-qwen3-8b-c256.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_a_study_of_corun_with_tiers_alone_shows_it_in_corun_columns(tmp_path):
    rows = [{**_row(arm, rep, "fixed-64-448", t), "study": "tiers-bi"}
            for rep in range(3) for arm, t in (("STD", 1000), ("BI", 600), ("CoRun-tiers", 840))]
    text = _report(tmp_path, rows)
    assert "| workload | STD tok/s | BI tok/s | CoRun-tiers tok/s | CoRun-tiers/BI | CoRun-tiers/STD | BI/STD |" in text
    assert "| fixed-64-448 | 1000 (1000-1000) | 600 (600-600) | 840 (840-840) | 1.40 | 0.84 | 0.60 |" in text
    assert "CoRun-tiers/BI 1.40, CoRun-tiers/STD 0.84" in text


def test_a_study_shows_every_arm_beside_corun_with_its_ratios(tmp_path):
    rows = [{**_row(arm, rep, "fixed-64-448", t), "study": "pack"}
            for rep in range(3) for arm, t in (("STD", 1000), ("BI", 500), ("CoRun", 600), ("CoRun-tiers-pack", 1100))]
    text = _report(tmp_path, rows)
    assert "| fixed-64-448 | 1000 (1000-1000) | 500 (500-500) | 600 (600-600) | 1.20 | 0.60 | 0.50 |" in text
    assert "| workload | arm | tok/s | /BI | /STD | /CoRun | TPOT ms | reps |" in text
    assert "| fixed-64-448 | CoRun-tiers-pack | 1100 (1100-1100) | 2.20 | 1.10 | 1.83 |" in text
    assert "CoRun/BI 1.20, CoRun/STD 0.60; CoRun-tiers-pack/BI 2.20, CoRun-tiers-pack/STD 1.10" in text


def test_common_options_and_prepare_reuse_an_existing_checkpoint(tmp_path):
    import argparse

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    parser = argparse.ArgumentParser()
    common.add_options(parser, out=str(tmp_path / "o" / "runs.jsonl"), server_args="--x")
    args = parser.parse_args(["--checkpoint", str(tmp_path / "ckpt"), "--logs", str(tmp_path / "logs")])
    assert common.prepare(args) == tmp_path / "ckpt"
    assert (tmp_path / "o").is_dir() and (tmp_path / "logs").is_dir() and args.server_args == "--x"


class _StandIn:
    """Stands in for ``corun_sglang.tools.launch.Server``: a local streaming endpoint appending to its log, as
    the server does; records its lifetime."""

    alive: list = []
    started: list = []
    instances: list = []

    def __init__(self, model_path, args, log, timeout=600, static_gb=None, env=None):
        self.env = env
        self.log = Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as f:
            f.write("server started\n")
        self.httpd = _streaming_server(self.log)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.command = ["server", *args]
        assert static_gb == 38.0 and "--max-total-tokens" in args
        _StandIn.started.append(args[0] if args[:1] == ["--corun"] else "other")
        _StandIn.instances.append(self)
        _StandIn.alive.append(self)
        assert len(_StandIn.alive) == 1 or not self.one_at_a_time

    def stop(self):
        self.httpd.shutdown()
        _StandIn.alive.remove(self)


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_run_writes_every_row_once_and_resumes(tmp_path, monkeypatch, one_at_a_time):
    import corun_sglang.tools.launch

    monkeypatch.setattr(corun_sglang.tools.launch, "Server", _StandIn)
    monkeypatch.setattr(_StandIn, "one_at_a_time", one_at_a_time, raising=False)
    monkeypatch.setattr(_StandIn, "alive", [])
    monkeypatch.setattr(_StandIn, "started", [])
    monkeypatch.setattr(_StandIn, "instances", [])
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    out = tmp_path / "runs.jsonl"
    argv = ["--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--logs", str(tmp_path / "logs"),
            "--workloads", "fixed-1024-128", "--requests", "2", "--concurrency", "2", "--reps", "2",
            "--arms", "STD,CoRun", "--max-total-tokens", "5000", "--study", "s1", "--warmup", "2"]
    argv += ["--one-at-a-time"] if one_at_a_time else []
    monkeypatch.setattr(workloads, "lengths", lambda name, n: [(8, 3)] * n)
    assert run.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["arm"], r["rep"]) for r in rows) == [("CoRun", 0), ("CoRun", 1), ("STD", 0), ("STD", 1)]
    assert all(r["completed"] == 2 and r["output_tokens"] == 6 for r in rows)
    # each row holds the decode samples its own run logged, less the first (it spans the idle time before)
    assert all(r["decode_steps"] == [[2, 200.0], [1, 1.0], [2, 200.0]] for r in rows)
    # and the prefill iterations of its own run (the warm-up's are not a measured run's)
    assert all(r["prefill_batches"] == [[1, 8], [1, 8]] for r in rows)
    # one log per study and arm: another study's server of the same arm writes its own
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.log")) == ["s1-CoRun.log", "s1-STD.log"]
    # an arm started again (one at a time) adds to its log: both STD servers' lines stay
    assert (tmp_path / "logs" / "s1-STD.log").read_text().count("server started") == (2 if one_at_a_time else 1)
    # one server per arm side by side; one at a time, a start whenever the arm changes
    # (STD, CoRun | CoRun, STD: the rotation keeps CoRun across the repetitions' boundary)
    assert _StandIn.started == (["other", "--corun", "other"] if one_at_a_time else ["other", "--corun"])
    assert not _StandIn.alive
    # every server first serves the warm-up (prompts no measured run sends), then its measured runs
    warm = [b["input_ids"] for b in run.warmup_bodies([(8, 3)] * 2, 2)]
    measured = [len(rows) // len(_StandIn.instances)] if not one_at_a_time else [1, 2, 1]
    for server, runs in zip(_StandIn.instances, measured):
        assert sorted(server.httpd.received[:2]) == sorted(warm) and len(server.httpd.received) == 2 + 2 * runs
        assert not any(p in warm for p in server.httpd.received[2:])
        # each measured run from an empty prefix cache: one flush done per run (a flush refused while the
        # stand-in still counts the last request as streaming is retried)
        assert server.httpd.flushes.count(True) == runs
    # every repetition and arm sends the same prompts, and the rows keep each request's output digest
    sent = {tuple(p) for server in _StandIn.instances for p in server.httpd.received[2:]}
    assert len(sent) == 2 and len({r["prompt_seed"] for r in rows}) == 1
    assert len({tuple(r["output_digests"]) for r in rows}) == 1 and None not in rows[0]["output_digests"]
    assert run.main(argv) == 0 and len(out.read_text().splitlines()) == 4  # resumed: nothing left to do
    assert all("gpu_uuid" in r and r["decode_wave"] == 2 and 0 < r["client_cpu_share"] for r in rows)
    # a repetition cut short (its last arm's row missing) is run again whole; the report keeps the new rows
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:-1]) + "\n")
    cut = json.loads(lines[-1])["rep"]
    assert run.main(argv) == 0
    again = [json.loads(line) for line in out.read_text().splitlines()[3:]]
    assert sorted((r["arm"], r["rep"]) for r in again) == [("CoRun", cut), ("STD", cut)]
    kept = report.load(out)
    assert len(kept) == 4 and {r["time"] for r in kept if r["rep"] == cut} == {r["time"] for r in again}
    out.write_text("\n".join(lines) + "\n")
    assert {r["study"] for r in rows} == {"s1"}
    # the same runs in another study are not done yet
    assert run.main(["s2" if a == "s1" else a for a in argv]) == 0 and len(out.read_text().splitlines()) == 8
    # repetitions whole in a --done file are not run again; new rows go to --out alone
    other = tmp_path / "elsewhere.jsonl"
    assert run.main(["s3" if a == "s1" else str(other) if a == str(out) else a for a in argv] + ["--done", str(out)]) == 0
    assert len(other.read_text().splitlines()) == 4 and len(out.read_text().splitlines()) == 8
    assert run.main(["s2" if a == "s1" else str(other) if a == str(out) else a for a in argv] + ["--done", str(out)]) == 0
    assert len(other.read_text().splitlines()) == 4  # s2 was whole in --done: nothing ran


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """``run.py`` against ``_StandIn`` servers on an empty checkpoint, workloads of (8, 3) requests:
    the results file and the options every such run shares."""
    import corun_sglang.tools.launch

    monkeypatch.setattr(corun_sglang.tools.launch, "Server", _StandIn)
    monkeypatch.setattr(_StandIn, "one_at_a_time", False, raising=False)
    for name in ("alive", "started", "instances"):
        monkeypatch.setattr(_StandIn, name, [])
    monkeypatch.setattr(workloads, "lengths", lambda name, n: [(8, 3)] * n)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    out = tmp_path / "runs.jsonl"
    return out, ["--checkpoint", str(tmp_path / "ckpt"), "--out", str(out), "--logs", str(tmp_path / "logs"),
                 "--workloads", "fixed-1024-128", "--requests", "2", "--concurrency", "2", "--reps", "1",
                 "--max-total-tokens", "5000"]


def test_rows_at_tp_2_are_labelled_apart_from_tp_1(stand_in):
    out, argv = stand_in
    argv += ["--arms", "CoRun", "--shape", "qwen3-8b"]
    assert run.main(argv) == 0 and run.main(argv + ["--tp-size", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["shape"], r["tp"]) for r in rows] == [("qwen3-8b", 1), ("qwen3-8b-tp2", 2)]
    assert rows[1]["server_command"][rows[1]["server_command"].index("--tp-size") + 1] == "2"


def test_the_tiers_arm_serves_the_record_verified_once_for_its_checkpoint(stand_in, monkeypatch):
    from corun_sglang import tiers, verify_tiers

    out, argv = stand_in
    verified = []

    def verify(model_path, candidates, n, out, log, server_args=(), static_gb=None, env=None, **_):
        verified.append((candidates, n, list(server_args)))
        assert not env
        record = tiers.Record(n=n, tiers=(72, 128), environment={"gpu": "G"}, rejected={64: 3})
        out.write_text(json.dumps(record.to_json()))
        return record

    monkeypatch.setattr(verify_tiers, "verify", verify)
    argv += ["--arms", "CoRun,CoRun-tiers", "--tier-candidates", "128,64,72"]
    assert run.main(argv) == 0
    assert verified == [([64, 72, 128], 256, verified[0][2])] and "--max-total-tokens" in verified[0][2]
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    command = rows["CoRun-tiers"]["server_command"]
    logs = Path(argv[argv.index("--logs") + 1])
    assert command[command.index("--corun-decode-tiers") + 1] == str(logs / "tiers-qwen3-8b-n256.json")
    assert rows["CoRun-tiers"]["decode_tiers"] == [72, 128] and "--corun-decode-tiers" not in rows["CoRun"]["server_command"]
    out.unlink()
    assert run.main(argv) == 0 and len(verified) == 1  # the record is verified once per checkpoint and N


def test_the_tiers_arm_serves_a_given_record_without_verifying_one(stand_in, monkeypatch, tmp_path):
    from corun_sglang import tiers, verify_tiers

    out, argv = stand_in

    def verify(*args, **kwargs):
        raise AssertionError("a given record is not verified again")

    monkeypatch.setattr(verify_tiers, "verify", verify)
    given = tmp_path / "record.json"
    given.write_text(json.dumps(tiers.Record(n=256, tiers=(96, 128), environment={"gpu": "G"}, rejected={}).to_json()))
    argv += ["--arms", "STD,CoRun-tiers", "--tiers", str(given)]
    assert run.main(argv) == 0
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    command = rows["CoRun-tiers"]["server_command"]
    assert command[command.index("--corun-decode-tiers") + 1] == str(given)
    assert rows["CoRun-tiers"]["decode_tiers"] == [96, 128] and "--corun-decode-tiers" not in rows["STD"]["server_command"]
    assert not list(Path(argv[argv.index("--logs") + 1]).glob("tiers-*.json"))


def test_an_arm_env_reaches_the_arms_server_its_tiers_verification_and_its_rows(stand_in, monkeypatch):
    from corun_sglang import tiers, verify_tiers

    out, argv = stand_in
    verified = []

    def verify(model_path, candidates, n, out, log, server_args=(), static_gb=None, env=None, **_):
        verified.append((out.name, env))
        record = tiers.Record(n=n, tiers=(32, 128), environment={"gpu": "G"}, rejected={})
        out.write_text(json.dumps(record.to_json()))
        return record

    monkeypatch.setattr(verify_tiers, "verify", verify)
    argv += ["--arms", "STD,CoRun-tiers", "--tier-candidates", "32,128",
             "--arm-env", "CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1"]
    assert run.main(argv) == 0
    lt = {"TORCH_BLAS_PREFER_CUBLASLT": "1"}
    assert verified == [("tiers-qwen3-8b-n256-TORCH_BLAS_PREFER_CUBLASLT=1.json", lt)]
    assert {"--corun" in s.command: s.env for s in _StandIn.instances} == {True: lt, False: {}}
    rows = {r["arm"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["CoRun-tiers"]["server_env"] == lt and "server_env" not in rows["STD"]


def _rec(start, chunks, end):
    """A finished request: ``chunks`` are (arrival, output tokens so far)."""
    return client.Record(start=start, first=chunks[0][0], chunks=[t for t, _ in chunks],
                         chunk_tokens=[n for _, n in chunks], end=end, output_tokens=chunks[-1][1])


def test_decode_phase_is_the_window_where_the_whole_first_wave_decodes():
    a = _rec(0.0, [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4)], 4.0)
    b = _rec(0.0, [(2.0, 1), (2.5, 2), (3.5, 3), (5.0, 4), (6.0, 5)], 6.0)
    late = _rec(4.0, [(4.5, 1), (5.5, 2)], 5.5)  # after the wave: its tokens fall outside the window
    # window (2.0, 4.0]: a brings 2 tokens (t=3, 4), b brings 2 (t=2.5, 3.5)
    assert client.summarize([a, b, late], 6.0, wave=2)["decode_phase_throughput"] == pytest.approx(4 / 2.0)
    assert client.decode_phase_window([a, b, late], wave=2) == (2.0, 4)
    assert client.summarize([a, b, late], 6.0, wave=2)["decode_phase_s"] == 2.0
    # a wave whose last first token comes after its first completion has no decode phase
    c = _rec(0.0, [(5.0, 1), (5.5, 2)], 5.5)
    assert client.summarize([a, c], 6.0, wave=2)["decode_phase_throughput"] is None
    assert client.summarize([a, c], 6.0, wave=2)["decode_phase_s"] is None
    failed = client.Record(start=0.0, error="ReadError")
    assert client.summarize([a, failed], 6.0, wave=2)["decode_phase_throughput"] is None
    # a server admits a wave in its own order: sent second, ``late`` waited for a's room, so the
    # wave is a and b, whatever the order they were sent in
    assert client.decode_phase_window([a, late, b], wave=2) == (2.0, 4)
    assert client.decode_step_throughput([a, late, b], wave=2) == client.decode_step_throughput([a, b], wave=2)


def test_decode_step_throughput_reads_full_steps_where_a_short_window_reads_low():
    # two requests decode one token per 1 s step; a's last chunk (its end) arrives just before b's
    # chunk of the same step, so the window (1, 3] counts 3 of the 4 tokens its two steps made
    a = _rec(0.0, [(1.0, 1), (2.0, 2), (3.0, 3)], 3.0)
    b = _rec(0.0, [(1.0, 1), (2.0, 2), (3.01, 3), (4.0, 4)], 4.0)
    assert client.summarize([a, b], 4.0, wave=2)["decode_phase_throughput"] == pytest.approx(3 / 2.0)
    assert client.decode_step_throughput([a, b], wave=2) == pytest.approx(2 / 1.0)
    # a chunk carrying two tokens counts as two steps' worth
    c = _rec(0.0, [(1.0, 1), (3.0, 3), (4.0, 4)], 4.0)
    assert client.decode_step_throughput([a, c], wave=2) == pytest.approx(2 / 1.0)
    late = _rec(0.0, [(5.0, 1), (5.5, 2)], 5.5)  # no decode phase: the wave's last first token comes last
    assert client.decode_step_throughput([a, late], wave=2) is None
    assert client.summarize([a, b], 4.0, wave=2)["decode_step_throughput"] == pytest.approx(2.0)


def test_decode_step_throughput_holds_when_the_client_reads_in_bursts():
    # the server makes a token every 1/3 s; the client reads each request's chunks three at a time,
    # once a second, so nearly every gap between two chunks is 0.1 ms
    def bursty(offset):
        chunks = [(1.0 + k + 1e-4 * j + offset, 3 * k + j + 1) for k in range(30) for j in range(3)]
        return _rec(0.0, chunks, chunks[-1][0])

    wave = [bursty(0.0), bursty(0.01)]
    assert client.decode_step_throughput(wave, wave=2) == pytest.approx(2 * 3.0, rel=0.05)


def test_the_report_prefers_the_servers_own_decode_throughput_over_the_clients(tmp_path):
    # samples of 40 steps: the ramp, three of the whole wave (255 of 256 still counts; 40 steps of
    # 256 at 10240 tok/s take 1 s), then the wave's remainder
    steps = [[100, 5000.0], [256, 10240.0], [256, 10240.0], [255, 7000.0], [44, 2000.0]]
    rows = [{**_row("STD", 0, "fixed-64-448", 1000), "decode_wave": 256, "decode_steps": steps,
             "decode_phase_s": 10.0, "decode_step_throughput": 4e6},  # a client that fell behind its streams
            {**_row("CoRun", 0, "fixed-64-448", 1000), "decode_wave": 256, "decode_steps": steps[3:],
             "decode_phase_s": 10.0, "decode_step_throughput": 7500.0},  # one sample of the whole wave: too few
            {**_row("STD", 0, "sharegpt", 1000), "decode_wave": 256, "decode_steps": steps * 3,
             "decode_phase_s": 1.5, "decode_step_throughput": 9000.0},  # a phase one sample long
            {**_row("BI", 0, "fixed-64-448", 1000), "decode_phase_throughput": 6000.0}]
    out = tmp_path / "runs.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = {(r["arm"], r["workload"]): (r["decode_phase"], r["decode_measure"]) for r in report.load(out)}
    assert got == {("STD", "fixed-64-448"): (10240.0, "log"), ("CoRun", "fixed-64-448"): (7500.0, "steps"),
                   ("STD", "sharegpt"): (9000.0, "steps"), ("BI", "fixed-64-448"): (6000.0, "window")}


def test_the_logged_decode_phase_is_the_first_waves_not_a_larger_later_one(tmp_path):
    # default SGLang admits 136 requests of 6,144 tokens, retracts some once its pool fills, and runs
    # 152 once the first answers end; the run stored that 152 as its wave
    steps = [[136, 4400.0], [136, 4400.0], [136, 4300.0], [133, 4000.0], [20, 1000.0], [152, 4600.0], [152, 4600.0]]
    out = tmp_path / "runs.jsonl"
    out.write_text(json.dumps({**_row("STD", 0, "fixed-4096-2048", 1000), "decode_wave": 152, "decode_steps": steps}) + "\n")
    (row,) = report.load(out)
    assert (row["decode_phase"], row["decode_measure"]) == (4400.0, "log")


def test_a_decode_phase_of_fewer_steps_than_a_log_interval_is_not_measured(tmp_path):
    # azure-conv's first wave decodes together for 10 steps (0.4 s at 6400 tok/s, a wave of 256);
    # fixed-1024-128's for 100
    rows = [{**_row(arm, 0, "azure-conv", 1000), "decode_wave": 256, "decode_steps": [],
             "decode_phase_s": 0.4, "decode_phase_throughput": 6400.0, "decode_step_throughput": rate}
            for arm, rate in (("STD", 9000.0), ("BI", 6000.0), ("CoRun", 3000.0))]
    rows += [{**_row(arm, 0, "fixed-1024-128", 1000), "decode_wave": 256, "decode_steps": [],
              "decode_phase_s": 4.0, "decode_phase_throughput": 6400.0, "decode_step_throughput": rate}
             for arm, rate in (("STD", 9000.0), ("BI", 6000.0), ("CoRun", 8500.0))]
    runs, out = tmp_path / "runs.jsonl", tmp_path / "benchmarks.md"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = {(r["arm"], r["workload"]): (r["decode_phase"], r["decode_measure"]) for r in report.load(runs)}
    assert got[("CoRun", "azure-conv")] == (None, "short")
    assert got[("CoRun", "fixed-1024-128")] == (8500.0, "steps")
    assert report.main([str(runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| - | qwen3-8b | azure-conv | 256 | 3 | 10-10 |" in text
    assert "| - | qwen3-8b | fixed-1024-128 | 256 | steps |" in text
    assert "| - | qwen3-8b | azure-conv | 256 | steps |" not in text
    assert "decode phase: CoRun >= 0.9x STD | - | qwen3-8b | azure-conv" not in text
    assert "decode phase: CoRun >= 0.9x STD | - | qwen3-8b | fixed-1024-128 | 256 | 0.94" in text


def test_timeline_puts_prompt_tokens_at_the_first_token_and_output_where_it_arrives():
    a = _rec(0.0, [(0.5, 1), (1.2, 2), (1.7, 4)], 1.7)
    b = _rec(0.2, [(1.1, 1), (2.3, 2)], 2.3)
    bins = client.timeline([a, b], [100, 40], bin_s=1.0)
    assert bins == [[0.0, 100.0, 0.0], [1.0, 40.0, 3.0], [2.0, 0.0, 1.0]]


def test_report_decode_phase_timelines_sweep_and_padding(tmp_path):
    rows = []
    for rep in range(3):
        for c, scale in ((64, 0.5), (256, 1.0)):
            for arm, tput, decode in (("STD", 1000, 4000), ("BI", 500, 2000), ("CoRun", 900, 3800)):
                row = _row(arm, rep, "fixed-64-448", tput * scale + rep)
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
    text = out.read_text()
    assert ("| qwen3-8b | fixed-64-448 | 256 | window | 4001 (4000-4002) | 2001 (2000-2002) | 3801 (3800-3802) | - | - "
            "| 0.95 | 1.90 | - | - |") in text
    assert ("| qwen3-8b | fixed-64-448 | 64 | steps | 8001 (8000-8002) | 4001 (4000-4002) | 7601 (7600-7602) | - | - "
            "| 0.95 | 1.90 | - | - |") in text
    assert "| qwen3-8b | 1 | 5.00 | 5.00 | 1.00 |" in text and "| qwen3-8b | 256 | 7.50 | 5.00 | 1.50 |" in text
    assert "![padding](padding.png)" in text and (tmp_path / "padding.png").stat().st_size > 1000
    for png in ("timeline-qwen3-8b-fixed-64-448-c256.png", "sweep-qwen3-8b-fixed-64-448.png"):
        assert f"]({png})" in text and (tmp_path / png).stat().st_size > 1000


def test_slices_script_names_its_slices_and_refuses_unknown_ones(tmp_path):
    import subprocess

    script = Path(__file__).resolve().parents[1] / "bench" / "slices.sh"
    text = script.read_text()
    for name in ("dense-core", "dense-long", "dense-sweep", "dense-ablation", "dense-ablation-c16", "dense-tiers",
                 "dense-tiers-lt", "dense-profile-lt", "dense-profile", "dense-padding", "moe-core", "moe-core-tiers",
                 "moe-tiers-bi", "moe-pack-bi", "dense-pack", "dense-pack-wait", "dense-pack-short", "dense-pack-c16",
                 "moe-long", "moe-profile", "moe-tiers", "moe-padding", "tp2-core", "sampler"):
        assert f"#   {name}" in text and f"{name})" in text
    done = subprocess.run(["bash", str(script), str(tmp_path / "r"), "no-such-slice"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown slice no-such-slice" in done.stdout
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: bench/slices.sh RESULTS SLICE..." in usage.stdout


def test_the_records_a_slice_names_load_and_share_one_environment():
    """A slice that serves committed records must name ones a server can load, and a tiers record and a
    pack record made in one environment: the server refuses either unless it matches the host."""
    import re

    from corun_sglang import pack_record, tiers

    root = Path(__file__).resolve().parents[1]
    text = (root / "bench" / "slices.sh").read_text()
    named = 0
    for slice_text in re.split(r"\n\s+[a-z0-9-]+\) ", text):
        found = dict(re.findall(r"--(tiers|pack) (docs/results/\S+\.json)", slice_text))
        records = {}
        if "tiers" in found:
            records["tiers"] = tiers.load(root / found["tiers"])
        if "pack" in found:
            records["pack"] = pack_record.load(root / found["pack"])
            assert records["pack"].needles and all(n > 0 for n in records["pack"].needles.values())
        for record in records.values():
            assert record.environment["gpu"] == "NVIDIA H200" and record.environment["tp_size"] == 1
        if len(records) == 2:
            assert records["tiers"].environment == records["pack"].environment, found
        named += len(records)
    # moe-core-tiers, moe-tiers-bi, moe-pack-bi, dense-pack, dense-pack-wait, dense-pack-short, dense-pack-c16
    assert named >= 12


def test_slices_script_runs_only_the_named_workloads_of_a_split_slice(tmp_path):
    import os
    import subprocess

    script = Path(__file__).resolve().parents[1] / "bench" / "slices.sh"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\necho "$@"\n')
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(script), str(tmp_path / "r"), "dense-core=sharegpt", "dense-core"],
                          capture_output=True, text=True, env=env)
    runs = [line for line in done.stdout.splitlines() if line.startswith("-m bench.run ")]
    assert done.returncode == 0 and len(runs) == 2
    assert runs[0].endswith("--workloads sharegpt")
    assert all("--study dense-core " in line for line in runs)
    assert runs[1].endswith("--workloads sharegpt,azure-conv,fixed-1024-128,fixed-64-448")
    assert all("--done" not in line for line in runs)
    env["DONE"] = str(tmp_path / "committed.jsonl")
    done = subprocess.run(["bash", str(script), str(tmp_path / "r"), "moe-core"], capture_output=True, text=True, env=env)
    assert f"--done {tmp_path / 'committed.jsonl'}" in done.stdout


def test_admission_replay_counts_prefills_by_kind_and_decode_steps():
    from bench import admission

    # pack 256 from 17 tokens: two 100-token prompts share a prefill, the third runs in a pack of its own;
    # each decodes 2 more tokens in 2 steps, all three at once
    r = admission.replay([(100, 3)] * 3, pool=10_000, pack=256, least=17)
    assert r.prefills == {"alone: short": 0, "alone: long": 0, "pack of 1": 1, "pack of 2+": 1}
    assert (r.decode_steps, r.mean_running) == (2, 3.0)
    assert r.padding == (256 - 200) + (256 - 100)  # each pack runs at 256 tokens
    # a pool of 150 holds one whole sequence (104 tokens) at a time: a prefill, then its 2 decode steps
    r = admission.replay([(100, 3)] * 3, pool=150, pack=256, least=17)
    assert r.prefills["pack of 1"] == 3 and (r.decode_steps, r.mean_running) == (6, 1.0)
    r = admission.replay([(10, 3), (2000, 3)], pool=10_000, pack=256, least=17)
    assert (r.prefills["alone: short"], r.prefills["alone: long"]) == (1, 1) and r.padding == 0
    with pytest.raises(ValueError, match="more than the pool"):
        admission.replay([(100, 3)], pool=50, pack=256, least=17)


def test_admission_table_compares_pack_sizes_and_waits(capsys):
    from bench import admission

    assert admission.main(["--workloads", "fixed-64-448", "--requests", "6", "--pool", "100000",
                           "--pack", "128,256", "--wait", "0,4", "--shortest", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| fixed-64-448 |")]
    # 6 prompts of 64 tokens: three full packs of 2 at 128 tokens; at 256 a pack of 4 and one of 2, which
    # runs 128 padding tokens
    assert [r.split(" | ")[1:4] + [r.split(" | ")[8]] for r in rows] == [
        ["128", "0", "3", "0"], ["128", "4", "3", "0"], ["256", "0", "2", "128"], ["256", "4", "2", "128"]]


def test_waiting_for_kv_gathers_packs_of_one_into_fuller_packs():
    """A pool of three whole sequences, outputs of different lengths: the running requests free their KV a
    step apart, room for one waiting prompt each. Without a wait most prompts get a prefill of their own;
    waiting up to 4 passes gathers them two to a pack."""
    from bench import admission

    pairs = [(100, 2), (100, 3), (100, 4), (100, 5), (100, 5), (100, 5)]
    pool = 3 * (100 + 5 + 1)
    alone = admission.replay(pairs, pool=pool, pack=256, least=17, concurrency=6)
    gathered = admission.replay(pairs, pool=pool, pack=256, least=17, concurrency=6, wait=4)
    assert (alone.prefills["pack of 1"], alone.prefills["pack of 2+"]) == (4, 1)
    assert (gathered.prefills["pack of 1"], gathered.prefills["pack of 2+"]) == (0, 3)


def test_gemm_tiers_keeps_the_sizes_whose_rows_match_the_full_batch(tmp_path):
    from bench import gemm_tiers

    # a GEMM whose rows change below 8 rows (as a library switching kernels would): only 8 and up match
    def switching(x, w):
        return torch.nn.functional.linear(x, w) + (1e-2 if x.shape[0] < 8 else 0.0)

    assert gemm_tiers.equal_sizes(64, 32, 16, [1, 4, 8, 12, 16], 2, "cpu", linear=switching) == [8, 12, 16]
    assert gemm_tiers.layers("qwen3-8b") == {
        "qkv": (4096, 6144), "o": (4096, 4096), "lm_head": (4096, 151936), "gate_up": (4096, 24576),
        "down": (12288, 4096)}
    assert set(gemm_tiers.layers("qwen3-30b-a3b", tp_size=2)) == {"qkv", "o", "lm_head"}  # experts: not GEMMs here
    out = tmp_path / "tiers.json"
    argv = ["--shape", "qwen3-small", "--layers", "o", "--n", "16", "--sizes", "1,4,32", "--trials", "1",
            "--device", "cpu", "--out", str(out)]
    assert gemm_tiers.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["sizes"] == [1, 4, 16] and 16 in result["layers"]["o"]["equal"]  # N itself always matches
    assert result["equal_on_every_layer"] == result["layers"]["o"]["equal"]
    assert "step_gemm_ms" not in result
    assert gemm_tiers.main([*argv, "--time"]) == 0
    timed = json.loads(out.read_text())
    layers = gemm_tiers.synthetic.hf_config("qwen3-small")["num_hidden_layers"]
    assert {int(m) for m in timed["layers"]["o"]["ms"]} == {1, 4, 16}
    assert timed["step_gemm_ms"]["16"] == pytest.approx(timed["layers"]["o"]["ms"]["16"] * layers)
    assert gemm_tiers.step_gemm_ms({"o": {8: 1.0, 16: 2.0}, "lm_head": {8: 5.0, 16: 6.0}}, 3) == {8: 8.0, 16: 12.0}
    before = torch.backends.cuda.preferred_blas_library()
    try:
        assert gemm_tiers.main([*argv, "--blas", "cublaslt"]) == 0
        assert json.loads(out.read_text())["blas"] == "Cublaslt"
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def test_step_profile_sorts_kernels_into_kinds():
    from bench import step_profile

    names = {
        "nvjet_tst_128x64_64x8_1x2_h_bz_coopA_TNT": "gemm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64": "gemm",
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits>(Params)": "attention",
        "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, ...>(...)": "attention",
        "matmul_kernel_persistent": "gemm",  # the batch-invariant GEMM, not an attention kernel
        "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(...)": "norm/activation",
        "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<...>": "norm/activation",
        "void flashinfer::activation::act_and_mul_kernel<...>": "norm/activation",
        "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<...>": "sampler",
        "_gumbel_argmax_partial": "sampler",
        "fused_moe_kernel": "moe",
        "_moe_sum_reduce_kernel": "moe",
        "void count_and_sort_expert_tokens_kernel<int>(...)": "moe",  # not the sampler's "sort"
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(...)": "communication",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
        "void at::native::elementwise_kernel<128, 2, ...>": "other",
    }
    assert {name: step_profile.kind_of(name) for name in names} == names


def test_step_profile_names_the_graph_a_corun_server_replays():
    from bench import step_profile

    assert step_profile.graph_slots([72, 128, 256], 16) == 72
    assert step_profile.graph_slots([72, 128, 256], 72) == 72
    assert step_profile.graph_slots([72, 128, 256], 73) == 128
    assert step_profile.graph_slots([256], 16) == 256


def test_step_profile_sums_a_trace_per_step(tmp_path):
    import gzip

    from bench import step_profile

    events = [
        {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 0.0, "dur": 600.0},
        {"ph": "X", "cat": "kernel", "name": "BatchPrefillKernel", "ts": 700.0, "dur": 200.0},
        {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 1000.0, "dur": 600.0},
        {"ph": "X", "cat": "kernel", "name": "BatchPrefillKernel", "ts": 1700.0, "dur": 300.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 5000.0},  # host side: not counted
    ]
    path = tmp_path / "x-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    got = step_profile.summarize_trace(path, steps=2)
    # 1700 us of kernels in a 2000 us span, over 2 steps
    assert got["steps_seen"] == 2
    assert got["kernel_ms_per_step"] == pytest.approx(0.85) and got["span_ms_per_step"] == pytest.approx(1.0)
    assert got["by_kind_ms"]["gemm"] == pytest.approx(0.6) and got["by_kind_ms"]["attention"] == pytest.approx(0.25)
    assert got["top_kernels_ms"][0] == ["nvjet_gemm", pytest.approx(0.6)]
    # where the trace records the graph launches, they count the steps
    launches = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t, "dur": 5.0} for t in (0, 1, 2, 3)]
    (tmp_path / "launched.trace.json").write_text(json.dumps({"traceEvents": events + launches}))
    got = step_profile.summarize_trace(tmp_path / "launched.trace.json", steps=2)
    assert got["steps_seen"] == 4 and got["kernel_ms_per_step"] == pytest.approx(0.425)
    (tmp_path / "empty.trace.json").write_text(json.dumps({"traceEvents": events[-1:]}))
    with pytest.raises(ValueError, match="no GPU kernels"):
        step_profile.summarize_trace(tmp_path / "empty.trace.json", steps=2)


def test_step_profile_profiles_once_every_request_streams_then_drops_them(tmp_path):
    from bench import step_profile

    server = _streaming_server()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        trace, running = asyncio.run(step_profile.profile_load(url, [[1, 2], [3, 4], [5, 6]], 2000, 7, tmp_path / "t"))
        assert running == 3 and trace.parent == tmp_path / "t" and trace.name.endswith("-TP-0.trace.json")
        assert [(p["num_steps"], p["activities"], p["with_stack"]) for p in server.profiles] == [(7, ["GPU"], False)]
        deadline = time.monotonic() + 5
        while server.dropped < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (server.dropped, server.finished) == (3, 0)
        # requests that end before the profile is written: told to raise --output-len
        with pytest.raises(RuntimeError, match="raise --output-len"):
            asyncio.run(step_profile.profile_load(url, [[1, 2]], 1, 7, tmp_path / "u", timeout=5))
    finally:
        server.shutdown()


def test_step_profile_profiles_the_load_a_server_runs_and_resumes_by_arm(tmp_path):
    from bench import step_profile

    server = _streaming_server(capacity=2)  # as default SGLang at times runs 255 of 256
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        trace, running = asyncio.run(step_profile.profile_load(url, [[1], [2], [3]], 2000, 7, tmp_path / "t",
                                                               settle=0.5))
        assert running == 2 and trace.exists() and len(server.profiles) == 1
        # without a cap, the profile waits for all: a short output ends a request first
        with pytest.raises(RuntimeError, match=r"ended before all 3 streamed \(finished\): raise --output-len"):
            asyncio.run(step_profile.profile_load(url, [[1], [2], [3]], 5, 7, tmp_path / "u", settle=2))
    finally:
        server.shutdown()
    out = tmp_path / "profile.jsonl"
    out.write_text("".join(json.dumps({"shape": "s", "arm": a, "load": n}) + "\n"
                           for a, n in (("STD", 16), ("STD", 256), ("CoRun", 16), ("STD", 16))))
    assert step_profile.profiled(out, "s", [16, 256]) == {"STD"}  # CoRun was cut short: profiled again
    assert step_profile.profiled(out, "other", [16]) == set() and step_profile.profiled(tmp_path / "x", "s", [16]) == set()


def test_report_tables_step_profiles(tmp_path):
    rows = [{"shape": "qwen3-8b", "arm": arm, "load": 16, "span_ms_per_step": span, "kernel_ms_per_step": kern,
             "by_kind_ms": {"gemm": gemm, "attention": 1.0}} for arm, span, kern, gemm in
            (("CoRun-tiers", 8.0, 7.5, 5.0), ("STD", 6.4, 6.0, 4.0), ("STD", 6.5, 6.0, 4.0))]
    rows.append({**rows[-1], "load": 256, "running": 255, "kv_tokens": 239954})  # a server ran fewer
    rows[0]["graph_slots"] = 72  # the tier a --corun arm replayed
    profile = tmp_path / "step_profile.jsonl"
    profile.write_text("\n".join(json.dumps(r) for r in rows))
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(_row("STD", 0, "sharegpt", 1000)))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--step-profile", str(profile)]) == 0
    text = out.read_text()
    assert "| shape | load | arm | graph slots | KV tokens | GPU span | kernels | waiting | gemm | attention |" in text
    std = text.index("| qwen3-8b | 16 | STD | - | - | 6.50 | 6.00 | 0.50 | 4.00 | 1.00 |")  # the latest row only
    assert "6.40" not in text and "| qwen3-8b | 256 (255 ran) | STD | - | 239,954 | 6.50 |" in text
    assert std < text.index("| qwen3-8b | 16 | CoRun-tiers | 72 | - | 8.00 | 7.50 | 0.50 | 5.00 | 1.00 |")


@pytest.mark.parametrize("total", [256, 1024, 2048])
def test_prefill_shape_packings_fill_the_total_with_the_needle_once_in_each_place(total):
    plans = prefill_shapes.packings(64, total, seed=total)
    for name, lengths in plans:
        assert lengths.count(-1) == 1 and all(n > 0 for n in lengths if n != -1)
        assert 64 + sum(n for n in lengths if n != -1) == total, name
    places = {name.split("-")[1] for name, _ in plans}
    assert {"front", "back"} <= places
    assert plans == prefill_shapes.packings(64, total, seed=total)


@pytest.mark.parametrize("needle_len,total", [(8, 256), (8, 1024), (8, 4096), (64, 4096)])
def test_prefill_shape_packings_stay_one_batch_and_let_a_short_needle_vary_the_mean_prompt(needle_len, total):
    plans = dict(prefill_shapes.packings(needle_len, total, seed=total))
    assert max(len(lengths) for lengths in plans.values()) <= prefill_shapes.MAX_REQUESTS
    equal, long = plans["equal-front"], plans["long-front"]
    assert len(long) == 2 and total / len(equal) < total / len(long)
    if total // needle_len < prefill_shapes.MAX_REQUESTS:  # the needle's length, repeated
        assert set(equal) == {-1, needle_len}


@pytest.mark.parametrize("needle_len,total", [(100, 1024), (300, 1024), (700, 2048), (8, 256)])
def test_tiny_packings_lower_the_mean_prompt_below_any_needles_and_leave_the_others_alone(needle_len, total):
    plain = prefill_shapes.packings(needle_len, total, seed=total)
    plans = prefill_shapes.packings(needle_len, total, seed=total, tiny=4)
    assert plans[:len(plain)] == plain
    tiny = dict(plans[len(plain):])
    assert set(tiny) == {"tiny-front", "tiny-back"}
    for lengths in tiny.values():
        others = [n for n in lengths if n != -1]
        assert lengths.count(-1) == 1 and needle_len + sum(others) == total
        assert len(lengths) <= prefill_shapes.TINY_REQUESTS and others.count(4) >= len(others) - 1
        assert total / len(lengths) < min(total / len(p) for _, p in plain)
    assert tiny["tiny-front"][0] == -1 and tiny["tiny-back"][-1] == -1


def test_prefill_shapes_reads_the_prefill_batches_of_sglang_log_lines():
    log = ("[2026-12-03 08:00:00] Prefill batch, #new-seq: 4, #new-token: 256, #cached-token: 0, "
           "token usage: 0.00, #running-req: 0, #queue-req: 0, \n"
           "[2026-12-03 08:00:01] Decode batch, #running-req: 4, #token: 260, \n")
    assert prefill_shapes.PREFILL.findall(log) == [("4", "256")]


def _prefill_server(log: Path, bits):
    """A ``/generate`` stand-in that logs one prefill batch per call and gives each prompt the logprobs
    ``bits(prompt, total tokens of the call, place in the call)``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompts = body["input_ids"]
            total = sum(len(p) for p in prompts)
            with open(log, "a") as f:
                f.write(f"Prefill batch, #new-seq: {len(prompts)}, #new-token: {total}, #cached-token: 0, \n")
            reply = [{"meta_info": {
                "input_token_logprobs": [[None, p[0], None]] + [[bits(p, total, i), t, None] for t in p[1:]],
                "output_token_logprobs": [[bits(p, total, i), 7, None]]}} for i, p in enumerate(prompts)]
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("case", ["blind", "by-total", "by-place"])
def test_prefill_shapes_tells_a_prefill_blind_to_its_packing_from_one_that_is_not(tmp_path, case, monkeypatch):
    monkeypatch.setattr(prefill_shapes.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("")
    bits = {"blind": lambda p, total, i: -1.0,
            "by-total": lambda p, total, i: -1.0 - (total >= 256),
            "by-place": lambda p, total, i: -1.0 - (i > 0)}[case]
    server = _prefill_server(log, bits)
    try:
        out = prefill_shapes.study(f"http://127.0.0.1:{server.server_port}", log, 64, [256, 1024], seed=0)
    finally:
        server.shutdown()
    assert out["alone_batches"] == [(1, 64)] and out["alone_seconds"] > 0
    for total in ("256", "1024"):
        t = out["totals"][total]
        assert t["counted"] == len(t["packings"]) == 6
        assert all(p["one_batch"] for p in t["packings"])
        assert t["distinct"] == (1 if case != "by-place" else 2)
        assert t["equal_to_alone"] == (case == "blind")
    digests = {p["digest"] for t in out["totals"].values() for p in t["packings"]}
    assert (out["alone_digest"] in digests) == (case != "by-total")


@pytest.mark.parametrize("script", [run, prefill_shapes])
def test_an_arm_outside_the_known_ones_is_a_usage_error(script, capsys):
    with pytest.raises(SystemExit) as stop:
        script.main(["--arms", "STD,Fast"])
    assert stop.value.code == 2 and "unknown arms ['Fast']" in capsys.readouterr().err
