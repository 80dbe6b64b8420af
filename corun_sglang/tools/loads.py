"""How many requests a server was running, read from the server itself while a test's requests ran.

``LoadProbe`` reads the load snapshot a server's scheduler publishes in shared memory (SGLang's
``ShmLoadSnapshotWriter``; ``num_running_reqs`` is the size of the running decode batch, padding excluded),
from a process of its own, and keeps every reading with the monotonic time it was taken. ``during``
summarizes the samples taken while a request was in flight: the evidence that its co-runners really ran
beside it, rather than a hope that a thread pool's timing put them there. The scheduler republishes its
snapshot every ``--load-snapshot-publish-interval`` decode steps (and after every prefill), so a server
started with ``1`` is read step by step.

Invariants: ``during`` is pure; a failed reading is counted, never raised, and never becomes
a sample; the probe reads the file the scheduler writes, not ``/v1/loads``, so a server whose HTTP loop is
busy (a burst being admitted) is still read while its requests run; it reads from a process of its own,
sharing no interpreter lock with the client it watches (a burst of a few hundred client threads would
otherwise starve it for the whole of a short burst); samples are taken from the probe's entry to its exit,
and the first is in before the caller's work starts. A server is named by its process id, so only a server
on this host can be probed.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import multiprocessing
import os
import struct
import threading
import time

#: The name SGLang gives the shared-memory file of a server's load snapshots (``load_snapshot.shm_path_for``).
SNAPSHOT_FILE = "sglang_loads_*.shm"


@dataclasses.dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic() when the reading was taken
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


def during(samples: list[Sample], start: float, end: float) -> Overlap:
    """The counts sampled in [start, end]; zeros if none was taken there."""
    inside = [s.running for s in samples if start <= s.t <= end]
    return Overlap(len(inside), max(inside, default=0), min(inside, default=0))


def snapshot_file(pid: int) -> str | None:
    """The load-snapshot file that process ``pid`` or its descendants hold open (a server's scheduler writes
    it, its HTTP process reads it), or None; ``RuntimeError`` where they hold several (a process forked with
    another server's file open), since which one is theirs cannot be told."""
    import psutil

    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    found = set()
    for process in tree:
        try:
            files = process.open_files()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found |= {f.path for f in files if fnmatch.fnmatch(os.path.basename(f.path), SNAPSHOT_FILE)}
    if len(found) > 1:
        raise RuntimeError(f"process {pid} and its descendants hold {len(found)} load-snapshot files: "
                           f"{sorted(found)}")
    return found.pop() if found else None


def _reader(path: str):
    """SGLang's reader of the snapshot file at ``path``, sized by the DP ranks its header names."""
    from sglang.srt.managers import load_snapshot

    with open(path, "rb") as f:
        _, _, dp_size, _ = load_snapshot.HEADER_STRUCT.unpack(f.read(load_snapshot.HEADER_STRUCT.size))
    return load_snapshot.ShmLoadSnapshotReader(path, dp_size)


def reading(reader) -> Sample:
    """One sample from SGLang's snapshot ``reader``: the counts summed over its DP ranks; ``ValueError`` where
    no rank has published."""
    loads = reader.read_all()
    if not loads:
        raise ValueError("no snapshot in the file")
    return Sample(time.monotonic(), sum(x.num_running_reqs for x in loads), sum(x.num_waiting_reqs for x in loads))


def _poll(path: str, interval: float, conn) -> None:
    """The probe's process: reads the snapshot file until told to stop, handing over what it gathered on
    request."""
    samples, failures = [], 0
    reader = None
    while True:
        if conn.poll():
            order = conn.recv()
            conn.send((samples, failures))
            samples = []
            if order == "stop":
                break
        try:
            reader = reader or _reader(path)
            samples.append(reading(reader))
        except (OSError, ValueError, struct.error):  # gone, not yet written, or cut short
            failures += 1
        time.sleep(interval)
    if reader is not None:
        reader.close()
    conn.close()


class LoadProbe:
    """``with LoadProbe(server_pid) as probe: ...``: ``probe.samples`` grows every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.005, start_timeout: float = 60.0):
        path = snapshot_file(pid)
        if path is None:
            raise RuntimeError(f"process {pid} holds no load-snapshot file ({SNAPSHOT_FILE}): not an SGLang "
                               "server on this host")
        self.path, self.interval, self.start_timeout = path, interval, start_timeout
        self._samples: list[Sample] = []
        self._failures = 0
        self._lock = threading.Lock()
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_poll, args=(path, interval, child), daemon=True)
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
                raise RuntimeError(f"the load probe of {self.path} took no sample (its process "
                                   f"{'ended' if not self._process.is_alive() else f'waited {self.start_timeout:.0f} s'})")
            time.sleep(self.interval)
        return self

    def __exit__(self, *exc) -> None:
        self._collect("stop")
        self._process.join(timeout=30)
