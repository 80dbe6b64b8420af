"""The OpenAI HTTP path: text and chat completions through the official client, many clients at once.

The synthetic checkpoint carries a word-level tokenizer (``synthetic.write_tokenizer``),
so ``/v1/completions`` and ``/v1/chat/completions`` serve text. ``corun-sglang verify``
drives the server the way a user audits a deployment; default SGLang is the
negative control.
"""

import json
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from corun_sglang.commands import verify

pytestmark = pytest.mark.e2e

SERVER_ARGS = os.environ.get("CORUN_SERVER_ARGS", "").split()
MODEL = "synthetic"


def _client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", timeout=600)


def _chat(url, text, seed):
    out = _client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=24,
        temperature=0.6, seed=seed, logprobs=True,
    )
    return _bits([c.token for c in out.choices[0].logprobs.content], [c.logprob for c in out.choices[0].logprobs.content])


def _bits(tokens, logprobs):
    """Tokens with their logprobs' IEEE-754 bit patterns: equal only if bitwise equal (-0.0 != 0.0)."""
    assert tokens and len(tokens) == len(logprobs), "an empty output, or logprobs missing"
    return tuple(zip(tokens, (struct.pack("<d", float(x)).hex() for x in logprobs)))


def _unseeded(url, texts):
    def one(text):
        out = _client(url).completions.create(model=MODEL, prompt=text, max_tokens=24,
                                              temperature=0.8, logprobs=0)
        return _bits(out.choices[0].logprobs.tokens, out.choices[0].logprobs.token_logprobs)

    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(one, texts))


def _verify_cli(url):
    return subprocess.run(
        [sys.executable, "-m", "corun_sglang", "verify", "--base-url", url, "--model", MODEL,
         "--prompts", "16", "--batch", "128", "--max-tokens", "32", "--ignore-eos"],
        capture_output=True, text=True, timeout=900,
    )


def _suite_row(arm, scenario, divergences):
    """One row of ``$CORUN_RESULTS/suite.jsonl`` (the determinism report's input)."""
    folder = os.environ.get("CORUN_RESULTS")
    if not folder:
        return
    shape = "http-" + os.environ.get("CORUN_SHAPE", "qwen3-small")
    bad = [d for d in divergences if d is not None]
    row = {"shape": shape, "arm": arm, "scenario": scenario, "tp": 1, "comparisons": len(divergences),
           "divergent": len(bad), "first_steps": bad[:50]}
    with open(Path(folder) / "suite.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def _verify_divergences(audit):
    return [step for r in audit.prompts for step in r.divergences.values()]


def test_corun_http_path_is_invariant_and_restart_stable(launch, checkpoint, record):
    args = ("--corun", "--served-model-name", MODEL, *SERVER_ARGS)
    server = launch(checkpoint, *args, name="http-corun", text=True)
    texts = verify.prompts(16, seed=7)
    try:
        send = verify.openai_sender(server.url, MODEL, max_tokens=32, temperature=0.6,
                                    extra_body={"ignore_eos": True})
        audit = verify.run(send, texts, batch=128, seed=11)
        chat_alone = [_chat(server.url, t, 100 + i) for i, t in enumerate(texts[:8])]
        with ThreadPoolExecutor(64) as pool:
            chat_busy = list(pool.map(lambda it: _chat(server.url, it[1], 100 + it[0]),
                                      list(enumerate(texts[:8])) * 8))
        unseeded_before = _unseeded(server.url, texts[:8])
        cli = _verify_cli(server.url)
    finally:
        server.stop()
    server = launch(checkpoint, *args, name="http-corun-restarted", text=True)
    try:
        unseeded_after = _unseeded(server.url, texts[:8])
    finally:
        server.stop()
    _suite_row("corun", "http-verify", _verify_divergences(audit))
    _suite_row("corun", "http-chat", [None if chat_busy[i] == chat_alone[i % 8] else 0
                                      for i in range(len(chat_busy))])
    _suite_row("corun", "http-restart", [None if a == b else 0 for a, b in zip(unseeded_before, unseeded_after)])
    record("http_corun", {
        "command": server.command, "verify": verify.render(audit), "verify_cli": cli.stdout,
        "chat_identical": sum(chat_busy[i] == chat_alone[i % 8] for i in range(len(chat_busy))),
        "chat_comparisons": len(chat_busy),
        "unseeded_identical_after_restart": unseeded_before == unseeded_after,
    })
    assert audit.ok, verify.render(audit)
    assert all(chat_busy[i] == chat_alone[i % 8] for i in range(len(chat_busy)))
    assert unseeded_before == unseeded_after
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_verify_flags_default_sglang(launch, checkpoint, record):
    server = launch(checkpoint, "--served-model-name", MODEL, *SERVER_ARGS, name="http-default", text=True)
    try:
        send = verify.openai_sender(server.url, MODEL, max_tokens=32, temperature=0.6,
                                    extra_body={"ignore_eos": True})
        _suite_row("default", "http-verify", _verify_divergences(verify.run(send, verify.prompts(16, seed=7),
                                                                            batch=128, seed=11)))
        cli = _verify_cli(server.url)
    finally:
        server.stop()
    record("http_default", {"command": server.command, "verify_cli": cli.stdout})
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "DIVERGES" in cli.stdout
