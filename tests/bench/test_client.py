"""``bench/client.py``: bench_serving's metrics, streamed digests, cache flushes and the decode-phase measures."""

import asyncio
import socket

import pytest

from bench import client


def test_summary_follows_bench_serving_definitions():
    r = client.Record(start=0.0, first=0.1, chunks=[0.1, 0.15, 0.25], end=0.25, output_tokens=6)
    s = client.summarize([r, client.Record(start=0.0, error="boom")], duration=2.0)
    assert s["completed"] == 1 and s["failed"] == 1
    assert s["median_ttft_ms"] == pytest.approx(100)
    assert s["median_tpot_ms"] == pytest.approx(30)  # (0.25 - 0.1) / (6 - 1)
    assert s["mean_itl_ms"] == pytest.approx(75)
    assert s["output_throughput"] == pytest.approx(3.0)


def test_client_streams_and_measures(streaming_server):
    server = streaming_server()
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


def test_digests_read_incremental_and_cumulative_streams_alike(streaming_server):
    digests = {}
    for cumulative in (False, True):
        server = streaming_server(cumulative=cumulative)
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


def test_flush_cache_waits_for_the_server_to_go_idle(streaming_server):
    server = streaming_server()
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


def test_decode_phase_is_the_window_where_the_whole_first_wave_decodes(finished_request):
    a = finished_request(0.0, [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4)], 4.0)
    b = finished_request(0.0, [(2.0, 1), (2.5, 2), (3.5, 3), (5.0, 4), (6.0, 5)], 6.0)
    late = finished_request(4.0, [(4.5, 1), (5.5, 2)], 5.5)  # after the wave: its tokens fall outside the window
    # window (2.0, 4.0]: a brings 2 tokens (t=3, 4), b brings 2 (t=2.5, 3.5)
    assert client.summarize([a, b, late], 6.0, wave=2)["decode_phase_throughput"] == pytest.approx(4 / 2.0)
    assert client.decode_phase_window([a, b, late], wave=2) == (2.0, 4)
    assert client.summarize([a, b, late], 6.0, wave=2)["decode_phase_s"] == 2.0
    # a wave whose last first token comes after its first completion has no decode phase
    c = finished_request(0.0, [(5.0, 1), (5.5, 2)], 5.5)
    assert client.summarize([a, c], 6.0, wave=2)["decode_phase_throughput"] is None
    assert client.summarize([a, c], 6.0, wave=2)["decode_phase_s"] is None
    failed = client.Record(start=0.0, error="ReadError")
    assert client.summarize([a, failed], 6.0, wave=2)["decode_phase_throughput"] is None
    # a server admits a wave in its own order: sent second, ``late`` waited for a's room, so the
    # wave is a and b, whatever the order they were sent in
    assert client.decode_phase_window([a, late, b], wave=2) == (2.0, 4)
    assert client.decode_step_throughput([a, late, b], wave=2) == client.decode_step_throughput([a, b], wave=2)


def test_decode_step_throughput_reads_full_steps_where_a_short_window_reads_low(finished_request):
    # two requests decode one token per 1 s step; a's last chunk (its end) arrives just before b's
    # chunk of the same step, so the window (1, 3] counts 3 of the 4 tokens its two steps made
    a = finished_request(0.0, [(1.0, 1), (2.0, 2), (3.0, 3)], 3.0)
    b = finished_request(0.0, [(1.0, 1), (2.0, 2), (3.01, 3), (4.0, 4)], 4.0)
    assert client.summarize([a, b], 4.0, wave=2)["decode_phase_throughput"] == pytest.approx(3 / 2.0)
    assert client.decode_step_throughput([a, b], wave=2) == pytest.approx(2 / 1.0)
    # a chunk carrying two tokens counts as two steps' worth
    c = finished_request(0.0, [(1.0, 1), (3.0, 3), (4.0, 4)], 4.0)
    assert client.decode_step_throughput([a, c], wave=2) == pytest.approx(2 / 1.0)
    late = finished_request(0.0, [(5.0, 1), (5.5, 2)], 5.5)  # no decode phase: the wave's last first token comes last
    assert client.decode_step_throughput([a, late], wave=2) is None
    assert client.summarize([a, b], 4.0, wave=2)["decode_step_throughput"] == pytest.approx(2.0)


def test_decode_step_throughput_holds_when_the_client_reads_in_bursts(finished_request):
    # the server makes a token every 1/3 s; the client reads each request's chunks three at a time,
    # once a second, so nearly every gap between two chunks is 0.1 ms
    def bursty(offset):
        chunks = [(1.0 + k + 1e-4 * j + offset, 3 * k + j + 1) for k in range(30) for j in range(3)]
        return finished_request(0.0, chunks, chunks[-1][0])

    wave = [bursty(0.0), bursty(0.01)]
    assert client.decode_step_throughput(wave, wave=2) == pytest.approx(2 * 3.0, rel=0.05)


def test_timeline_puts_prompt_tokens_at_the_first_token_and_output_where_it_arrives(finished_request):
    a = finished_request(0.0, [(0.5, 1), (1.2, 2), (1.7, 4)], 1.7)
    b = finished_request(0.2, [(1.1, 1), (2.3, 2)], 2.3)
    bins = client.timeline([a, b], [100, 40], bin_s=1.0)
    assert bins == [[0.0, 100.0, 0.0], [1.0, 40.0, 3.0], [2.0, 0.0, 1.0]]


def _rec(start, end, chunks, tokens):
    return client.Record(start=start, first=chunks[0], chunks=chunks, chunk_tokens=tokens, end=end,
                         output_tokens=tokens[-1])


def test_the_steady_window_runs_from_the_first_completion_to_the_last_start():
    records = [_rec(0.0, 2.0, [0.5, 1.0, 2.0], [1, 2, 3]),   # first wave
               _rec(0.0, 4.0, [1.0, 3.0, 4.0], [1, 2, 3]),
               _rec(2.0, 6.0, [2.5, 5.0, 6.0], [1, 2, 3])]  # the last start: replaces the first completion
    assert client.steady_window(records) is None  # the last start is the first completion: no window
    records.append(_rec(3.0, 5.0, [3.5, 4.5, 5.0], [1, 2, 3]))
    assert client.steady_window(records) == (2.0, 3.0)
    got = client.steady(records, duration=6.0)
    assert got["steady_s"] == pytest.approx(1.0) and got["steady_share"] == pytest.approx(1 / 6)
    assert got["drain_share"] == pytest.approx(3 / 6)  # after the last start at 3.0, to 6.0
    assert got["steady_output_throughput"] == pytest.approx(2.0)  # tokens at 2.5 and 3.0 arrived in (2, 3]
    assert client.steady([], 1.0)["steady_s"] is None


def test_arrivals_are_a_seeded_poisson_process():
    a = client.arrivals(2000, rate=10.0, seed=3)
    assert a == client.arrivals(2000, rate=10.0, seed=3) and a != client.arrivals(2000, rate=10.0, seed=4)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.1)


def test_an_open_loop_run_sends_on_schedule_without_waiting_for_completions(streaming_server):
    server = streaming_server()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        bodies = [client.request([1, 2, 3], 5, seed=i) for i in range(8)]
        records, duration = asyncio.run(client.run_open(url, bodies, rate=50.0, seed=1))
    finally:
        server.shutdown()
    starts = [r.start - min(x.start for x in records) for r in records]
    want = client.arrivals(8, 50.0, 1)
    assert all(abs(s - w) < 0.05 for s, w in zip(starts, want))
    assert all(r.error is None and r.output_tokens == 5 for r in records)


def test_a_run_counts_the_prefill_its_completed_requests_computed():
    done = [client.Record(start=0.0, end=1.0, prompt_tokens=2000, cached_tokens=1024),
            client.Record(start=0.0, end=1.0, prompt_tokens=300, cached_tokens=0)]
    failed = client.Record(start=0.0, error="boom", prompt_tokens=500)
    assert client.prefill(done + [failed]) == {"prompt_tokens": 2300, "cached_tokens": 1024, "prefill_tokens": 1276}
    assert client.summarize(done + [failed], 1.0)["prefill_tokens"] == 1276


def test_a_session_sends_each_turn_as_the_last_prompt_its_reply_and_the_next_message(streaming_server):
    from bench.workloads import Session

    system = [7, 8, 9]
    sessions = [Session(system, [[1, 2], [3], [4, 5]], [2, 3, 1]), Session(system, [[6], [1, 1]], [1, 2])]
    server = streaming_server(cache=True)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        records, _ = asyncio.run(client.run_sessions(url, sessions, concurrency=1))
    finally:
        server.shutdown()
    assert len(records) == 5 and all(r.error is None for r in records)
    first, second, third = server.received[:3]  # one session at a time: the first session's turns in order
    assert first == system + [1, 2]
    assert second == first + records[0].output_ids + [3] and third == second + records[1].output_ids + [4, 5]
    assert server.received[3] == system + [6]
    # the cache served each turn its whole history; the second session shares the system prompt
    assert [r.cached_tokens for r in records] == [0, len(first) + 2, len(second) + 3, len(system), 5]
    assert [r.prompt_tokens for r in records] == [len(p) for p in server.received]
    assert client.summarize(records, 1.0)["prefill_tokens"] == sum(map(len, server.received)) - (7 + 11 + 3 + 5)


def test_a_failed_turn_ends_its_session():
    from bench.workloads import Session

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    records, _ = asyncio.run(client.run_sessions(f"http://127.0.0.1:{port}", [Session([1], [[2], [3]], [1, 1])], 1))
    assert records[0].error and records[1].error == "an earlier turn of its session failed"
