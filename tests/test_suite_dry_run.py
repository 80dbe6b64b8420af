"""``tests/gpu/test_suite.py`` on the CPU: every scenario's plumbing, and the prefix-cache evidence (scenario s and
the cache checks of the other scenarios), run whole against stand-in servers, their rows recounted by
``scripts/determinism_report.py``.

A stand-in answers ``/generate``, ``/flush_cache``, ``/server_info``, ``/v1/chat/completions`` and
``/v1/completions`` as SGLang does, and publishes its running count in shared memory with SGLang's writer, as
SGLang's scheduler does, over a prefix cache of one of these kinds (``StandIn``):

- ``rules``: the hits ``--corun-prefix-cache`` serves (``prefix_cache``: grid chunks, and a stored tail for a
  prompt whose first L - 1 tokens are the same), least recently used evicted past its pool; outputs a function
  of the request alone: what the GPU runs must show;
- ``sglang``: SGLang's own hits (the longest cached prefix of any prompt and output), outputs that change with
  the hit: what stock SGLang showed on GPUs (docs/results/prefix_grid.md);
- ``drift`` (the rules' hits, outputs that change with the hit), ``any-hit`` (SGLang's hits, outputs that do
  not), ``no-flush`` (the rules, a flush that empties nothing): broken caches the scenario must catch;
- ``none``: no prefix cache, outputs a function of the request alone (a ``--corun`` server without one);
  ``batch``: no cache, outputs that change with the number of requests running (a batch-variant server);
  ``bi``: as ``none``, but a seeded request with min-p takes the server down, as it does SGLang's
  batch-invariant mode; ``no-grammar``: as ``none``, but blind to grammars (free text where one is sent);
  ``no-think-end``: as ``none``, but a request that asks for reasoning under a grammar never closes its think tag
  (free text to its end, as a model that never writes the think-end sequence gives).

Every stand-in also streams (cumulative events, as SGLang does by default), ends a request at its first stop
token id, aborts one by its ``rid`` with what it decoded so far, makes a request's outputs follow the features it
asks for (penalties, a minimum, a bias, a grammar), never emits a token biased by -100, returns top-k logprobs
(under a grammar the masked ones tie at -inf, which its replies carry as null: they are written with orjson, as
SGLang writes them) and chosen ids' logprobs, answers a grammar with a text it accepts and then EOS (in the
character-level tokenizer of the checkpoint folder, ``_tokenizer``), behind free characters and ``</think>`` where
the request asks for reasoning (``require_reasoning``, as SGLang's reasoning wrapper applies a grammar once the
request's own tokens close its think tag), and answers the official OpenAI client with logprobs, token ids, forced
tool calls and echoed prompts: scenarios a to t but j run whole on it.

No GPU and no model: this proves the scenario's plumbing (what it sends, in which cache state, what it predicts
and counts), not SGLang's bits.
"""

import gc
import hashlib
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from corun_sglang.core import prefix_cache as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
import test_suite as suite  # noqa: E402  (tests/gpu is no package: its modules import each other by name)
import test_suite_surface as surface  # noqa: E402

spec = importlib.util.spec_from_file_location("determinism_report", ROOT / "scripts" / "determinism_report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

POOL = 40_000
VOCAB = 32_000
EOS = 2


def _h(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


#: the kinds without a prefix cache
UNCACHED = ("none", "batch", "bi", "no-grammar", "no-think-end")


class Cache:
    """A prefix cache of ``kind``: entries (token tuples, LRU-stamped) holding at most ``pool`` tokens."""

    def __init__(self, kind: str, pool: int):
        self.kind, self.pool = kind, pool
        self.entries: dict[tuple, list] = {}  # tokens -> [stamp, KV tokens it holds, kind: "chunk" | "tail" | "seq"]
        self.clock = 0

    def _touch(self, key):
        self.clock += 1
        self.entries[key][0] = self.clock

    def flush(self) -> None:
        if self.kind != "no-flush":
            self.entries.clear()

    def hit(self, tokens: tuple, cap: int) -> int:
        if self.kind in UNCACHED:
            return 0
        if self.kind in ("sglang", "any-hit"):
            best = 0
            for key in self.entries:
                common = next((i for i, (a, b) in enumerate(zip(key, tokens)) if a != b), min(len(key), len(tokens)))
                if common > best:
                    best, used = common, key
            if best:
                self._touch(used)
            return min(best, cap)
        chunks = 0
        while (chunks + 1) * pc.GRID <= len(tokens) and tokens[:(chunks + 1) * pc.GRID] in self.entries:
            chunks += 1
            self._touch(tokens[:chunks * pc.GRID])
        hit = pc.grid_hit(chunks * pc.GRID, len(tokens), cap)
        tail = tokens[:len(tokens) - 1]
        if pc.tail_usable(len(tokens), hit, cap) and self.entries.get(tail, [0, 0, ""])[2] == "tail":
            self._touch(tail)
            return len(tokens) - 1
        return hit

    def keep(self, tokens: tuple, output: tuple) -> None:
        """What a finished request leaves in the cache."""
        if self.kind in UNCACHED:
            return
        if self.kind in ("sglang", "any-hit"):
            self._add(tokens + output, len(tokens) + len(output), "seq")
        else:
            edge = pc.frontier(len(tokens))
            for end in range(pc.GRID, edge + 1, pc.GRID):
                self._add(tokens[:end], pc.GRID, "chunk")
            if len(tokens) - 1 > edge:
                self._add(tokens[:len(tokens) - 1], len(tokens) - 1 - edge, "tail")
        while sum(e[1] for e in self.entries.values()) > self.pool:
            del self.entries[min(self.entries, key=lambda k: self.entries[k][0])]

    def _add(self, key, size, kind):
        self.entries.setdefault(key, [0, size, kind])
        self._touch(key)


#: Sampling parameters that shape every request's decoding; any other (penalties, minimum, bias, grammar) is a
#: feature, and a request's outputs follow the features it asks for.
BASIC = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "ignore_eos", "sampling_seed", "n",
         "stop_token_ids"}


def _features(params: dict) -> tuple:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in params.items() if k not in BASIC))


def _top(digest: int, salt, step: int, k: int, grammar: bool) -> list:
    """A step's top ``k`` ``[logprob, id, text]`` entries, descending; under a grammar all but the first two are
    masked: they tie at -inf, which the reply carries as null (``_json``)."""
    values = sorted((-(_h(digest, salt, step, j, "top") % 4096) / 1024 for j in range(k)), reverse=True)
    if grammar:
        values = values[:2] + [float("-inf")] * (k - 2)
    return [[v, _h(digest, salt, step, j, "id") % VOCAB, None] for j, v in enumerate(values)]


def _char_id(c: str) -> int:
    """The stand-in tokenizer's id of a printable ASCII character (``_tokenizer``)."""
    return 3 + ord(c) - 32


def _tokenizer(folder: Path) -> None:
    """A character-level tokenizer (ids 3-97 the printable ASCII characters, 2 the EOS) in ``folder``, for the
    scenarios that read text: what a stand-in's grammar outputs decode with."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": EOS, **{chr(c): _char_id(chr(c)) for c in range(32, 127)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}))


def _grammar_text(params: dict, pick: int) -> str | None:
    """A text the request's grammar accepts, drawn by ``pick``; None without a grammar. It knows the grammars
    scenarios q and t send (``test_suite_surface``; t's structural tag as a tool call) and answers any other with what a permissive one accepts."""
    colors = ("red", "green", "blue")
    if params.get("structural_tag") == surface.TOOL_TAG:
        return "<tool>" + json.dumps({"name": f"n{pick % 997}", "age": pick % 121, "tags": [f"t{pick % 7}"]}) + "</tool>"
    if params.get("json_schema"):
        properties = json.loads(params["json_schema"]).get("properties", {})
        if "age" in properties:
            return json.dumps({"name": f"n{pick % 997}", "age": pick % 121, "tags": [f"t{pick % 7}"]})
        return json.dumps({name: pick % 100 for name in properties})
    if params.get("regex"):
        if params["regex"] == surface.COLORS:
            return " ".join(colors[(pick >> i) % 3] for i in range(4 + pick % 10)) + "."
        return "".join(chr(97 + (pick >> i) % 26) for i in range(5 + pick % 16))
    if params.get("ebnf"):
        if params["ebnf"] == surface.TUPLE_EBNF:
            return "(" + ",".join(str(1 + (pick >> (7 * i)) % 99) for i in range(3 + pick % 2)) + ")"
        return ("yes", "no")[pick % 2]
    return None


#: what closes a request's reasoning under ``--reasoning-parser qwen3``, as the stand-in writes it
THINK_END = "</think>"


def _thought(pick: int) -> str:
    """Free characters a request thinks before it closes the think tag: 3 to 18 of letters and spaces."""
    return "".join("abcdefghijklmnopqrstuvwxyz "[_h(pick, i) % 27] for i in range(3 + pick % 16))


def _serve(kind: str, pool: int, snapshots: str, ready) -> None:
    """A stand-in SGLang server over a ``Cache`` of ``kind``, in a process of its own (so the test's client threads
    and load probe do not wait on its work): it publishes its running count as SGLang's scheduler does (SGLang's
    own writer, at ``snapshots``), sends its port through ``ready`` and serves until killed."""
    from sglang.srt.managers.load_snapshot import LoadSnapshot, ShmLoadSnapshotWriter

    gc.freeze()  # the test session's heap, inherited by the fork, stays out of this process's collections
    cache, lock = Cache(kind, pool), threading.Lock()
    running, arrived, aborted = [0], [0.0], set()
    writer = ShmLoadSnapshotWriter(snapshots, dp_size=1, dp_rank=0)

    def publish() -> None:  # under ``lock``
        writer.write(LoadSnapshot(timestamp=time.time(), dp_rank=0, num_running_reqs=running[0]))

    def generate(body: dict) -> list[dict] | dict:
        return counted(batch, body)

    def counted(reply, body: dict):
        """``reply(body)`` as a running request: it runs from its arrival, and a burst of arrivals starts decoding
        together, as one batch."""
        with lock:
            arrived[0] = time.monotonic()
            running[0] += 1
            publish()
        try:
            # until a quiet spell without an arrival: 0.2 s for a request alone, 1 s once a crowd is forming (a
            # loaded client can take that long between two of a crowd's sends). Each thread sleeps to its deadline
            # rather than polling, so a waiting crowd leaves the GIL to the arrivals.
            while (left := (1.0 if running[0] > 1 else 0.2) - (time.monotonic() - arrived[0])) > 0:
                time.sleep(left)
            return reply(body)
        finally:
            with lock:
                running[0] -= 1
                publish()

    def openai(route: str, body: dict) -> dict:
        """``/v1/chat/completions`` or ``/v1/completions`` as SGLang answers the official client: logprobs with their
        top entries (token texts), ``token_ids`` when asked, a forced tool's call, echoed prompt logprobs; the
        output a function of the request (and, on ``batch``, of the requests running)."""
        chat = route.endswith("chat/completions")
        salt = running[0] if kind == "batch" else 0
        asked = {k: v for k, v in body.items() if k not in ("stream", "model")}
        seed = body.get("seed") if body.get("temperature") else None
        digest = _h(json.dumps(asked, sort_keys=True), seed)
        steps = body["max_tokens"]
        time.sleep(0.015 * steps)  # decoding: long enough to outlast the arrival of a crowd of client threads
        ids = [_h(digest, i, salt) % VOCAB for i in range(steps)]
        lps = [-(_h(digest, i, salt, "lp") % 4096) / 1024 for i in range(steps)]
        k = body.get("top_logprobs") if chat else body.get("logprobs")

        def tops(i):
            return sorted(((f"t{_h(digest, i, j, salt) % VOCAB}", -(_h(digest, i, j, salt, "top") % 4096) / 1024)
                           for j in range(k or 0)), key=lambda t: -t[1])

        usage = {"prompt_tokens": 0, "completion_tokens": steps, "total_tokens": steps}
        if chat:
            forced = (body.get("tool_choice") or {}).get("function", {}).get("name")
            message = {"role": "assistant", "content": None if forced else " ".join(f"t{t}" for t in ids)}
            if forced:
                message["tool_calls"] = [{"id": f"call_{digest % 1000}", "type": "function", "function": {
                    "name": forced, "arguments": json.dumps({"city": f"c{ids[0]}"})}}]
            content = [{"token": f"t{t}", "logprob": lp, "bytes": None,
                        "top_logprobs": [{"token": x, "logprob": v, "bytes": None} for x, v in tops(i)]}
                       for i, (t, lp) in enumerate(zip(ids, lps))]
            choice = {"index": 0, "message": message, "logprobs": {"content": content},
                      "finish_reason": "tool_calls" if forced else "length"}
        else:
            prompt = body["prompt"].split()
            usage = {**usage, "prompt_tokens": len(prompt), "total_tokens": len(prompt) + steps}
            prompt_lps = [None] + [-(_h(digest, w, p, "prompt") % 4096) / 1024 for p, w in enumerate(prompt[1:])]
            tokens = prompt + [f"t{t}" for t in ids]
            choice = {"index": 0, "text": " ".join(tokens), "finish_reason": "length", "logprobs": {
                "tokens": tokens, "token_logprobs": prompt_lps + lps, "text_offset": list(range(len(tokens))),
                "top_logprobs": [None] + [dict(tops(-p)) for p in range(1, len(prompt))] + [dict(tops(i))
                                                                                              for i in range(steps)]}}
        if body.get("return_token_ids"):  # the client sends its extra_body's fields in the body
            choice["token_ids"] = ids
        return {"id": f"x{digest}", "object": "chat.completion" if chat else "text_completion", "created": 0,
                "model": "default", "choices": [choice], "usage": usage}

    def batch(body: dict) -> list[dict] | dict:
        params = body["sampling_params"]
        if kind == "bi" and params.get("min_p") and params.get("sampling_seed") is not None:
            os._exit(1)  # SGLang's batch-invariant sampler asserts on min-p with a seed, and its scheduler dies
        if kind == "crash" and running[0] > 1:
            os._exit(3)  # a server that dies under a burst, as a GPU fault takes SGLang's down
        tokens = tuple(body["input_ids"])
        start = body.get("logprob_start_len")
        cap = len(tokens) - 1 if start is None or start < 0 else min(len(tokens) - 1, start)
        n = params.get("n", 1)
        if n > 1:  # SGLang prefills a group's prompt in a request of its own, then sends the samples
            one(tokens, {**params, "max_new_tokens": 0}, cap, None, 0)
        rid = body.get("rid")
        top_k = {"k": body.get("top_logprobs_num"), "ids": body.get("token_ids_logprob")}
        thinking = bool(body.get("require_reasoning"))
        if n > 1:
            return [one(tokens, params, cap, start, i, rid, top_k, thinking) for i in range(n)]
        return one(tokens, params, cap, start, 0, rid, top_k, thinking)

    def one(tokens, params, cap, start, sample, rid=None, top_k=None, thinking=False):
        top_k = top_k or {}
        with lock:
            hit = cache.hit(tokens, cap)
        steps, done, finish = params["max_new_tokens"], 0, {"type": "length"}
        batch_salt = running[0] if kind == "batch" else 0  # a batch-variant server: bits follow the batch
        for done in range(steps + 1):  # a step takes longer the more requests run, as a batch on a GPU does
            if rid is not None and rid in aborted and done:
                finish = {"type": "abort"}
                break
            time.sleep(0.001 * (1 + running[0] / 8))
        salt = hit if kind in ("sglang", "drift") else batch_salt
        seed = params.get("sampling_seed") if params.get("temperature") else None
        digest = hash((tokens, _features(params)))
        banned = {int(t) for t, bias in (params.get("logit_bias") or {}).items() if bias <= -100}
        out = [_h(digest, seed, sample, i, salt) % VOCAB for i in range(steps)]
        out = [t if t not in banned else (t + 1 + max(banned)) % VOCAB for t in out]
        text = None if kind == "no-grammar" else _grammar_text(params, _h(digest, seed, sample, salt, "grammar"))
        if kind == "no-grammar" and any(params.get(g) for g in ("regex", "json_schema", "ebnf")):
            out = [_char_id("free text, as if no grammar were sent. "[i % 39]) for i in range(steps)]
        # a grammar behind the request's own reasoning: free characters, unmasked, until they close the think tag
        # (never, on ``no-think-end``), then the grammar's text
        lead = _thought(_h(digest, seed, sample, salt, "think")) if text is not None and thinking else ""
        if lead and kind == "no-think-end":
            out, text = [_char_id(lead[i % len(lead)]) for i in range(steps)], None
        elif lead:
            lead += THINK_END
        if text is not None and params.get("ignore_eos"):  # the grammar's characters to the end, never EOS
            out = [_char_id(c) for c in lead] + [_char_id(text[i % len(text)]) for i in range(steps)]
            out = out[:steps]
        elif text is not None:  # a grammar's text, then EOS (its matcher accepts nothing else once complete)
            out = [_char_id(c) for c in lead + text] + [EOS]
            if len(out) <= steps and finish["type"] != "abort":
                finish = {"type": "stop", "matched": EOS}
            out = out[:steps]
        logprobs = [-(_h(digest, seed, sample, i, salt, "lp") % 4096) / 1024 for i in range(len(out))]
        if finish["type"] == "abort":  # what it decoded before the abort met it
            out, logprobs = out[:done], logprobs[:done]
        stops = [i for i, t in enumerate(out) if t in (params.get("stop_token_ids") or ())]
        if stops:  # SGLang ends a request at its first stop token, which it returns
            out, logprobs, finish = out[:stops[0] + 1], logprobs[:stops[0] + 1], {"type": "stop", "matched": out[stops[0]]}
        prompt, acc = None if start is None else [], salt
        for p, t in enumerate(tokens if start is not None else ()):  # each position's from its prefix
            acc = hash((acc, t))
            if p >= start:
                prompt.append([None if p == 0 else -(acc % 4096) / 1024, t, None])
        with lock:
            cache.keep(tokens, tuple(out))
        k, grammar = top_k.get("k") or 0, any(params.get(g) for g in ("regex", "json_schema", "ebnf"))
        extra = {}
        if k:  # the top k of each step; under a grammar the masked tokens tie at one clamped value
            extra["output_top_logprobs"] = [_top(digest, salt, i, k, grammar) for i in range(len(out))]
            if prompt is not None:
                extra["input_top_logprobs"] = [None if p == 0 else _top(digest, salt, -p, k, False)
                                               for p in range(start, len(tokens))]
        if top_k.get("ids"):
            extra["output_token_ids_logprobs"] = [[[-(_h(digest, salt, i, t) % 4096) / 1024, t, None]
                                                   for t in top_k["ids"]] for i in range(len(out))]
        return {"output_ids": out, "meta_info": {
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(logprobs, out)],
            **({"input_token_logprobs": prompt} if prompt is not None else {}), **extra,
            "finish_reason": finish, "cached_tokens": hit, "prompt_tokens": len(tokens)}}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, status: int, data: bytes = b""):
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/server_info":
                got = {"max_running_requests": 256, "max_total_num_tokens": pool, "disable_radix_cache": False}
            else:
                return self._send(404)
            self._send(200, json.dumps(got).encode())

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/flush_cache":
                with lock:
                    idle = running[0] == 0
                    if idle:
                        cache.flush()
                return self._send(200 if idle else 400)
            if self.path == "/abort_request":
                aborted.add(json.loads(raw)["rid"])
                return self._send(200)
            body = json.loads(raw)
            if self.path.startswith("/v1/"):
                return self._send(200, json.dumps(counted(lambda b: openai(self.path, b), body)).encode())
            if not body.get("stream"):
                return self._send(200, orjson.dumps(generate(body)))  # as SGLang writes it: -inf is null
            # streamed: SGLang's events, each with the output so far (cumulative), then [DONE]
            reply = generate(body)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            steps = reply["meta_info"]["output_token_logprobs"]
            for upto in sorted({1, len(steps)}):
                chunk = {"output_ids": reply["output_ids"][:upto],
                         "meta_info": {**reply["meta_info"], "output_token_logprobs": steps[:upto]}}
                self.wfile.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256  # a crowd connects at once

    httpd = Server(("127.0.0.1", 0), Handler)
    ready.send(httpd.server_address[1])
    httpd.serve_forever()


class _Exit:
    """A stand-in's process as the suite reads a server's (``Popen``'s ``poll`` and ``wait``)."""

    def __init__(self, process):
        self.process = process

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired("stand-in", timeout)
        return self.process.exitcode


class StandIn:
    """``_serve``'s server on a free port, as ``launch.Server`` hands a server to the suite: ``url``, ``pid``,
    ``proc``, ``log_text()``, ``stop()``."""

    def __init__(self, kind: str, folder: Path, pool: int = POOL):
        context = multiprocessing.get_context("fork")
        here, there = context.Pipe()
        snapshots = folder / f"sglang_loads_standin_{kind}_{id(self):x}.shm"
        self.process = context.Process(target=_serve, args=(kind, pool, str(snapshots), there), daemon=True)
        self.process.start()
        if not here.poll(30):
            raise RuntimeError("the stand-in server did not start")
        self.url = f"http://127.0.0.1:{here.recv()}"
        self.pid = self.process.pid
        self.proc = _Exit(self.process)

    def log_text(self) -> str:
        code = self.process.exitcode
        return f"RuntimeError: the stand-in exited with {code}" if code and code > 0 else ""  # a kill logs nothing

    def stop(self, grace: float = 0):
        self.process.kill()
        self.process.join(10)


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """``start({arm: kind})``: a stand-in per arm, as the suite's ``arms`` fixture hands them to a scenario; the
    rows go to ``tmp_path`` (``CORUN_RESULTS``).

    The heap the test session has built is frozen (``gc.freeze``) while the stand-ins serve, here and in every
    stand-in forked from here: late in a full run a collection of it takes about half a second, longer than a lone
    request's hold, and one that stalls the client or a stand-in in the middle of a burst runs part of the burst
    alone, so the scenario would find its overlap unproven for a reason that is not the server's."""
    monkeypatch.setenv("CORUN_RESULTS", str(tmp_path))
    gc.freeze()
    started = []

    checkpoint = tmp_path / "checkpoint"  # what a scenario reads of the model: its EOS
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"vocab_size": VOCAB, "eos_token_id": EOS}))
    _tokenizer(checkpoint)

    def start(kinds: dict, again: dict | None = None) -> "suite.Arms":
        """``again``: the kind of a server started in place of an arm's that exited (default: its own)."""

        def standin(kind):
            started.append(StandIn(kind, tmp_path))
            return started[-1]

        servers = {arm: standin(kind) for arm, kind in kinds.items()}
        return suite.Arms("standin", servers, VOCAB, {a: 256 for a in servers}, checkpoint, {a: POOL for a in servers},
                          lambda arm: standin((again or kinds)[arm]))

    yield start
    for s in started:
        s.stop()
    gc.unfreeze()


def _rows(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


def test_scenario_s_holds_on_the_rules_and_its_negative_control_diverges(standins, tmp_path):
    arms = standins({"corun-prefix": "rules", "default-radix": "sglang"})
    suite.test_s_prefix_cache_hits_give_the_cold_runs_bits(arms)
    requests, rows = _rows(tmp_path, "requests.jsonl"), _rows(tmp_path, "suite.jsonl")
    hits = {(r["arm"], r["key"], r["run"]): r["cached_tokens"] for r in requests}
    needle = next(r["prompt_tokens"] for r in requests if r["key"] == "needle0")
    g = pc.GRID
    assert [hits[("corun-prefix", "needle0", run)] for run in
            ("alone", "again", "whole-alone", "warm", "whole", "evicted", "partial")] == [0, 0, needle - 1, 2 * g,
                                                                                          needle - 1, 0, g]
    assert hits[("corun-prefix", "needle3", "whole")] == 2 * g  # prompt logprobs from its question on
    assert {hits[("corun-prefix", f"group#{i}", run)] for i in range(4) for run in ("alone", "again", "group")} == {
        needle - 1}
    # SGLang's own hits, recorded: off the grid, the whole system prompt, and what the partial prompt shares
    assert hits[("default-radix", "needle0", "warm")] == suite.SYSTEM_TOKENS
    assert hits[("default-radix", "needle0", "partial")] == g + suite.PARTIAL_EXTRA
    by = {r["arm"]: r for r in rows}
    assert by["corun-prefix"]["divergent"] == 0 and by["default-radix"]["divergent"] > 0
    assert by["corun-prefix"]["cached_by_role"]["reference"] == 4 * (needle - 1)  # the group's samples alone
    assert by["corun-prefix"]["null_divergent"] == 0 and by["default-radix"]["null_divergent"] == 0
    assert not any(r["key"].startswith("group") for r in requests if r["arm"] == "default-radix")
    summary = report.recompute(requests, rows)
    assert summary["problems"] == []
    checks = report.checks(summary)
    assert "corun-prefix: 0 divergent of " in checks[0] and checks[0].endswith("holds")
    assert any(c.startswith("standin, default SGLang with its radix cache diverges in s: s ") and c.endswith(": holds")
               for c in checks)


@pytest.mark.parametrize("kind, found", [
    ("drift", ["diverged in"]),  # hits the rules serve, bits that change with them
    ("any-hit", ["a hit the prefix cache never serves", "cached tokens, the rules give"]),  # hits off the grid
    ("no-flush", ["needle1 alone: 2048 cached tokens, the rules give 0"]),  # references that are not cold
])
def test_scenario_s_fails_a_broken_cache(standins, kind, found):
    arms = standins({"corun-prefix": kind})
    with pytest.raises(AssertionError) as failed:
        suite.test_s_prefix_cache_hits_give_the_cold_runs_bits(arms)
    assert all(f in str(failed.value) for f in found), str(failed.value)[:2000]


def test_another_scenario_allows_the_rules_hits_on_the_prefix_arm_and_no_hit_elsewhere(standins, tmp_path):
    suite.test_g_parallel_samples_reproducible_and_distinct(standins({"corun-prefix": "rules"}))
    (row,) = _rows(tmp_path, "suite.jsonl")  # a group's samples find its prompt whole, the reference's too
    assert row["divergent"] == 0 and row["cached_by_role"]["reference"] > 0 and row["cached_by_role"]["compared"] > 0
    with pytest.raises(AssertionError, match="prompt tokens came from a prefix cache"):
        suite.test_g_parallel_samples_reproducible_and_distinct(standins({"corun": "rules"}))


def test_an_arm_runs_only_its_scenarios_and_the_prefix_arm_serves_its_grid():
    assert suite.runs("corun-prefix", "a") and suite.runs("corun-prefix", "s") and suite.runs("default-radix", "s")
    assert not suite.runs("default-radix", "a") and not suite.runs("corun", "s") and not suite.runs("default", "s")
    args = suite.server_args("corun-prefix")
    assert args[args.index("--chunked-prefill-size") + 1] == str(pc.GRID)
    assert suite.server_args("corun") == suite.SERVER_ARGS and "2048" in suite.SERVER_ARGS


def test_a_servers_n_is_read_as_set_or_as_its_scheduler_resolved_it():
    """Stock SGLang's ``/server_info`` leaves ``max_running_requests`` None unless the options set it; the value
    its scheduler resolved is in ``internal_states`` (the suite's default arm started on a GPU showed it)."""
    stock = {"max_running_requests": None, "internal_states": [{"effective_max_running_requests_per_dp": 2048}]}
    assert suite.running_limit(stock) == 2048
    assert suite.running_limit({**stock, "max_running_requests": 256}) == 256


#: Scenarios a to t but j (which needs two --corun arms of one MoE model) and s (``test_scenario_s_*``): what each
#: sends, in which order, and how it judges, run whole on a stand-in.
SCENARIOS = sorted([(suite, n) for n in dir(suite) if n[:7] in {f"test_{c}_" for c in "abcdefghiklm"}]
                   + [(surface, n) for n in dir(surface) if n[:7] in {f"test_{c}_" for c in "nopqrt"}],
                   key=lambda found: found[1])


@pytest.mark.parametrize("module, scenario", SCENARIOS, ids=[name for _, name in SCENARIOS])
def test_every_scenario_runs_whole_on_a_server_whose_bits_follow_the_request_alone(standins, tmp_path, module,
                                                                                   scenario):
    getattr(module, scenario)(standins({"corun": "none"}), *((0.8,) if scenario.startswith("test_b_") else ()))
    rows = _rows(tmp_path, "suite.jsonl")
    assert rows and all(r["comparisons"] > 0 and r["divergent"] == 0 for r in rows), rows


def test_a_scenario_fails_a_batch_variant_corun_arm_and_passes_it_as_the_negative_control(standins, tmp_path):
    with pytest.raises(AssertionError, match="corun: diverged in"):
        suite.test_a_bs1_vs_bs32(standins({"corun": "batch"}))
    suite.test_a_bs1_vs_bs32(standins({"corun": "none", "default": "batch"}))  # default must diverge, and does
    with pytest.raises(AssertionError, match="negative control: default did not diverge"):
        suite.test_a_bs1_vs_bs32(standins({"default": "none"}))


def test_a_server_that_dies_in_a_scenario_fails_it_alone_and_serves_the_next_one_started_again(standins, tmp_path):
    """The default arm's server dies under scenario a's burst: the scenario fails naming that, the ``--corun`` arm's
    rows are written all the same, and scenario c runs on both arms, the default's server started again."""
    arms = standins({"corun": "none", "default": "crash"}, again={"default": "batch"})
    with pytest.raises(AssertionError, match="default: its server exited with status 3 during scenario a: "
                                             "RuntimeError: the stand-in exited with 3") as failed:
        suite.test_a_bs1_vs_bs32(arms)
    assert "corun:" not in str(failed.value)
    rows = _rows(tmp_path, "suite.jsonl")
    by = {(r["arm"], "error" in r): r for r in rows}
    assert by[("corun", False)]["comparisons"] == 32 and by[("corun", False)]["divergent"] == 0
    assert by[("default", True)]["restarted"] is True and by[("default", True)]["scenario"] == "a"
    assert sum(r["tokens"] == 0 for r in _rows(tmp_path, "requests.jsonl") if r["arm"] == "default") > 0
    suite.test_c_arrival_order_permutations(arms)  # both arms serve again: no problem
    assert {r["arm"] for r in _rows(tmp_path, "suite.jsonl")[len(rows):]} == {"corun", "default"}


def test_a_server_found_dead_before_a_scenario_is_started_again_and_the_scenario_still_runs(standins, tmp_path):
    arms = standins({"corun": "none", "default": "batch"})
    arms.servers["default"].process.kill()
    arms.servers["default"].process.join(10)
    with pytest.raises(AssertionError, match="default: its server exited with status -9 before scenario a") as failed:
        suite.test_a_bs1_vs_bs32(arms)
    assert "negative control" not in str(failed.value)  # the server started again diverged, as it must
    judged = [r for r in _rows(tmp_path, "suite.jsonl") if "error" not in r]
    assert {r["arm"]: r["divergent"] > 0 for r in judged} == {"corun": False, "default": True}


def test_an_arm_whose_plan_raises_fails_alone_and_the_others_rows_are_written(standins, tmp_path, monkeypatch):
    arms = standins({"corun": "none", "default": "batch"})
    probe, doomed = suite.LoadProbe, arms.servers["default"].pid

    def failing(pid, *a, **k):
        if pid == doomed:
            raise RuntimeError("no load-snapshot file")
        return probe(pid, *a, **k)

    monkeypatch.setattr(suite, "LoadProbe", failing)
    with pytest.raises(AssertionError, match="default: RuntimeError: no load-snapshot file") as failed:
        suite.test_a_bs1_vs_bs32(arms)
    assert "corun:" not in str(failed.value)
    rows = _rows(tmp_path, "suite.jsonl")
    assert [(r["arm"], "error" in r) for r in rows] == [("corun", False), ("default", True)]
    assert rows[0]["comparisons"] == 32 and rows[0]["divergent"] == 0


def test_an_arm_whose_server_cannot_start_again_leaves_and_the_others_go_on(standins, tmp_path):
    arms = standins({"corun": "none", "default": "batch"})
    arms.start = None
    arms.servers["default"].stop()
    with pytest.raises(AssertionError, match="before scenario a; not started again: no server can be started"):
        suite.test_a_bs1_vs_bs32(arms)
    assert set(arms.servers) == {"corun"}
    suite.test_c_arrival_order_permutations(arms)
    (error,) = [r for r in _rows(tmp_path, "suite.jsonl") if "error" in r]
    assert error["arm"] == "default" and error["restarted"] is False


def test_the_batch_invariant_arm_is_never_sent_the_min_p_that_takes_it_down(standins, tmp_path):
    """SGLang's batch-invariant mode dies on a seeded min-p request: the suite sends its arm none, so scenario
    i's mixed filters leave it serving; the same stand-in as a ``--corun`` arm, sent min-p, fails the scenario."""
    suite.test_i_filtered_needles_among_mixed_filters(standins({"deterministic": "bi"}))
    rows = _rows(tmp_path, "requests.jsonl")
    assert rows and all(r["tokens"] for r in rows)
    (row,) = _rows(tmp_path, "suite.jsonl")
    assert row["arm"] == "deterministic" and not row.get("problems")
    with pytest.raises(AssertionError):
        suite.test_i_filtered_needles_among_mixed_filters(standins({"corun": "bi"}))


def test_scenario_r_reads_the_openai_clients_replies_and_its_control_diverges(standins, tmp_path):
    """Scenario r through the official client: tool calls, a JSON schema, top-20 and echoed completions parsed into
    digests, each with its logprobs; a batch-variant ``--corun`` stand-in fails it, and default SGLang's diverges."""
    surface.test_r_openai_client_requests_alone_and_among_concurrent_clients(
        standins({"corun": "none", "default": "batch"}))
    requests = _rows(tmp_path, "requests.jsonl")
    corun = [r for r in requests if r["arm"] == "corun"]
    assert {r["key"] for r in corun} == {"tool", "tool2", "schema", "top20", "completion"}
    assert all(r["tokens"] for r in corun)
    echoed = next(r for r in corun if r["key"] == "completion")
    assert echoed["prompt_tokens"] and echoed["logprob_start_len"] == 0  # the echoed prompt's logprobs compared
    by = {r["arm"]: r for r in _rows(tmp_path, "suite.jsonl")}
    assert by["corun"]["divergent"] == 0 and by["corun"]["comparisons"] == 10 and by["default"]["divergent"] > 0
    with pytest.raises(AssertionError, match="corun: diverged in"):
        surface.test_r_openai_client_requests_alone_and_among_concurrent_clients(standins({"corun": "batch"}))


def test_scenario_q_parses_each_needles_text_and_fails_a_server_blind_to_grammars(standins, tmp_path):
    surface.test_q_grammars_among_co_runners_with_other_grammars(standins({"corun": "none", "default": "batch"}))
    by = {r["arm"]: r for r in _rows(tmp_path, "suite.jsonl")}
    assert by["corun"]["divergent"] == 0 and by["default"]["divergent"] > 0
    assert by["corun"]["cut_references"] == 0  # the stand-in's grammar texts end within their 128 tokens
    with pytest.raises(AssertionError, match="json: .*(no prefix its grammar accepts|does not satisfy its grammar)"):
        surface.test_q_grammars_among_co_runners_with_other_grammars(standins({"corun": "no-grammar"}))


def test_scenario_t_finds_each_switch_and_parses_what_follows_it(standins, tmp_path):
    """Scenario t on stand-ins that think, close the think tag and then follow the grammar: every thinking needle
    crosses and its text after the tag parses, and default SGLang's batch-variant stand-in diverges."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "checkpoint"))
    assert surface._think_end(tokenizer) == [_char_id(c) for c in "</think>"]  # "<", "/", ">": printable ASCII
    assert tokenizer.decode(surface._think_end(tokenizer)) == "</think>"
    assert surface._crossed_at([5, 1, 2, 3, 1, 2, 3], [1, 2, 3]) == 4 and surface._crossed_at([1, 2], [1, 2, 3]) is None
    surface.test_t_grammars_through_the_reasoning_wrapper_among_co_runners(
        standins({"corun": "none", "default": "batch"}))
    by = {r["arm"]: r for r in _rows(tmp_path, "suite.jsonl")}
    assert by["corun"]["divergent"] == 0 and by["default"]["divergent"] > 0
    # the five thinking needles' references each crossed (the tool call's among them)
    assert by["corun"]["crossed"] == 5 and by["corun"]["still_thinking"] == 0 and by["corun"]["cut_references"] == 0


@pytest.mark.parametrize("kind, found", [
    ("no-think-end", ["no require_reasoning reference crossed into its grammar (5 still thinking)"]),
    ("no-grammar", ["no require_reasoning reference crossed", "ebnf: cut at 128 tokens"]),
])
def test_scenario_t_fails_a_server_whose_thinking_needles_never_reach_their_grammar(standins, kind, found):
    with pytest.raises(AssertionError) as failed:
        surface.test_t_grammars_through_the_reasoning_wrapper_among_co_runners(standins({"corun": kind}))
    assert all(f in str(failed.value) for f in found), str(failed.value)[:2000]


def test_scenario_c_at_scale_in_a_chunk_of_its_own_adds_to_the_suites_count(standins, tmp_path, monkeypatch):
    """The queue's ``suite-*-c-wide`` chunks: scenario c alone with many arrival orders, in a folder beside the
    chunk that ran it with the default two; the report recounts both, each order's outputs against the
    references of its own chunk, without a problem."""
    counts = {}
    for folder, orders in (("pair", 2), ("c-wide", 6)):
        monkeypatch.setenv("CORUN_RESULTS", str(tmp_path / folder))
        (tmp_path / folder).mkdir()
        monkeypatch.setattr(suite, "PERMUTATIONS", orders)
        suite.test_c_arrival_order_permutations(standins({"corun": "none"}))
        counts[folder] = [r["comparisons"] for r in _rows(tmp_path / folder, "suite.jsonl")]
    assert counts == {"pair": [128], "c-wide": [384]}
    requests, rows, _, problems = report.load(tmp_path)
    summary = report.recompute(requests, rows)
    assert problems == [] and summary["problems"] == []
    assert summary["cells"][report.cell_key("standin", "c", "corun")] == [0, 512]  # [divergent, compared]


def test_masked_top_k_entries_the_server_wrote_as_null_count_as_tied():
    from corun_sglang.core.compare import Generation
    from corun_sglang.tools.evidence import Sent

    def reference(*values):
        top = [[[v, i, None] for i, v in enumerate(values)]]
        meta = {"output_token_logprobs": [[values[0], 0, None]], "output_top_logprobs": top}
        return Sent("n", "alone", "reference", {}, Generation.of_reply(orjson.loads(orjson.dumps({"meta_info": meta}))))

    ninf = float("-inf")
    assert surface._tied_steps([reference(-0.5, -1.0, ninf, ninf)]) == 1  # two masked tokens, both null
    assert surface._tied_steps([reference(-0.5, -1.0, -1.0)]) == 1
    assert surface._tied_steps([reference(-0.5, -1.0, ninf)]) == 0
    assert surface._no_token_allowed([reference(-0.5, -1.0)]) == []
    assert surface._no_token_allowed([reference(float("nan"), -1.0)]) == [
        "n: 1 sampled-token logprobs are not finite (a grammar row allowed no token)"]
