"""``tools.loads``: running-request counts read from a server's load snapshots, summarized per request window.

The servers here are small processes that publish with SGLang's own ``ShmLoadSnapshotWriter``, as SGLang's
scheduler does, and answer ``/v1/loads`` from an HTTP loop that can be kept busy."""

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from corun_sglang.tools import loads as loads_module
from corun_sglang.tools.loads import LoadProbe, Sample, during, snapshot_file

#: A server in the small: a child process publishes ``running`` (read from stdin, one count a line) with SGLang's
#: writer at argv[1]; the parent answers ``/v1/loads`` from a one-threaded HTTP loop that a line ``block S``
#: holds for S seconds, as a burst being admitted held SGLang's. It prints its port, then ``ok`` after each line.
_SERVER = r"""
import json, multiprocessing, sys, threading, time
from http.server import BaseHTTPRequestHandler, HTTPServer

def publish(path, conn):
    from sglang.srt.managers.load_snapshot import LoadSnapshot, ShmLoadSnapshotWriter
    writer = ShmLoadSnapshotWriter(path, dp_size=1, dp_rank=0)
    conn.send("ready")
    while True:
        n = conn.recv()
        writer.write(LoadSnapshot(timestamp=time.time(), dp_rank=0, num_running_reqs=n, num_waiting_reqs=1))
        conn.send("ok")

if __name__ == "__main__":
    here, there = multiprocessing.Pipe()
    multiprocessing.get_context("fork").Process(target=publish, args=(sys.argv[1], there), daemon=True).start()
    assert here.recv() == "ready"
    state = {"running": 0, "busy_until": 0.0}

    class Loads(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(max(0.0, state["busy_until"] - time.monotonic()))
            body = json.dumps({"loads": [{"num_running_reqs": state["running"], "num_waiting_reqs": 1}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Loads)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_port, flush=True)
    for line in sys.stdin:
        word, value = line.split()
        if word == "block":
            state["busy_until"] = time.monotonic() + float(value)
        else:
            state["running"] = int(value)
            here.send(int(value))
            here.recv()
        print("ok", flush=True)
"""


class _Server:
    def __init__(self, folder):
        self.path = folder / "sglang_loads_test_0a1b2c3d.shm"
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(self.path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def tell(self, word: str, value) -> None:
        self.proc.stdin.write(f"{word} {value}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGKILL)  # its publisher too
        self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = _Server(tmp_path_factory.mktemp("loads"))
    yield s
    s.stop()


def test_a_reading_sums_the_dp_ranks_of_sglangs_snapshot_file(tmp_path):
    from sglang.srt.managers.load_snapshot import LoadSnapshot, ShmLoadSnapshotWriter

    path = str(tmp_path / "sglang_loads_dp2.shm")
    writers = [ShmLoadSnapshotWriter(path, dp_size=2, dp_rank=r) for r in (0, 1)]
    for rank, (running, waiting) in enumerate([(3, 1), (5, 0)]):
        writers[rank].write(LoadSnapshot(dp_rank=rank, num_running_reqs=running, num_waiting_reqs=waiting))
    reader = loads_module._reader(path)
    try:
        got = loads_module.reading(reader)
    finally:
        reader.close()
        for w in writers:
            w.close()
    assert (got.running, got.waiting) == (8, 1)


def test_a_window_keeps_only_its_samples():
    samples = [Sample(t, r, 0) for t, r in [(0.0, 1), (1.0, 64), (2.0, 9), (3.0, 200)]]
    got = during(samples, 0.5, 2.0)
    assert (got.samples, got.observed_max, got.observed_min) == (2, 64, 9)
    assert during(samples, 5.0, 6.0).samples == 0
    assert during(samples, 1.0, 3.0).as_row(128) == {"intended": 128, "samples": 3, "observed_max": 200,
                                                     "observed_min": 9}


def test_the_snapshot_file_is_found_in_the_servers_process_tree_and_nowhere_else(server):
    # the writer is a child of the server's process, as SGLang's scheduler is of its HTTP process
    assert snapshot_file(server.proc.pid) == str(server.path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert snapshot_file(other.pid) is None
        with pytest.raises(RuntimeError, match="holds no load-snapshot file"):
            LoadProbe(other.pid)
    finally:
        other.kill()
        other.wait()


def test_a_process_tree_holding_two_snapshot_files_is_refused_not_guessed(tmp_path):
    """A process forked while another server's file was open holds both: neither may be read as its own."""
    files = [tmp_path / f"sglang_loads_{name}.shm" for name in ("mine", "inherited")]
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; fs = [open(p, 'w') for p in sys.argv[1:]]; "
                               "print(flush=True); time.sleep(60)", *map(str, files)], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        with pytest.raises(RuntimeError, match="hold 2 load-snapshot files"):
            snapshot_file(holder.pid)
    finally:
        holder.kill()
        holder.wait()


def test_the_probe_reads_what_sglangs_writer_published(server):
    start = time.monotonic()
    with LoadProbe(server.proc.pid, interval=0.005) as probe:
        for n in (4, 7, 0):
            server.tell("running", n)
            time.sleep(0.05)
    end = time.monotonic()
    seen = [s.running for s in probe.samples]
    assert {4, 7} <= set(seen) and seen[-1] == 0
    assert seen.index(4) < seen.index(7)
    assert {s.waiting for s in probe.samples if s.running} == {1}
    assert probe.during(start, end).observed_max == 7 and probe.failures == 0


def test_the_probe_reads_a_server_whose_http_loop_is_busy_and_v1_loads_would_not(server):
    """The GPU's finding in the small: while a burst held SGLang's HTTP loop, its scheduler ran the burst's
    first requests to the end and ``/v1/loads`` answered nothing. The probe reads the scheduler's file; the
    negative control polls ``/v1/loads`` over the same window."""
    polled: list[Sample] = []
    stop = threading.Event()

    def poll_http():
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                (load,) = client.get(server.url + "/v1/loads").json()["loads"]
                polled.append(Sample(time.monotonic(), load["num_running_reqs"], load["num_waiting_reqs"]))
                time.sleep(0.005)

    with LoadProbe(server.proc.pid) as probe:
        poller = threading.Thread(target=poll_http)
        poller.start()
        time.sleep(0.1)
        server.tell("block", 1.0)
        time.sleep(0.05)  # the poller's next request is now waiting on the held loop
        start = time.monotonic()
        server.tell("running", 26)
        time.sleep(0.3)
        server.tell("running", 0)
        end = time.monotonic()
        time.sleep(0.1)
        stop.set()
        poller.join()
        got = probe.during(start, end)
    assert got.observed_max == 26 and got.samples >= 20, got
    control = during(polled, start, end)
    assert control.observed_max < 26, control  # the HTTP loop never answered while the 26 ran


def _samples_while_the_client_is_busy(pid, probe_factory, seconds=2.0, threads=32):
    """Samples a probe took while ``threads`` client threads kept the interpreter lock busy (a burst of
    requests whose replies are being parsed, in the small)."""
    stop = threading.Event()

    def spin():
        n = 0
        while not stop.is_set():
            n += 1

    with probe_factory(pid) as probe:
        spinners = [threading.Thread(target=spin) for _ in range(threads)]
        start = time.monotonic()
        for t in spinners:
            t.start()
        time.sleep(seconds)
        stop.set()
        end = time.monotonic()
        for t in spinners:
            t.join()
        return probe.during(start, end).samples


class _ThreadProbe:
    """The negative control: the same poller, run as a thread of the busy client."""

    def __init__(self, pid):
        import multiprocessing

        self._conn, child = multiprocessing.Pipe()
        self._thread = threading.Thread(target=loads_module._poll, args=(snapshot_file(pid), 0.005, child),
                                        daemon=True)
        self._samples = []

    def __enter__(self):
        self._thread.start()
        return self

    def during(self, start, end):
        self._conn.send("get")
        self._samples += self._conn.recv()[0]
        return during(self._samples, start, end)

    def __exit__(self, *exc):
        self._conn.send("stop")
        self._conn.recv()
        self._thread.join()


def test_the_probe_keeps_sampling_while_the_client_is_busy_and_a_polling_thread_would_not(server):
    server.tell("running", 3)
    in_its_process = _samples_while_the_client_is_busy(server.proc.pid, LoadProbe)
    in_a_thread = _samples_while_the_client_is_busy(server.proc.pid, _ThreadProbe)
    assert in_its_process >= 40, f"{in_its_process} samples in 2 s of a busy client"
    assert in_its_process > 3 * in_a_thread, (in_its_process, in_a_thread)
