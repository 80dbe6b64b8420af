"""Shared fixtures: SGLang's plugins loaded once, a tiny Qwen3 model folder, and local JSON endpoints that
stand in for a server's routes.

The CPU tier drives the real SGLang 0.5.17 classes. SGLang resolves options
for an accelerator, so the tests pass ``device="cuda"`` explicitly (nothing
touches a GPU: resolution reads the model config and the options only), and
without a GPU the one platform-dependent default SGLang reads at resolution,
the prefill CUDA graph backend (``breakable`` on CUDA, ``tc_piecewise``
elsewhere), is set to CUDA's.
"""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

try:
    import torch

    _CUDA = torch.cuda.is_available()
except ImportError:
    _CUDA = False
if not _CUDA:
    # corun's Triton sampling kernels run on the CPU through Triton's interpreter
    # (set before any kernel is defined).
    os.environ.setdefault("TRITON_INTERPRET", "1")

TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


@pytest.fixture(scope="session", autouse=True)
def cuda_platform_defaults():
    """SGLang's CUDA default for the prefill graph backend, on a host without CUDA."""
    if _CUDA:
        yield
        return
    from sglang.srt.model_executor import cuda_graph_config

    platform_default = cuda_graph_config.default_prefill_backend
    cuda_graph_config.default_prefill_backend = lambda: cuda_graph_config.Backend.BREAKABLE
    yield
    cuda_graph_config.default_prefill_backend = platform_default


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    (folder / "config.json").write_text(json.dumps(TINY_QWEN3))
    return str(folder)


@pytest.fixture(scope="session")
def sglang_plugins():
    """SGLang's plugin loader run once, as every SGLang entry point does."""
    from sglang.srt.plugins import load_plugins

    load_plugins()


@pytest.fixture(scope="session")
def server_args_cls(sglang_plugins):
    """The ``ServerArgs`` class SGLang uses after its plugins loaded."""
    from sglang.srt import server_args

    return server_args.ServerArgs


@pytest.fixture(scope="module")
def make_args_module(server_args_cls, tiny_model):
    return _maker(server_args_cls, tiny_model)


@pytest.fixture
def make_args(server_args_cls, tiny_model):
    return _maker(server_args_cls, tiny_model)


def _maker(server_args_cls, tiny_model):
    def make(**kwargs):
        kwargs.setdefault("model_path", tiny_model)
        kwargs.setdefault("device", "cuda")
        return server_args_cls(**kwargs)

    return make


@pytest.fixture
def json_server():
    """Starts local JSON endpoints: ``json_server(answer)`` answers each POST, in a thread of its own, with
    ``answer(path, body)``'s (status, reply), and returns the server with its ``url`` and its ``posts``
    (each POST's path and body, in arrival order). Every one started is shut down after the test."""
    started = []

    def start(answer):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else None
                server.posts.append((self.path, body))
                status, reply = answer(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.posts = []
        server.url = f"http://127.0.0.1:{server.server_port}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()


@pytest.fixture
def measurable(monkeypatch):
    """A refused request parameter that a GPU queue chunk measures, whatever rows of ``requests_check`` are
    measurable now: ``return_entropy``'s row gets a ``measure`` (a queue chunk that exists), a note that says it waits
    on it, and a type (a bool); returns its name. ``PARAMETERS`` and ``TABLE`` are replaced together, so every
    reader of the module's tables (the check, ``measured_names``, a server's startup check) sees one table."""
    import dataclasses
    from typing import Optional

    from pydantic import StrictBool

    from corun_sglang.core import requests_check

    chunk = "suite-smollm2-surface"
    row = requests_check.TABLE["request", "return_entropy"]
    assert row.status == requests_check.REFUSED and not row.measure
    measured = dataclasses.replace(row, note=f"{row.note}; not yet run among co-runners on a GPU (queue chunk {chunk})",
                                   accepts=Optional[StrictBool], measure=chunk)
    parameters = tuple(measured if p is row else p for p in requests_check.PARAMETERS)
    monkeypatch.setattr(requests_check, "PARAMETERS", parameters)
    monkeypatch.setattr(requests_check, "TABLE", {(p.where, p.name): p for p in parameters})
    monkeypatch.setattr(requests_check, "_ADAPTERS", {})  # type checks are cached by name
    return row.name


@pytest.fixture
def condition(monkeypatch):
    """A server option that moves verified parameters onto a path no GPU run has compared, whatever
    ``requests_check.CONDITIONS`` holds now: the grammars on a server with ``--reasoning-parser``, as they were
    until scenario t verified them (measured by t's queue chunk, whose servers run with the parser); returns it.
    Every reader of ``CONDITIONS`` (the check, ``measured_names``, a server's startup check, the tokenizer's hook)
    reads it at call time, so each sees this one."""
    from corun_sglang.core import requests_check

    found = requests_check.Condition(
        "grammar_under_reasoning", "reasoning_parser", ("json_schema", "regex", "ebnf", "structural_tag"),
        "SGLang runs each grammar inside its reasoning wrapper; not yet run among co-runners on a GPU (queue chunk "
        "suite-smollm2-reasoning-grammar)", "send it to a server without --reasoning-parser, or drop it",
        "suite-smollm2-reasoning-grammar")
    monkeypatch.setattr(requests_check, "CONDITIONS", (found,))
    return found
