"""``bench/``: workloads, the streaming client's metrics, slice scheduling and the report."""

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import client  # noqa: E402
import common  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import workloads  # noqa: E402


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


def _streaming_server():
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = body["sampling_params"]["max_new_tokens"]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(text):
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            for k in range(1, n + 1):
                time.sleep(0.01)
                chunk("data: " + json.dumps({"meta_info": {"completion_tokens": k}}) + "\n\n")
            chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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


def test_schedule_rotates_arms_and_resume_skips_done_rows(tmp_path):
    order = run.schedule(["STD", "BI", "CoRun"], 3)
    assert order[:3] == [(0, "STD"), (0, "BI"), (0, "CoRun")]
    assert order[3:6] == [(1, "BI"), (1, "CoRun"), (1, "STD")]
    out = tmp_path / "runs.jsonl"
    out.write_text(json.dumps({"shape": "s", "workload": "w", "concurrency": 8, "arm": "BI", "rep": 1}) + "\n")
    assert run.done_keys(out) == {("s", "w", 8, "BI", 1)}


def _row(arm, rep, workload, tput, tokens=1000):
    return {"shape": "qwen3-8b", "workload": workload, "concurrency": 256, "arm": arm, "rep": rep,
            "output_throughput": tput, "output_tokens": tokens, "duration_s": tokens / tput,
            "median_tpot_ms": 10.0, "median_ttft_ms": 100.0, "failed": 0}


def test_report_medians_ratios_aggregate_and_plot(tmp_path):
    rows = []
    for rep in range(3):
        for w, (std, bi, corun) in {"sharegpt": (1000, 500, 900), "fixed-1024-128": (2000, 1800, 1900)}.items():
            rows += [_row("STD", rep, w, std + rep), _row("BI", rep, w, bi + rep), _row("CoRun", rep, w, corun + rep)]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "benchmarks.md"
    assert report.main([str(runs), "--out", str(out), "--header", "Host: test"]) == 0
    text = out.read_text()
    assert "| sharegpt | 1001 (1000-1002) | 501 (500-502) | 901 (900-902) | 1.80 | 0.90 | 0.50 |" in text
    assert (tmp_path / "bench-qwen3-8b-c256.png").stat().st_size > 1000
    assert "Ablations" not in text
    agg = report.aggregate(rows, "qwen3-8b", 256)
    assert agg["STD"] == pytest.approx(2000 / (1000 / 1001 + 1000 / 2001), rel=1e-6)


def test_report_lists_ablations_relative_to_std(tmp_path):
    rows = [_row("STD", 0, "sharegpt", 1000), _row("SplitKV-off", 0, "sharegpt", 950),
            _row("SplitKV-off+IsoPrefill", 0, "sharegpt", 920), _row("CoRun", 0, "sharegpt", 900)]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "benchmarks.md"
    report.main([str(runs), "--out", str(out)])
    assert "| qwen3-8b | sharegpt | 256 | 0.95 | 0.92 | 0.90 |" in out.read_text()


def test_common_options_and_prepare_reuse_an_existing_checkpoint(tmp_path):
    import argparse

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    parser = argparse.ArgumentParser()
    common.add_options(parser, out=str(tmp_path / "o" / "runs.jsonl"), server_args="--x")
    args = parser.parse_args(["--checkpoint", str(tmp_path / "ckpt"), "--logs", str(tmp_path / "logs")])
    assert common.prepare(args) == tmp_path / "ckpt"
    assert (tmp_path / "o").is_dir() and (tmp_path / "logs").is_dir() and args.server_args == "--x"
