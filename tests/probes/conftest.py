"""Shared by the ``probes`` tests: a stand-in for SGLang's ``/generate`` that streams."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _Streaming(BaseHTTPRequestHandler):
    events: list
    aborted: threading.Event
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _log(self, tag, what):
        with self.lock:
            self.events.append((tag, what, time.monotonic()))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/abort_request":
            self._log("abort", "arrived" if body == {"abort_all": True} else f"other: {body}")
            self.aborted.set()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        tag = "corunner" if body.get("stream") else "needle"
        self._log(tag, "arrived")
        if body.get("fail"):
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        if tag == "corunner":
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            time.sleep(0.05 * len(body["input_ids"]) / 48)  # admission takes a while
            self._log(tag, "first chunk")
            self.wfile.write(b'data: {"output_ids": [1]}\n\n')
            self.wfile.flush()
            self.aborted.wait(body.get("hold", 0.3))
            self.wfile.write(b"data: [DONE]\n\n")
            self._log(tag, "ended")
            return
        steps = body.get("sampling_params", {}).get("max_new_tokens", 3)
        reply = json.dumps({"meta_info": {"output_token_logprobs": [[-0.25, 7, None]] * steps}}).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


class _Listening(ThreadingHTTPServer):
    request_queue_size = 512  # a round's co-runners connect at once, as to SGLang's server (backlog 2048)


@pytest.fixture
def streaming_generate():
    """A stand-in ``/generate``: a streamed body streams one event once admitted (after a delay that grows
    with its prompt, 50 ms at 48 tokens), then ends ``hold`` s later (0.3 unless the body gives it) or once
    ``/abort_request`` was called; a body with ``"fail": true`` is answered 500; any other gets a reply of
    its ``max_new_tokens`` (3 unless given) output steps, each token 7 at logprob -0.25. Yields its URL and
    its events, ``(corunner | needle | abort, arrived | first chunk | ended, monotonic time)``."""
    _Streaming.events = []
    _Streaming.aborted = threading.Event()
    server = _Listening(("127.0.0.1", 0), _Streaming)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Streaming.events
    server.shutdown()
