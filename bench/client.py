"""Streaming client for SGLang's ``/generate`` (closed loop, or open loop at a Poisson request rate) and
the metrics of ``sglang.bench_serving``.

Metric definitions follow SGLang's ``bench_serving``: TTFT is the time to the
first streamed chunk with a token; ITL the gaps between successive chunks
that bring tokens; TPOT ``(latency - TTFT) / (output_tokens - 1)``; output
throughput the generated tokens over the run's wall time. Times are in
milliseconds in the summary. Tokens are counted from each chunk's
``meta_info.completion_tokens``, so cumulative and incremental streams
(``--incremental-streaming-output``, the benchmarks' default: no chunk resends
earlier tokens) measure alike; each request's output token ids are kept the
same way, for ``digest``.

A closed-loop run's steady state (``steady``) is the window from its first completion to its last
request's start: the client keeps the concurrency in flight throughout, and neither the first wave's
prefill burst nor the drain falls inside; ``drain_share`` says how much of the run came after it.

Two measures go beyond ``bench_serving``: the decode-phase throughput (output
tokens per second while the first wave of requests is all decoding: from the
last first token of that wave to its first completion, so no prefill runs in
the window) and a timeline of prefill and decode throughput (prompt tokens of
the requests whose first token arrived in each bin; output tokens after the
first, per bin).

Each request also keeps the prompt tokens it sent and those a prefix cache served it (SGLang's
``meta_info``: ``prompt_tokens``, ``cached_tokens``); a run's prefill tokens computed are their
difference, summed over its completed requests. A multi-turn run (``run_sessions``) sends each
session's turns in order, each turn's prompt the previous one, the model's reply and the next user
message.

The client is ``aiohttp``, as in ``bench_serving``: at 256 streams it spends
about half the CPU per streamed chunk that ``httpx`` does, and a client that
falls behind its streams bunches its chunk timings (``run.py`` records the
share of the run the client spent on the CPU, ``client_cpu_share``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import statistics
import time

import aiohttp


@dataclasses.dataclass
class Record:
    start: float
    first: float | None = None
    chunks: list[float] = dataclasses.field(default_factory=list)  # arrival of each chunk with tokens
    chunk_tokens: list[int] = dataclasses.field(default_factory=list)  # output tokens so far, per chunk
    end: float | None = None
    output_tokens: int = 0
    output_ids: list[int] = dataclasses.field(default_factory=list)
    error: str | None = None
    prompt_tokens: int = 0  # as the server counted them
    cached_tokens: int = 0  # of those, what its prefix cache served


def digest(record: Record) -> str | None:
    """A short hash of a request's output token ids; None for a request that failed. Two runs of one
    prompt and seed gave the same tokens exactly when their digests are equal."""
    if record.error is not None or record.end is None:
        return None
    return hashlib.sha256(json.dumps(record.output_ids).encode()).hexdigest()[:16]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    pos = (len(values) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def _stats(name: str, values_ms: list[float]) -> dict:
    return {
        f"mean_{name}_ms": statistics.fmean(values_ms) if values_ms else float("nan"),
        f"median_{name}_ms": statistics.median(values_ms) if values_ms else float("nan"),
        f"p99_{name}_ms": _percentile(values_ms, 99),
    }


def first_wave(records: list[Record], wave: int) -> list[Record]:
    """The ``wave`` requests that got their first tokens first (the server admits them in its own
    order, not the order they were sent); empty if fewer than ``wave`` got one."""
    started = sorted((r for r in records if r.first is not None), key=lambda r: r.first)
    return started[:wave] if wave > 0 and len(started) >= wave else []


def _wave_window(records: list[Record], wave: int) -> tuple[float, float] | None:
    """(t0, t1): from the last first token of the first wave to its first completion."""
    first = first_wave(records, wave)
    if not first or any(r.end is None or r.error for r in first):
        return None
    t0, t1 = max(r.first for r in first), min(r.end for r in first)
    return (t0, t1) if t1 > t0 else None


def decode_phase_window(records: list[Record], wave: int) -> tuple[float, int] | None:
    """(seconds, output tokens) while the first ``wave`` requests all decode; None if that window is empty.

    The window runs from the last first token of the wave (every prefill of the
    wave done) to the wave's first completion; tokens of every request that
    arrive in it count. Tokens over seconds read low for a window of a few steps
    (the completing request's last chunk may arrive before the others of its
    step): ``decode_step_throughput`` does not.
    """
    window = _wave_window(records, wave)
    if window is None:
        return None
    t0, t1 = window
    return t1 - t0, tokens_between(records, t0, t1)


def decode_step_throughput(records: list[Record], wave: int) -> float | None:
    """``wave`` over the median, across the wave's requests, of each one's time per token inside the
    decode-phase window (from its first chunk there to its last): the output tokens/s of full decode
    steps, whatever the window's length. A client that reads its streams in bursts moves only the two
    ends of each span, not every gap. None if no request has two chunks in the window."""
    window = _wave_window(records, wave)
    if window is None:
        return None
    t0, t1 = window
    per_token = []
    for r in first_wave(records, wave):
        inside = [(t, n) for t, n in zip(r.chunks, r.chunk_tokens) if t0 <= t <= t1]
        if len(inside) >= 2 and inside[-1][1] > inside[0][1]:
            per_token.append((inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1]))
    return wave / statistics.median(per_token) if per_token else None


def timeline(records: list[Record], input_lens: list[int], bin_s: float = 1.0) -> list[list[float]]:
    """[[bin start s, prefill tok/s, decode tok/s], ...] from the run's start.

    A request's prompt tokens count in the bin of its first token; its output
    tokens after the first in the bins where they arrive.
    """
    if not records:
        return []
    origin = min(r.start for r in records)
    last = max((r.end or r.start) for r in records)
    bins = [[k * bin_s, 0.0, 0.0] for k in range(int((last - origin) / bin_s) + 1)]
    for r, n_in in zip(records, input_lens):
        if r.first is None:
            continue
        bins[int((r.first - origin) / bin_s)][1] += n_in / bin_s
        previous = None
        for t, n in zip(r.chunks, r.chunk_tokens):
            if previous is not None:
                bins[int((t - origin) / bin_s)][2] += (n - previous) / bin_s
            previous = n
    return bins


def steady_window(records: list[Record]) -> tuple[float, float] | None:
    """(t0, t1) of a run's steady state: from its first completion (the first wave's prefills are behind
    it) to the last request's start (after it the client has no request left to replace a finished one,
    and the run drains). None if that window is empty (too few requests for a steady state)."""
    done = [r for r in records if r.end is not None and r.error is None]
    if not done:
        return None
    t0, t1 = min(r.end for r in done), max(r.start for r in records)
    return (t0, t1) if t1 > t0 else None


def tokens_between(records: list[Record], t0: float, t1: float) -> int:
    """Output tokens that arrived in (t0, t1]."""
    tokens = 0
    for r in records:
        previous = 0
        for t, n in zip(r.chunks, r.chunk_tokens):
            if t0 < t <= t1:
                tokens += n - previous
            previous = n
    return tokens


def steady(records: list[Record], duration: float) -> dict:
    """The steady-state measures of a run: its window's share of the run, the share spent draining (after
    the last request started) and the output throughput inside the window."""
    if not records:
        return {"steady_s": None, "steady_share": None, "drain_share": None, "steady_output_throughput": None}
    origin = min(r.start for r in records)
    drain = max(0.0, origin + duration - max(r.start for r in records))
    window = steady_window(records)
    seconds = None if window is None else window[1] - window[0]
    return {
        "steady_s": seconds,
        "steady_share": None if seconds is None or duration <= 0 else seconds / duration,
        "drain_share": drain / duration if duration > 0 else None,
        "steady_output_throughput": None if window is None else tokens_between(records, *window) / seconds,
    }


def prefill(records: list[Record]) -> dict:
    """The prompt tokens of a run's completed requests, those a prefix cache served, and the rest: the
    prefill tokens the server computed for them."""
    done = [r for r in records if r.error is None and r.end is not None]
    prompt, cached = sum(r.prompt_tokens for r in done), sum(r.cached_tokens for r in done)
    return {"prompt_tokens": prompt, "cached_tokens": cached, "prefill_tokens": prompt - cached}


def summarize(records: list[Record], duration: float, wave: int | None = None) -> dict:
    """bench_serving-style metrics of one run (``duration`` in seconds); ``wave``: the concurrency."""
    done = [r for r in records if r.error is None and r.end is not None and r.first is not None]
    ttft = [(r.first - r.start) * 1e3 for r in done]
    e2e = [(r.end - r.start) * 1e3 for r in done]
    tpot = [((r.end - r.first) / (r.output_tokens - 1)) * 1e3 for r in done if r.output_tokens > 1]
    itl = [(b - a) * 1e3 for r in done for a, b in zip(r.chunks, r.chunks[1:])]
    out_tokens = sum(r.output_tokens for r in done)
    window = decode_phase_window(records, wave or len(records))
    return {
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration_s": duration,
        "output_tokens": out_tokens,
        "output_throughput": out_tokens / duration if duration > 0 else float("nan"),
        "request_throughput": len(done) / duration if duration > 0 else float("nan"),
        **_stats("ttft", ttft), **_stats("tpot", tpot), **_stats("itl", itl), **_stats("e2e", e2e),
        "decode_phase_throughput": None if window is None else window[1] / window[0],
        "decode_phase_s": None if window is None else window[0],
        "decode_step_throughput": decode_step_throughput(records, wave or len(records)),
        **steady(records, duration),
        **prefill(records),
    }


async def _one(session: aiohttp.ClientSession, url: str, body: dict) -> Record:
    rec = Record(start=time.perf_counter())
    try:
        async with session.post(url + "/generate", json=body) as reply:
            reply.raise_for_status()
            async for raw in reply.content:  # one line at a time
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                meta = chunk["meta_info"]
                tokens = meta["completion_tokens"]
                rec.prompt_tokens = meta.get("prompt_tokens", rec.prompt_tokens)
                rec.cached_tokens = meta.get("cached_tokens", rec.cached_tokens)
                ids = chunk.get("output_ids") or []
                # incremental streams send each chunk's new ids, cumulative ones all ids so far
                if len(ids) == tokens:
                    rec.output_ids = list(ids)
                else:
                    rec.output_ids.extend(ids)
                if tokens > rec.output_tokens:
                    now = time.perf_counter()
                    rec.first = rec.first or now
                    rec.chunks.append(now)
                    rec.chunk_tokens.append(tokens)
                    rec.output_tokens = tokens
        rec.end = time.perf_counter()
    except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError) as exc:  # ValueError: bad JSON, an overlong line
        rec.error = f"{type(exc).__name__}: {exc}"
    return rec


async def flush_cache(url: str, timeout: float = 60) -> None:
    """Empty the server's prefix cache (``POST /flush_cache``; SGLang refuses while requests run, so
    this retries until it is idle or ``timeout`` seconds pass, then raises)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        while True:
            async with session.post(url + "/flush_cache") as reply:
                if reply.status == 200:
                    return
                text = (await reply.text()).strip()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}/flush_cache: {reply.status} {text}")
            await asyncio.sleep(0.5)


def request(prompt: list[int], output_len: int, seed: int, temperature: float = 0.6) -> dict:
    return {
        "input_ids": prompt, "stream": True,
        "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True,
                            "temperature": temperature, "sampling_seed": seed},
    }


async def run(url: str, bodies: list[dict], concurrency: int, timeout: float = 3600) -> tuple[list[Record], float]:
    """Send ``bodies`` keeping at most ``concurrency`` in flight (closed loop); records in order."""
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:

        async def bounded(body):
            async with gate:
                return await _one(session, url, body)

        start = time.perf_counter()
        records = await asyncio.gather(*(bounded(b) for b in bodies))
        return list(records), time.perf_counter() - start


async def run_sessions(url: str, sessions: list, concurrency: int, timeout: float = 3600) -> tuple[list[Record], float]:
    """Each of ``sessions`` (``workloads.Session``) turn by turn, at most ``concurrency`` sessions at once (closed
    loop: a session holds its place from its first turn to its last, so ``concurrency`` requests run while
    that many sessions are left): a turn's prompt is the previous turn's, the reply it got (its output ids)
    and the next user message. Records in session order, turn by turn, each turn seeded by its place there;
    the turns after one that failed are not sent, and fail."""
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    turns = [len(s.users) for s in sessions]
    firsts = [sum(turns[:k]) for k in range(len(sessions))]
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as http:

        async def converse(k, s):
            out, prompt = [], []
            async with gate:
                for t, (user, new) in enumerate(zip(s.users, s.outputs)):
                    if out and out[-1].error is not None:
                        out.append(Record(start=time.perf_counter(), error="an earlier turn of its session failed"))
                        continue
                    prompt = (list(s.system) if t == 0 else prompt + out[-1].output_ids) + list(user)
                    out.append(await _one(http, url, request(prompt, new, seed=firsts[k] + t)))
            return out

        start = time.perf_counter()
        done = await asyncio.gather(*(converse(k, s) for k, s in enumerate(sessions)))
        return [r for records in done for r in records], time.perf_counter() - start


def arrivals(count: int, rate: float, seed: int) -> list[float]:
    """Seconds from the run's start at which ``count`` requests arrive: a Poisson process of ``rate``
    requests per second (exponential gaps, as ``bench_serving --request-rate``), the same for a seed."""
    import random

    rnd, t, out = random.Random(seed), 0.0, []
    for _ in range(count):
        out.append(t)
        t += rnd.expovariate(rate)
    return out


async def run_open(url: str, bodies: list[dict], rate: float, seed: int = 0,
                   timeout: float = 3600) -> tuple[list[Record], float]:
    """Send ``bodies`` at Poisson arrival times of ``rate`` requests/s (open loop: an arrival never waits
    for a completion); records in order."""
    offsets = arrivals(len(bodies), rate, seed)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        start = time.perf_counter()

        async def at(offset, body):
            await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
            return await _one(session, url, body)

        records = await asyncio.gather(*(at(o, b) for o, b in zip(offsets, bodies)))
        return list(records), time.perf_counter() - start
