"""How many requests a server was running, read from the server itself while a test's requests ran.

``LoadProbe`` polls SGLang's ``/v1/loads`` (the scheduler's load snapshot: ``num_running_reqs`` is the
size of the running decode batch, padding excluded) from a background thread and keeps every answer
with the client's monotonic time. ``during`` summarizes the samples taken while a request was in
flight: the evidence that its co-runners really ran beside it, rather than a hope that a thread pool's
timing put them there. The scheduler republishes its snapshot every ``--load-snapshot-publish-interval``
decode steps (and after every prefill), so a server started with ``1`` is read step by step.

Invariants: ``during`` and ``parse`` are pure; a failed poll is counted, never raised, and never
becomes a sample.
"""

from __future__ import annotations

import dataclasses
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


class LoadProbe:
    """``with LoadProbe(url) as probe: ...``: ``probe.samples`` grows every ``interval`` seconds."""

    def __init__(self, url: str, interval: float = 0.005):
        self.url, self.interval = url, interval
        self.samples: list[Sample] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                try:
                    reply = client.get(self.url + "/v1/loads", params={"include": "core"})
                    reply.raise_for_status()
                    self.samples.append(parse(reply.json(), time.monotonic()))
                except (httpx.HTTPError, KeyError, ValueError, TypeError):
                    self.failures += 1
                self._stop.wait(self.interval)

    def during(self, start: float, end: float) -> Overlap:
        return during(list(self.samples), start, end)

    def __enter__(self) -> "LoadProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
