"""``probes.harness``: requests sent alone and at once, against local servers standing in for SGLang's endpoints
(``json_server``, ``streaming_generate``)."""

import json
import threading

import httpx
import pytest

from corun_sglang.probes import harness


def test_the_http_sender_posts_each_body_to_its_route_and_returns_the_reply(json_server):
    server = json_server(lambda path, body: (200, {"path": path, "n": len(body["input_ids"])}))
    assert harness.http_sender(server.url)({"input_ids": [[1], [2]]}) == {"path": "/generate", "n": 2}
    assert harness.http_sender(server.url, harness.CHAT)({"input_ids": [1]}) == {"path": "/v1/chat/completions", "n": 1}
    assert server.posts == [("/generate", {"input_ids": [[1], [2]]}), ("/v1/chat/completions", {"input_ids": [1]})]


def test_a_refused_request_raises(json_server):
    server = json_server(lambda path, body: (400, {"error": "bad"}))
    with pytest.raises(httpx.HTTPStatusError):
        harness.http_sender(server.url)({"input_ids": [1]})


def _meeting(count, wait=5.0):
    """A ``Send`` that answers a body only once ``count`` bodies are in flight together (else it raises
    ``threading.BrokenBarrierError`` after ``wait`` s); ``ended`` lists the bodies answered or failed."""
    barrier, ended = threading.Barrier(count, timeout=wait), []

    def send(body):
        try:
            barrier.wait()
            if body == "fail":
                raise RuntimeError("refused")
            return f"reply to {body}"
        finally:
            ended.append(body)

    return send, ended


def test_together_has_every_request_in_flight_at_once_and_keeps_their_order():
    send, _ = _meeting(5)
    bodies = ["a", "b", "c", "d", "e"]
    assert harness.together(send, bodies) == [f"reply to {b}" for b in bodies]
    one_by_one, _ = _meeting(5, wait=0.2)
    with pytest.raises(threading.BrokenBarrierError):  # the control: sent in turn, no request meets another
        [one_by_one(b) for b in bodies]
    assert harness.together(send, []) == []


def test_together_raises_a_failure_only_once_every_request_has_ended():
    send, ended = _meeting(3)
    with pytest.raises(RuntimeError, match="refused"):
        harness.together(send, ["a", "fail", "c"])
    assert sorted(ended) == ["a", "c", "fail"]


@pytest.mark.parametrize("at", [None, 0, 4])
def test_among_sends_the_body_with_its_co_runners_at_once_and_returns_its_reply(at):
    send, ended = _meeting(5)
    assert harness.among(send, "needle", ["o1", "o2", "o3", "o4"], at) == "reply to needle"
    assert sorted(ended) == ["needle", "o1", "o2", "o3", "o4"]


def _corunners(count, fail=()):
    """Streamed bodies of 8 to 48 tokens (the longer, the later they stream); those in ``fail`` are refused."""
    return [{"input_ids": [1] * (8 + 8 * (i % 6)), "stream": True, **({"fail": True} if i in fail else {})}
            for i in range(count)]


def test_once_running_sends_the_body_only_after_every_co_runner_streams(streaming_generate):
    url, events = streaming_generate
    reply = harness.once_running(url, _corunners(8), {"input_ids": [2]})
    assert reply["meta_info"]["output_token_logprobs"] == [[-0.25, 7, None]] * 3
    needle_at = next(t for tag, what, t in events if tag == "needle")
    firsts = [t for tag, what, t in events if what == "first chunk"]
    assert len(firsts) == 8 and max(firsts) < needle_at


def test_once_running_does_not_send_the_body_when_a_co_runner_fails(streaming_generate):
    url, events = streaming_generate
    with pytest.raises(RuntimeError, match="co-runner: HTTP 500"):
        harness.once_running(url, _corunners(4, fail={2}), {"input_ids": [2]})
    assert [tag for tag, _, _ in events].count("needle") == 0


def test_once_running_ending_the_others_aborts_them_once_the_body_has_its_reply(streaming_generate):
    """More co-runners than httpx's default pool (100 connections), each streaming for 30 s unless aborted:
    the call returns once the body has its reply and the abort ended every co-runner."""
    import time

    url, events = streaming_generate
    others = [{**body, "hold": 30} for body in _corunners(110)]
    start = time.monotonic()
    reply = harness.once_running(url, others, {"input_ids": [2]}, end_others=True)
    returned = time.monotonic()
    assert reply["meta_info"]["output_token_logprobs"] == [[-0.25, 7, None]] * 3
    assert returned - start < 10
    at = {tag: t for tag, what, t in events if what == "arrived" and tag in ("needle", "abort")}
    ends = [t for tag, what, t in events if tag == "corunner" and what == "ended"]
    assert [what for tag, what, _ in events if tag == "abort"] == ["arrived"]  # {"abort_all": true}, once
    assert at["needle"] < at["abort"] and len(ends) == 110 and at["abort"] <= min(ends) and max(ends) <= returned


def test_once_running_leaves_the_others_running_unless_told_to_end_them(streaming_generate):
    import time

    url, events = streaming_generate
    start = time.monotonic()
    harness.once_running(url, [{**body, "hold": 1.0} for body in _corunners(4)], {"input_ids": [2]})
    assert time.monotonic() - start >= 1.0
    assert [tag for tag, _, _ in events].count("abort") == 0


def test_prefill_batches_are_read_from_sglangs_log_lines():
    log = ("[2026-12-03 08:00:00] Prefill batch, #new-seq: 4, #new-token: 256, #cached-token: 0, "
           "token usage: 0.00, #running-req: 0, #queue-req: 0, \n"
           "[2026-12-03 08:00:01] Decode batch, #running-req: 4, #token: 260, \n")
    assert harness.PREFILL_LOG.findall(log) == [("4", "256")]


def test_a_batched_call_reads_only_the_prefill_batches_logged_after_it_began(tmp_path, monkeypatch, json_server):
    monkeypatch.setattr(harness.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("Prefill batch, #new-seq: 9, #new-token: 99, \n")  # an earlier call's

    def answer(path, body):
        prompts = body["input_ids"]
        with open(log, "a") as f:
            f.write(f"Prefill batch, #new-seq: {len(prompts)}, #new-token: {sum(map(len, prompts))}, \n")
        return 200, [{"meta_info": {"prompt": p}} for p in prompts]

    got = harness.batched(json_server(answer).url, log, {"input_ids": [[1, 2], [3, 4, 5]]})
    assert got.batches == [(2, 5)] and got.seconds > 0
    assert [r["meta_info"]["prompt"] for r in got.reply] == [[1, 2], [3, 4, 5]]


def test_a_batched_call_waits_for_prefill_lines_written_just_after_its_reply(tmp_path, json_server):
    """The scheduler can answer a prompt that ends at its prefill a moment before it logs that batch: lines
    written 50 ms after the reply, and a second 50 ms later, are read; a call whose batches are never logged
    returns none after ``LOG_WAIT``."""
    import time

    log = tmp_path / "server.log"
    log.write_text("")

    def later(lines):
        def write():
            for line in lines:
                time.sleep(0.05)
                with open(log, "a") as f:
                    f.write(line)
        threading.Thread(target=write).start()

    def answer(path, body):
        later(["Prefill batch, #new-seq: 1, #new-token: 2, \n", "Prefill batch, #new-seq: 1, #new-token: 3, \n"])
        return 200, [{}, {}]

    assert harness.batched(json_server(answer).url, log, {"input_ids": [[1, 2], [3, 4, 5]]}).batches == [(1, 2), (1, 3)]
    silent = json_server(lambda path, body: (200, [{}]))
    start = time.monotonic()
    assert harness.batched(silent.url, log, {"input_ids": [[1]]}).batches == []
    assert time.monotonic() - start >= harness.LOG_WAIT


def test_the_cache_is_flushed_once_the_server_accepts_and_a_server_that_never_does_is_named(json_server):
    answers = iter([400, 400, 200])
    server = json_server(lambda path, body: (next(answers), {}))
    harness.flush_cache(server.url)
    assert server.posts == [("/flush_cache", None)] * 3
    busy = json_server(lambda path, body: (400, {"error": "not idle"}))
    with pytest.raises(RuntimeError, match="/flush_cache: 400"):
        harness.flush_cache(busy.url, timeout=0.3)


def test_a_chat_choice_reads_as_tokens_named_by_their_text_with_their_logprobs():
    content = [{"token": "river", "logprob": -0.5}, {"token": " river", "logprob": -2.0},
               {"token": "é", "logprob": -0.25}]
    got = harness.chat_generation({"finish_reason": "length", "logprobs": {"content": content}})
    assert got.tokens == tuple(harness.token_id(c["token"]) for c in content) and got.finish == "length"
    assert got.logprobs == (-0.5, -2.0, -0.25)
    assert got.tokens[0] != got.tokens[1] and all(0 <= t < 2**63 for t in got.tokens)
    assert harness.token_id("river") == got.tokens[0]  # a function of the text alone
    assert harness.chat_steps({"logprobs": None}) == [] and harness.chat_steps({}) == []


def test_rows_are_appended_one_json_object_a_line(tmp_path):
    out = tmp_path / "results" / "rows.jsonl"
    harness.append_rows(out, [{"a": 1}])
    harness.append_rows(out, [{"b": [2.5, None]}, {"c": "x"}])
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{"a": 1}, {"b": [2.5, None]}, {"c": "x"}]
