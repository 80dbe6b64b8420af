"""One request sent alone and among co-runners: the sender, the groups sent at once, the replies read, the rows.

A caller's plan is its own: which bodies it sends, in which groups, and what "alone" means (one request in
flight, a batch of one, a cold cache). What it sends them with, and how it reads and records what came back,
is this module:

- a sender (``Send``) takes one request body and returns its reply; ``http_sender`` POSTs the body to one
  route of a server (``GENERATE``, SGLang's native ``/generate``, or ``CHAT``, the OpenAI chat completions)
  and returns the reply's JSON; a reply other than 2xx raises ``httpx.HTTPStatusError``. Each call opens a
  connection of its own (``client``: one client for all, none kept alive), so calls from several threads are
  in flight at once;
- ``together`` sends a group at once, one thread a body, started in body order, and returns the replies in
  that order once every request has ended; ``among`` sends one body at a given place among its co-runners
  (the middle by default) and returns its reply;
- ``once_running`` sends streamed co-runners first and the body only once every one of them has streamed its
  first event, so the body runs beside all of them from its first step for as long as they outlast it; with
  ``end_others`` it then aborts every request on the server (``ABORT``), so the round ends with the body;
- ``batched`` sends one batched ``/generate`` call (several prompts in one body) and reads the prefill batches
  the server's log shows for it (``PREFILL_LOG``);
- ``flush_cache`` empties a server's prefix cache, so the next request of a prompt is cold;
- a native reply reads as ``compare.Generation.of_reply``, an OpenAI chat choice as ``chat_generation``
  (its tokens named by ``token_id``); the verdict on two generations is ``compare``'s, bit for bit;
- ``quiet`` is the progress callback that says nothing; ``append_rows`` appends rows to a JSON-lines file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import httpx

from corun_sglang.core.compare import Generation

GENERATE = "/generate"
CHAT = "/v1/chat/completions"
#: SGLang's log line for a prefill batch: its requests and new tokens.
PREFILL_LOG = re.compile(r"Prefill batch.*?#new-seq: (\d+), #new-token: (\d+)")

#: One request body -> its reply.
Send = Callable[[Any], Any]


#: SGLang's route that aborts requests; ``{"abort_all": true}`` aborts every one the server holds.
ABORT = "/abort_request"


def client(timeout: float) -> httpx.Client:
    """One HTTP client for many threads at once: a connection per request in flight, none kept alive (so no
    request meets a connection the server closed meanwhile). A client builds its TLS context once, about
    20 ms of CPU: a client per request would cost a round of 255 co-runners some 5 s before the first
    prefill."""
    return httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))


def http_sender(url: str, route: str = GENERATE, timeout: float = 600) -> Send:
    """A ``Send`` that POSTs each body to ``url`` + ``route``: the reply's JSON (a list for a batched
    ``/generate`` body); ``httpx.HTTPStatusError`` for a reply other than 2xx."""
    http = client(timeout)

    def send(body: Any) -> Any:
        reply = http.post(url + route, json=body)
        reply.raise_for_status()
        return reply.json()

    return send


def together(send: Send, bodies: Sequence[Any]) -> list:
    """Every body in flight at once (a thread each, started in order); the replies in body order, returned
    once every request has ended. The first failure, in body order, is raised after all have ended."""
    with ThreadPoolExecutor(max_workers=max(1, len(bodies))) as pool:
        return list(pool.map(send, bodies))


def among(send: Send, body: Any, others: Sequence[Any], at: int | None = None) -> Any:
    """``body``'s reply, sent at place ``at`` of ``others`` (default: the middle), all of them at once."""
    at = len(others) // 2 if at is None else at
    return together(send, [*others[:at], body, *others[at:]])[at]


def once_running(url: str, others: Sequence[dict], body: dict, timeout: float = 900,
                 end_others: bool = False) -> Any:
    """``body``'s ``/generate`` reply, sent once every one of ``others`` (streamed bodies) has streamed its
    first event; returns after the others have ended. With ``end_others``, once the body's request has ended
    (or failed), every request on the server is aborted (``ABORT``), so the others end with it: only for a
    server that runs nothing else. ``RuntimeError``, with ``body`` unsent, where a co-runner failed before
    the body would have gone."""
    started = threading.Semaphore(0)
    errors: list[str] = []

    def corunner(other: dict) -> None:
        first = True
        try:
            with http.stream("POST", url + GENERATE, json=other) as r:
                if r.status_code != 200:
                    errors.append(f"co-runner: HTTP {r.status_code}")
                for line in r.iter_lines():
                    if first and line.startswith("data:"):
                        first = False
                        started.release()
        except httpx.HTTPError as exc:
            errors.append(f"co-runner: {exc}")
        finally:
            if first:
                started.release()

    with client(timeout) as http, ThreadPoolExecutor(max_workers=max(1, len(others))) as pool:
        for other in others:
            pool.submit(corunner, other)
        try:
            for _ in others:
                started.acquire()
            if errors:
                raise RuntimeError("; ".join(errors[:3]))
            reply = http.post(url + GENERATE, json=body)
            reply.raise_for_status()
            return reply.json()
        finally:
            if end_others:  # the co-runners' streams end with the abort; the pool waits for them
                with contextlib.suppress(httpx.HTTPError):
                    http.post(url + ABORT, json={"abort_all": True})


@dataclasses.dataclass(frozen=True)
class Batched:
    """A batched call's reply (one entry per prompt), the prefill batches ``(requests, new tokens)`` the server
    logged while it ran, and its wall seconds (the HTTP round trip included)."""

    reply: list
    batches: list[tuple[int, int]]
    seconds: float


#: Seconds a batched call waits after its reply for the first prefill batch line in the server's log, and
#: then for the rest: the scheduler logs a prefill batch after it streamed that batch's results, so a prompt
#: that ends at its prefill can be answered a moment before its batch's line is written.
LOG_WAIT, LOG_SETTLE = 0.5, 0.1


def batched(url: str, log: Path, body: dict, timeout: float = 600) -> Batched:
    """One batched ``/generate`` call and the prefill batches that the server logged in ``log`` after it began."""
    seen = len(log.read_text(errors="replace"))
    start = time.perf_counter()
    reply = http_sender(url, timeout=timeout)(body)
    seconds = time.perf_counter() - start

    def logged() -> list[tuple[str, str]]:
        return PREFILL_LOG.findall(log.read_text(errors="replace")[seen:])

    deadline = time.monotonic() + LOG_WAIT
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(LOG_SETTLE)
    return Batched(reply, [(int(a), int(b)) for a, b in logged()], seconds)


def flush_cache(url: str, timeout: float = 120) -> None:
    """Empty the server's prefix cache (``POST /flush_cache``): SGLang refuses while a request is in flight
    or its scheduler is not yet idle, so this asks again until it succeeds, or raises after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=30) as client:
        while True:
            reply = client.post(url + "/flush_cache")
            if reply.status_code == 200:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}/flush_cache: {reply.status_code} {reply.text.strip()[:200]}")
            time.sleep(0.2)


def token_id(text: str) -> int:
    """A chat reply's token as an integer (63 bits of SHA-256 over its UTF-8): chat logprobs name tokens by
    their text, ``compare`` wants integers. Two tokens agree iff their texts do (up to collisions)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little") >> 1


def chat_steps(choice: dict) -> list[tuple[int, float]]:
    """The ``(token id, logprob)`` of each token an OpenAI chat choice (or a streamed chunk's) carries; empty
    where it carries no logprobs."""
    content = (choice.get("logprobs") or {}).get("content") or []
    return [(token_id(c["token"]), float(c["logprob"])) for c in content]


def chat_generation(choice: dict) -> Generation:
    """An OpenAI chat choice asked with ``logprobs``: its tokens, their logprobs and how it ended."""
    steps = chat_steps(choice)
    return Generation.of([t for t, _ in steps], [x for _, x in steps], finish=choice.get("finish_reason"))


def quiet(line: str) -> None:
    """The progress callback that says nothing."""


def append_rows(path: Path, rows: Iterable[dict]) -> None:
    """``rows`` appended to ``path`` (its folder made if absent), one JSON object a line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
