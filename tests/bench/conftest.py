"""Shared by the ``bench`` tests: stand-ins for an SGLang server (a streaming ``/generate`` endpoint,
``launch.Server``), finished client records and benchmark rows."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import client


DECODE_LINE = ("[{}] Decode batch, #running-req: {}, #token: 20, token usage: 0.00, cuda graph: True, "
               "gen throughput (token/s): {:.2f}, #queue-req: 0\n")


PREFILL_LINE = ("[{}] Prefill batch, #new-seq: 1, #new-token: {}, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 1.00\n")


def _streaming_server(log=None, capacity=None, cumulative=False, info=None, cache=False):
    """A stand-in SGLang: /generate streams a token every 10 ms, its id a function of the prompt and
    position, one new id per chunk (``cumulative``: every id so far), each chunk's ``meta_info`` with the
    prompt's tokens and those a prefix cache served (``cache``: SGLang's kind, the longest prefix the prompt
    shares with a prompt and its output served since the last flush, all but its last token at most; else
    none); with ``log``, it appends an SGLang prefill-batch line and two decode-batch lines per request; with
    ``capacity``, at most that many stream at once, the others wait their turn. /start_profile writes an
    empty trace a moment later; /flush_cache answers 400 while a request streams, as SGLang does, else 200
    and empties the cache; GET /server_info answers ``info`` (404 without)."""
    slots = threading.BoundedSemaphore(capacity or 1 << 30)
    kept, lock = [], threading.Lock()  # the prefix cache: prompt + output of each request served

    def hit(prompt):
        if not cache:
            return 0
        with lock:
            shared = [next((i for i, (a, b) in enumerate(zip(seq, prompt)) if a != b), min(len(seq), len(prompt)))
                      for seq in kept]
        return min(max(shared, default=0), len(prompt) - 1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            data = json.dumps(info).encode() if self.path == "/server_info" and info is not None else b""
            self.send_response(200 if data else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/flush_cache":
                busy = self.server.streaming > 0
                self.server.flushes.append(not busy)
                if not busy:
                    with lock:
                        kept.clear()
                self.send_response(400 if busy else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.loads(raw)
            if self.path == "/start_profile":
                self.server.profiles.append(body)
                out = Path(body["output_dir"]) / f"{body['profile_id']}-TP-0.trace.json"
                threading.Timer(0.3, out.write_text, [json.dumps({"traceEvents": []})]).start()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.server.received.append(body["input_ids"])
            n = body["sampling_params"]["max_new_tokens"]
            if log is not None:  # each request prefilled alone
                with open(log, "a") as f:
                    f.write(PREFILL_LINE.format(time.strftime("%Y-%m-%d %H:%M:%S"), len(body["input_ids"])))
            with slots:
                self.server.streaming += 1
                try:
                    self._stream(n, body["input_ids"])
                finally:
                    self.server.streaming -= 1

        def _stream(self, n, prompt):
            base, cached = sum(prompt), hit(prompt)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(text):
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            try:
                for k in range(1, n + 1):
                    time.sleep(0.01)
                    ids = [(base + j) % 1000 for j in range(1 if cumulative else k, k + 1)]
                    meta = {"completion_tokens": k, "prompt_tokens": len(prompt), "cached_tokens": cached}
                    chunk("data: " + json.dumps({"output_ids": ids, "meta_info": meta}) + "\n\n")
                if log is not None:  # logged while the request runs, as SGLang does
                    now = time.strftime("%Y-%m-%d %H:%M:%S")
                    with open(log, "a") as f:
                        f.write(DECODE_LINE.format(now, 1, 1.0) + DECODE_LINE.format(now, 2, 200.0))
                with lock:  # cached before the reply ends, so the client's next turn always finds it
                    kept.append(list(prompt) + [(base + j) % 1000 for j in range(1, n + 1)])
                chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.server.finished += 1
            except OSError:  # the client dropped the request
                self.server.dropped += 1

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.received = []  # the prompts of the requests served, in arrival order
    server.profiles, server.finished, server.dropped = [], 0, 0
    server.flushes, server.streaming = [], 0  # each /flush_cache: whether it flushed
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class StandIn:
    """Stands in for ``corun_sglang.probes.launch.Server``: a local streaming endpoint appending to its log, as
    the server does; records its lifetime."""

    alive: list = []
    started: list = []
    instances: list = []

    def __init__(self, model_path, args, log, timeout=600, static_gb=None, env=None):
        self.env = env
        self.log = Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as f:
            f.write("server started\n")
        # /server_info: a --corun server's contract says what calibration served (off, records given, or a
        # cached tier)
        off = "--corun-calibrate" in args and args[args.index("--corun-calibrate") + 1] == "off"
        given = "--corun-decode-tiers" in args or "--corun-prefill-pack" in args
        calibration = ({"source": "off"} if off else {"source": "given"} if given
                       else {"source": "cached", "tiers": [64], "pack": None})
        # a prefix cache where the arm serves one: SGLang's own, or --corun-prefix-cache (plain --corun has none)
        self.httpd = _streaming_server(self.log, info={"corun_contract": {"calibration": calibration}}
                                       if "--corun" in args else {},
                                       cache="--corun" not in args or "--corun-prefix-cache" in args)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.command = ["server", *args]
        assert static_gb == 38.0 and "--max-total-tokens" in args
        StandIn.started.append(args[0] if args[:1] == ["--corun"] else "other")
        StandIn.instances.append(self)
        StandIn.alive.append(self)
        assert len(StandIn.alive) == 1 or not self.one_at_a_time

    def stop(self):
        self.httpd.shutdown()
        StandIn.alive.remove(self)


def _rec(start, chunks, end):
    """A finished request: ``chunks`` are (arrival, output tokens so far)."""
    return client.Record(start=start, first=chunks[0][0], chunks=[t for t, _ in chunks],
                         chunk_tokens=[n for _, n in chunks], end=end, output_tokens=chunks[-1][1])


@pytest.fixture
def streaming_server():
    """Starts a stand-in SGLang ``/generate`` endpoint (``_streaming_server``'s options); the caller shuts it down."""
    return _streaming_server


@pytest.fixture
def stand_in_server(monkeypatch):
    """``corun_sglang.probes.launch.Server`` replaced by ``StandIn`` (side by side unless a test sets
    ``one_at_a_time``), its records empty; the class, to read them."""
    import corun_sglang.probes.launch

    monkeypatch.setattr(corun_sglang.probes.launch, "Server", StandIn)
    monkeypatch.setattr(StandIn, "one_at_a_time", False, raising=False)
    for name in ("alive", "started", "instances"):
        monkeypatch.setattr(StandIn, name, [])
    return StandIn


@pytest.fixture
def finished_request():
    """Builds a finished ``client.Record`` from its start, its chunks' (arrival, tokens so far) and its end."""
    return _rec


def _row(arm, rep, workload, tput, tokens=1000):
    return {"shape": "qwen3-8b", "workload": workload, "concurrency": 256, "arm": arm, "rep": rep,
            "output_throughput": tput, "output_tokens": tokens, "duration_s": tokens / tput,
            "median_tpot_ms": 10.0, "median_ttft_ms": 100.0, "failed": 0}


@pytest.fixture
def bench_row():
    """Builds a benchmark row of qwen3-8b at concurrency 256: arm, repetition, workload, output tok/s, tokens."""
    return _row
