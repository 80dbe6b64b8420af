"""``bench/prefill_history.py``: its prompts and orders, and its three phases run against a stand-in server whose
outputs follow the prompt alone, one whose outputs also follow what it served before, and one that dies."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import prefill_history as ph


def test_lengths_and_orders_are_a_function_of_the_seed():
    sizes = ph.lengths(48, seed=0)
    assert sizes == ph.lengths(48, seed=0) and min(sizes) >= 4 and max(sizes) <= 2000
    assert min(sizes) < 64 and max(sizes) > 512  # spread over the graph's captured counts
    got = ph.orders(5, 3, seed=1)
    assert got[0] == [0, 1, 2, 3, 4] and all(sorted(o) == got[0] for o in got) and got == ph.orders(5, 3, seed=1)


def test_the_bursts_send_only_tokens_of_the_models_vocabulary():
    bursts = ph.crowds(2, 20, seed=1, vocab=500)
    assert [len(b) for b in bursts] == [20, 20] and all(16 <= len(p) <= 1024 for b in bursts for p in b)
    assert max(t for b in bursts for p in b for t in p) < 500 and bursts == ph.crowds(2, 20, seed=1, vocab=500)


def _server(kind: str):
    """A stand-in ``/generate``: ``alone`` answers from the prompt; ``history`` also from how many requests it
    served; ``dies`` answers 500 to every request of a burst (more than one in flight)."""
    served, running, lock = [0], [0], threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                served[0] += 1
                running[0] += 1
                salt = served[0] // 60 if kind == "history" else 0
            try:
                if kind == "dies":
                    time.sleep(0.05)  # long enough for a burst to arrive
                    if running[0] > 1:
                        raise RuntimeError
                n = body["sampling_params"]["max_new_tokens"]
                key = hash((tuple(body["input_ids"]), salt))
                reply = {"output_ids": [(key + i) % 1000 for i in range(n)], "meta_info": {
                    "output_token_logprobs": [[-((key + i) % 97) / 8, (key + i) % 1000, None] for i in range(n)],
                    "input_token_logprobs": [[None, t, None] for t in body["input_ids"]],
                    "finish_reason": {"type": "length"}}}
                data, status = json.dumps(reply).encode(), 200
            except RuntimeError:
                data, status = b"{}", 500
            finally:
                with lock:
                    running[0] -= 1
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 64  # a burst connects at once

    httpd = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.mark.parametrize("kind", ["alone", "history", "dies"])
def test_the_phases_find_a_history_and_a_crash_and_nothing_on_a_server_of_the_prompt_alone(kind):
    httpd = _server(kind)
    try:
        prompts = [[k + 1] * n for k, n in enumerate(ph.lengths(12, seed=0))]
        got = ph.run_arm(f"http://127.0.0.1:{httpd.server_address[1]}", prompts, ph.orders(12, 3, seed=0),
                         ph.crowds(2, 20, seed=1, vocab=1000), new_tokens=4, alive=lambda: True)
    finally:
        httpd.shutdown()
    summary = ph.summarize_arm(got)
    if kind == "alone":
        assert summary["differ_in_orders"] == [0, 0] and summary["differ_after_bursts"] == 0
        assert summary["bursts"] == 2 and summary["error"] is None and len(got["digests"]) == 12
    elif kind == "history":  # 36 requests alone, then 40 in bursts: the later outputs follow the count served
        assert summary["differ_after_bursts"] == 12 and summary["error"] is None
    else:
        assert summary["bursts"] == 0 and summary["differ_after_bursts"] is None
        assert summary["error"].startswith("HTTPStatusError")
