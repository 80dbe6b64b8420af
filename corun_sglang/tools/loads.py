"""How many requests a server was running, read from the server itself while a test's requests ran.

``LoadProbe`` polls SGLang's ``/v1/loads`` (the scheduler's load snapshot: ``num_running_reqs`` is the
size of the running decode batch, padding excluded) from a process of its own and keeps every answer
with the monotonic time it arrived. ``during`` summarizes the samples taken while a request was in
flight: the evidence that its co-runners really ran beside it, rather than a hope that a thread pool's
timing put them there. The scheduler republishes its snapshot every ``--load-snapshot-publish-interval``
decode steps (and after every prefill), so a server started with ``1`` is read step by step.

Invariants: ``during`` and ``parse`` are pure; a failed poll is counted, never raised, and never
becomes a sample; the poller shares no interpreter lock with the client it watches (a burst of a few
hundred client threads would otherwise starve a polling thread for the whole of a short burst, and
the windows of its requests would hold no sample of it); samples are taken from the probe's entry to
its exit, and the first is in before the caller's work starts.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import threading
import time

import httpx


@dataclasses.dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic() when the answer arrived
    running: int
    waiting: int


@dataclasses.dataclass(frozen=True)
class Overlap:
    """The running-request counts sampled in a window."""

    samples: int
    observed_max: int
    observed_min: int

    def as_row(self, intended: int) -> dict:
        return {"intended": intended, **dataclasses.asdict(self)}


def parse(body: dict, t: float) -> Sample:
    """A ``/v1/loads`` answer as one sample: the counts summed over its DP ranks."""
    loads = body["loads"]
    return Sample(t, sum(int(x["num_running_reqs"]) for x in loads), sum(int(x["num_waiting_reqs"]) for x in loads))


def during(samples: list[Sample], start: float, end: float) -> Overlap:
    """The counts sampled in [start, end]; zeros if none was taken there."""
    inside = [s.running for s in samples if start <= s.t <= end]
    return Overlap(len(inside), max(inside, default=0), min(inside, default=0))


def _poll(url: str, interval: float, conn) -> None:
    """The probe's process: polls ``url`` until told to stop, handing over what it gathered on request."""
    samples, failures = [], 0
    with httpx.Client(timeout=10) as client:
        while True:
            if conn.poll():
                order = conn.recv()
                conn.send((samples, failures))
                samples = []
                if order == "stop":
                    break
            try:
                reply = client.get(url + "/v1/loads", params={"include": "core"})
                reply.raise_for_status()
                samples.append(parse(reply.json(), time.monotonic()))
            except (httpx.HTTPError, KeyError, ValueError, TypeError):
                failures += 1
            time.sleep(interval)
    conn.close()


class LoadProbe:
    """``with LoadProbe(url) as probe: ...``: ``probe.samples`` grows every ``interval`` seconds."""

    def __init__(self, url: str, interval: float = 0.005, start_timeout: float = 60.0):
        self.url, self.interval, self.start_timeout = url, interval, start_timeout
        self._samples: list[Sample] = []
        self._failures = 0
        self._lock = threading.Lock()
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_poll, args=(url, interval, child), daemon=True)
        self._done = False

    def _collect(self, order: str = "get") -> None:
        with self._lock:
            if self._done:
                return
            try:
                self._conn.send(order)
                new, self._failures = self._conn.recv()
            except (EOFError, OSError):  # the poller is gone: what it handed over is all there is
                self._done = True
                return
            self._samples.extend(new)
            self._done = order == "stop"

    @property
    def samples(self) -> list[Sample]:
        self._collect()
        return list(self._samples)

    @property
    def failures(self) -> int:
        self._collect()
        return self._failures

    def during(self, start: float, end: float) -> Overlap:
        return during(self.samples, start, end)

    def __enter__(self) -> "LoadProbe":
        self._process.start()
        deadline = time.monotonic() + self.start_timeout
        while not (self.samples or self._failures):
            if time.monotonic() > deadline or not self._process.is_alive():
                self.__exit__()
                raise RuntimeError(f"the load probe of {self.url} took no sample (its process "
                                   f"{'ended' if not self._process.is_alive() else f'waited {self.start_timeout:.0f} s'})")
            time.sleep(self.interval)
        return self

    def __exit__(self, *exc) -> None:
        self._collect("stop")
        self._process.join(timeout=30)
