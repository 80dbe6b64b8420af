"""``tools.loads``: running-request counts sampled from a server, summarized per request window."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from corun_sglang.tools import loads as loads_module
from corun_sglang.tools.loads import LoadProbe, Sample, during, parse


def test_an_answer_sums_its_dp_ranks():
    body = {"timestamp": "x", "loads": [{"num_running_reqs": 3, "num_waiting_reqs": 1},
                                        {"num_running_reqs": 5, "num_waiting_reqs": 0}]}
    assert parse(body, 2.0) == Sample(2.0, 8, 1)


def test_a_window_keeps_only_its_samples():
    samples = [Sample(t, r, 0) for t, r in [(0.0, 1), (1.0, 64), (2.0, 9), (3.0, 200)]]
    got = during(samples, 0.5, 2.0)
    assert (got.samples, got.observed_max, got.observed_min) == (2, 64, 9)
    assert during(samples, 5.0, 6.0).samples == 0
    assert during(samples, 1.0, 3.0).as_row(128) == {"intended": 128, "samples": 3, "observed_max": 200,
                                                     "observed_min": 9}


def test_the_probe_polls_a_server_and_counts_failures():
    answers = iter([json.dumps({"loads": [{"num_running_reqs": n, "num_waiting_reqs": 0}]}) for n in (4, 7)])

    class Loads(BaseHTTPRequestHandler):
        def do_GET(self):
            assert self.path == "/v1/loads?include=core"
            body = next(answers, None)
            self.send_response(200 if body else 503)
            self.end_headers()
            self.wfile.write((body or "busy").encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Loads)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        start = time.monotonic()
        with LoadProbe(f"http://127.0.0.1:{server.server_port}", interval=0.01) as probe:
            while probe.failures < 2:
                time.sleep(0.01)
        assert [s.running for s in probe.samples] == [4, 7]
        assert probe.during(start, time.monotonic()).observed_max == 7
    finally:
        server.shutdown()


_LOADS_SERVER = r"""
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Loads(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"loads": [{"num_running_reqs": 3, "num_waiting_reqs": 0}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Loads)
print(server.server_port, flush=True)
server.serve_forever()
"""


def _samples_while_the_client_is_busy(url, probe_factory, seconds=2.0, threads=32):
    """Samples a probe took while ``threads`` client threads kept the interpreter lock busy (a burst of
    requests whose replies are being parsed, in the small)."""
    stop = threading.Event()

    def spin():
        n = 0
        while not stop.is_set():
            n += 1

    with probe_factory(url) as probe:
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

    def __init__(self, url):
        import multiprocessing

        self._conn, child = multiprocessing.Pipe()
        self._thread = threading.Thread(target=loads_module._poll, args=(url, 0.005, child), daemon=True)
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


def test_the_probe_keeps_sampling_while_the_client_is_busy_and_a_polling_thread_would_not():
    import subprocess
    import sys

    server = subprocess.Popen([sys.executable, "-c", _LOADS_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        in_its_process = _samples_while_the_client_is_busy(url, LoadProbe)
        in_a_thread = _samples_while_the_client_is_busy(url, _ThreadProbe)
    finally:
        server.kill()
        server.wait()
    assert in_its_process >= 40, f"{in_its_process} samples in 2 s of a busy client"
    assert in_its_process > 3 * in_a_thread, (in_its_process, in_a_thread)
