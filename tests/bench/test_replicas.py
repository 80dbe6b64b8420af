"""``bench/replicas.py``'s pure parts: the requests, reading replies and streams, attributing a request to a
replica, comparing with the reference and aggregating; and its client against a stand-in whose first
stream is cut, as a lost replica cuts it."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import replicas
from corun_sglang.core.compare import Generation, digest


def test_requests_are_a_function_of_the_seed_and_mix_every_kind():
    reqs = replicas.build_requests(12, seed=3, max_new_tokens=40)
    assert reqs == replicas.build_requests(12, seed=3, max_new_tokens=40)
    assert [r.body for r in reqs] != [r.body for r in replicas.build_requests(12, seed=4, max_new_tokens=40)]
    assert len({r.key for r in reqs}) == 12
    assert {(r.route, r.stream) for r in reqs} == set(replicas.KINDS)
    assert len({r.seed for r in reqs}) == 12 and all(0 <= r.seed < 2**63 for r in reqs)
    for r in reqs:
        assert r.body["stream"] is r.stream
        if r.route == replicas.GENERATE:
            params = r.body["sampling_params"]
            assert params["sampling_seed"] == r.seed and params["max_new_tokens"] == 40 and params["ignore_eos"]
            assert r.body["return_logprob"] is True and all(isinstance(t, int) for t in r.body["input_ids"])
        else:
            assert r.body["seed"] == r.seed and r.body["max_tokens"] == 40 and r.body["logprobs"] is True
            assert r.body["messages"][0]["content"]
    assert {r.body.get("temperature", r.body.get("sampling_params", {}).get("temperature")) for r in reqs} == set(
        replicas.TEMPERATURES)


def _meta(steps, finish=None, **more):
    return {"output_token_logprobs": [[lp, tok, None] for tok, lp in steps], "completion_tokens": len(steps),
            "finish_reason": finish, "system_fingerprint": "fp_a", "sampling_seed": 7, **more}


STEPS = [(11, -0.5), (12, -1.25), (13, -0.125)]


def test_native_replies_and_streams_read_alike_cumulative_or_incremental():
    whole = replicas.generate_outcome({"text": "", "meta_info": _meta(STEPS, {"type": "length"})})
    assert whole.finished and whole.fingerprint == "fp_a" and whole.sampling_seed == 7
    assert whole.generation.tokens == (11, 12, 13)
    cumulative = [{"meta_info": _meta(STEPS[:k], {"type": "length"} if k == 3 else None)} for k in (1, 2, 3)]
    incremental = [{"meta_info": {**_meta([STEPS[k - 1]], {"type": "length"} if k == 3 else None),
                                  "completion_tokens": k}} for k in (1, 2, 3)]
    for events in (cumulative, incremental):
        out = replicas.read_generate_stream(events)
        assert out.finished and digest(out.generation) == digest(whole.generation)


def test_a_cut_or_failed_stream_is_not_finished_but_keeps_its_tokens():
    cut = replicas.read_generate_stream([{"meta_info": _meta(STEPS[:2])}])
    assert not cut.finished and cut.generation.tokens == (11, 12)
    failed = replicas.read_generate_stream([{"meta_info": _meta(STEPS[:1])}, {"error": {"code": 503}}])
    assert not failed.finished and failed.error and failed.generation.tokens == (11,)
    aborted = replicas.read_generate_stream([{"meta_info": _meta(STEPS[:2], {"type": "abort", "status_code": 503})}])
    assert not aborted.finished and aborted.generation.tokens == (11, 12)  # a stopping replica's answer
    assert not replicas.ended(None) and not replicas.ended("abort") and replicas.ended("stop")
    nothing = replicas.read_chat_stream([])
    assert nothing.generation is None and not nothing.finished
    assert not replicas.generate_outcome({"error": "x"}, 502).finished


def _content(tokens):
    return [{"token": t, "logprob": lp} for t, lp in tokens]


def test_chat_replies_and_streams_read_alike():
    tokens = [("river", -0.5), (" stone", -2.0), ("é", -0.25)]
    body = {"system_fingerprint": "fp_a", "choices": [
        {"finish_reason": "length", "sampling_seed": 9, "logprobs": {"content": _content(tokens)}}]}
    whole = replicas.chat_outcome(body)
    assert whole.finished and whole.sampling_seed == 9 and whole.fingerprint == "fp_a"
    events = [{"system_fingerprint": "fp_a", "choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}]
    events += [{"system_fingerprint": "fp_a", "choices": [{"sampling_seed": 9, "finish_reason": None,
                                                            "logprobs": {"content": _content([t])}}]} for t in tokens]
    events += [{"system_fingerprint": "fp_a", "choices": [{"finish_reason": "length", "logprobs": None}]},
               {"choices": [], "usage": {"completion_tokens": 3}}]
    streamed = replicas.read_chat_stream(events)
    assert streamed.finished and streamed.sampling_seed == 9
    assert digest(streamed.generation) == digest(whole.generation)
    assert digest(whole.generation) != digest(replicas.chat_outcome(
        {"choices": [{"finish_reason": "length", "logprobs": {"content": _content(tokens[:2] + [("e", -0.25)])}}]}
    ).generation)  # a token's text names it


def test_sse_events_stop_at_done():
    lines = ["", ": keep-alive", 'data: {"a": 1}', "data:{\"b\": 2}", "data: [DONE]", 'data: {"c": 3}']
    assert list(replicas.sse_events(lines)) == [{"a": 1}, {"b": 2}]


METRICS = """# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="synthetic",is_streaming="false"} 3.0
sglang:num_requests_total{model_name="synthetic",is_streaming="true"} 2.0
sglang:num_requests_totally_other 100.0
sglang:num_running_reqs{model_name="synthetic",engine_type="unified"} 4.0
"""


def test_counters_sum_over_labels_and_name_exactly():
    assert replicas.parse_counter(METRICS, replicas.REQUESTS_COUNTER) == 5.0
    assert replicas.parse_counter(METRICS, replicas.RUNNING_GAUGE) == 4.0
    assert replicas.parse_counter(METRICS, "sglang:absent") == 0.0


def test_a_request_is_attributed_to_the_one_replica_whose_counter_grew():
    before = {"replica-0": 5.0, "replica-1": 2.0}
    assert replicas.served_by(before, {"replica-0": 6.0, "replica-1": 2.0}) == "replica-0"
    assert replicas.served_by(before, {"replica-0": 0.0, "replica-1": 3.0}) == "replica-1"  # a restart reads 0
    assert replicas.served_by(before, before) is None
    assert replicas.served_by(before, {"replica-0": 6.0, "replica-1": 3.0}) is None


def _outcome(tokens, logprobs, finished=True, fp="fp_a", seed=7):
    return replicas.Outcome(Generation.of(tokens, logprobs), finished, 200, fp, seed)


REQ = replicas.Req("000-gen", replicas.GENERATE, False, 7, {})


def test_rows_compare_bits_and_cut_streams():
    ref = Generation.of([1, 2, 3], [-0.5, -1.0, -2.0])
    same = replicas.row(REQ, _outcome([1, 2, 3], [-0.5, -1.0, -2.0]), ref, phase="p", policy="random")
    assert same["equal"] and same["first_divergence"] is None and same["digest"] == same["reference"]
    assert same["seed_returned"]
    off = replicas.row(REQ, _outcome([1, 2, 3], [-0.5, -1.0000000000000002, -2.0]), ref, phase="p", policy=None)
    assert not off["equal"] and off["first_divergence"] == 1
    cut = [Generation.of([1, 2], [-0.5, -1.0]), Generation.of([1, 9], [-0.5, -1.0])]
    retried = replicas.row(REQ, _outcome([1, 2, 3], [-0.5, -1.0, -2.0]), ref, phase="p", policy=None,
                           attempts=3, partials=cut)
    assert retried["equal"] and retried["cut_streams"] == [2, 2] and retried["cut_streams_are_prefixes"] is False
    assert replicas.is_prefix(cut[0], ref) and not replicas.is_prefix(cut[1], ref)
    failed = replicas.row(REQ, replicas.Outcome(None, False, 502, error="bad gateway"), ref, phase="p", policy=None)
    assert not failed["completed"] and not failed["equal"] and failed["digest"] is None


def test_summary_counts_per_phase_and_holds_only_when_every_check_does():
    ref = Generation.of([1, 2], [-0.5, -1.0])
    good = _outcome([1, 2], [-0.5, -1.0])
    rows = [replicas.row(REQ, good, ref, phase="single", policy=None)]
    rows += [replicas.row(REQ, good, ref, phase="one-by-one", policy="random", served=f"replica-{i % 2}")
             for i in range(3)]
    rows += [replicas.row(REQ, good, ref, phase="replica-lost", policy="round_robin", attempts=2)]
    fps = {"single": "fp_a", "replica-0": "fp_a", "replica-1": "fp_a"}
    summary = replicas.summarize(rows, fps)
    assert summary["ok"] and summary["fingerprints_agree"]
    phase = summary["phases"]["one-by-one/random"]
    assert phase["served_by"] == {"replica-0": 2, "replica-1": 1} and phase["equal"] == 3
    assert summary["phases"]["replica-lost/round_robin"]["client_retries_not_streamed"] == 1
    json.dumps(summary)  # written as JSON
    assert not replicas.summarize(rows, {**fps, "replica-1": "fp_b"})["ok"]
    assert not replicas.summarize(rows + [replicas.row(REQ, _outcome([1, 2], [-0.5, -1.0], fp="fp_c"), ref,
                                                       phase="p", policy=None)], fps)["ok"]
    unequal = replicas.row(REQ, _outcome([1, 3], [-0.5, -1.0]), ref, phase="all-at-once", policy="random")
    assert not replicas.summarize(rows + [unequal], fps)["ok"]
    assert not replicas.summarize([], fps)["ok"]


def test_the_router_runs_with_the_compose_files_policy_and_options():
    policy, options = replicas.compose_router()
    assert policy == "round_robin"
    assert "--retry-max-retries" in options and "--worker-urls" not in options and "--port" not in options
    command = replicas.router_command(["http://127.0.0.1:1", "http://127.0.0.1:2"], "random", 9, options)
    assert command[1:3] == ["-m", replicas.ROUTER_MODULE]
    router_args = pytest.importorskip("sglang_router.router_args", reason="the router extra is not installed")
    import argparse

    parser = argparse.ArgumentParser()
    router_args.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    parsed = router_args.RouterArgs.from_cli_args(parser.parse_args(command[3:]), use_router_prefix=False)
    assert parsed.worker_urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"] and parsed.policy == "random"
    assert parsed.port == 9 and parsed.retry_max_retries == 5 and not parsed.disable_retries


def _cutting_server():
    """A stand-in streaming ``/generate``: the first request's stream is cut after two events (its
    connection closes, as a killed replica's does); later ones run to their finish."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.server.calls += 1
            cut = self.server.calls == 1
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for k in (1, 2, 3):
                if cut and k == 3:
                    return  # the connection closes mid-stream
                event = {"meta_info": _meta(STEPS[:k], {"type": "length"} if k == 3 else None)}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.calls = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_cut_stream_is_sent_again_and_its_tokens_kept_to_check():
    server = _cutting_server()
    try:
        req = replicas.Req("001-gen-stream", replicas.GENERATE, True, 7, {"input_ids": [1], "stream": True})
        events = []
        outcome, attempts, partials = replicas.send_until_done(
            f"http://127.0.0.1:{server.server_address[1]}", req, 3, lambda: events.append(1), pause=0)
    finally:
        server.shutdown()
    assert outcome.finished and attempts == 2 and outcome.generation.tokens == (11, 12, 13)
    assert [p.tokens for p in partials] == [(11, 12)] and len(events) == 5
    row = replicas.row(req, outcome, outcome.generation, phase="replica-lost", policy=None, attempts=attempts,
                       partials=partials)
    assert row["equal"] and row["cut_streams_are_prefixes"] is True
