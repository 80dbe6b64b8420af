"""``tools.loads``: running-request counts sampled from a server, summarized per request window."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
