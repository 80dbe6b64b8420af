"""``verify``: the audit logic against small local OpenAI-compatible servers.

Three local servers stand in for deployments: one whose completions depend
only on (prompt, seed) (must pass), one whose logprobs shift with the number
of requests in flight, as batch-dependent kernels do (must fail), and one that
ignores ``seed`` (must fail).
"""

import hashlib
import json
import random
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from corun_sglang import verify


def _completion(prompt: str, seed: int, max_tokens: int, shift: float) -> dict:
    rnd = random.Random(hashlib.sha256(f"{prompt}|{seed}".encode()).hexdigest())
    tokens = [f" w{rnd.randrange(1000)}" for _ in range(max_tokens)]
    logprobs = [-rnd.random() * 5 + shift for _ in range(max_tokens)]
    return {
        "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{
            "index": 0, "text": "".join(tokens), "finish_reason": "length",
            "logprobs": {"tokens": tokens, "token_logprobs": logprobs,
                         "text_offset": list(range(max_tokens)), "top_logprobs": None},
        }],
        "usage": {"prompt_tokens": 1, "completion_tokens": max_tokens, "total_tokens": max_tokens + 1},
    }


def _server(mode: str):
    inflight = {"n": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                inflight["n"] += 1
            time.sleep(0.05)  # let concurrent requests overlap, as in a batch
            with lock:
                busy = inflight["n"]
            seed = body.get("seed")
            if mode == "ignores-seed":
                seed = random.random()
            shift = 1e-6 * (busy - 1) if mode == "batch-dependent" else 0.0
            reply = json.dumps(_completion(body["prompt"], seed, body["max_tokens"], shift)).encode()
            with lock:
                inflight["n"] -= 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def serve():
    started = []

    def start(mode):
        server = _server(mode)
        started.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in started:
        server.shutdown()


def test_prompts_are_reproducible_and_varied():
    a = verify.prompts(10, seed=3)
    assert a == verify.prompts(10, seed=3) and a != verify.prompts(10, seed=4)
    assert len({len(p.split()) for p in a}) > 5


def test_invariant_server_passes(serve):
    url = serve("invariant")
    send = verify.openai_sender(url, "m", max_tokens=8, temperature=0.6)
    reports = verify.run(send, verify.prompts(6), batch=12)
    assert all(r.ok for r in reports)
    assert "no divergence" in verify.render(reports)


@pytest.mark.parametrize("mode", ["batch-dependent", "ignores-seed"])
def test_nondeterministic_servers_are_flagged_with_the_step(serve, mode):
    url = serve(mode)
    send = verify.openai_sender(url, "m", max_tokens=8, temperature=0.6)
    reports = verify.run(send, verify.prompts(6), batch=12)
    assert not all(r.ok for r in reports)
    text = verify.render(reports)
    assert "DIVERGES" in text and "at step 0" in text


@pytest.mark.parametrize("mode,code", [("invariant", 0), ("batch-dependent", 1)])
def test_cli_exit_code(serve, mode, code):
    url = serve(mode)
    exe = Path(sys.executable).with_name("corun-sglang")
    out = subprocess.run(
        [str(exe), "verify", "--base-url", url, "--model", "m", "--prompts", "4", "--batch", "8",
         "--max-tokens", "6"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == code, out.stdout + out.stderr
    assert "4 prompts, 8 comparisons" in out.stdout


def test_cli_reports_an_unreachable_server():
    exe = Path(sys.executable).with_name("corun-sglang")
    out = subprocess.run(
        [str(exe), "verify", "--base-url", "http://127.0.0.1:9", "--model", "m", "--prompts", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 2 and "could not complete" in out.stderr
