"""The OpenAI HTTP path: text and chat completions through the official client, many clients at once.

The synthetic checkpoint carries a word-level tokenizer (``synthetic.write_tokenizer``),
so ``/v1/completions`` and ``/v1/chat/completions`` serve text. ``corun-sglang verify``
drives the server the way a user audits a deployment; default SGLang is the
negative control.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from corun_sglang import verify

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
    return [(c.token, c.logprob) for c in out.choices[0].logprobs.content]


def _unseeded(url, texts):
    def one(text):
        out = _client(url).completions.create(model=MODEL, prompt=text, max_tokens=24,
                                              temperature=0.8, logprobs=1)
        return out.choices[0].logprobs.tokens, out.choices[0].logprobs.token_logprobs

    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(one, texts))


def _verify_cli(url):
    exe = Path(sys.executable).with_name("corun-sglang")
    return subprocess.run(
        [str(exe), "verify", "--base-url", url, "--model", MODEL, "--prompts", "16", "--batch", "128",
         "--max-tokens", "32", "--ignore-eos"],
        capture_output=True, text=True, timeout=900,
    )


def test_corun_http_path_is_invariant_and_restart_stable(launch, checkpoint, record):
    args = ("--corun", "--served-model-name", MODEL, *SERVER_ARGS)
    server = launch(checkpoint, *args, name="http-corun", text=True)
    texts = verify.prompts(16, seed=7)
    try:
        send = verify.openai_sender(server.url, MODEL, max_tokens=32, temperature=0.6,
                                    extra_body={"ignore_eos": True})
        reports = verify.run(send, texts, batch=128, seed=11)
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
    record("http_corun", {
        "command": server.command, "verify": verify.render(reports), "verify_cli": cli.stdout,
        "chat_identical": sum(chat_busy[i] == chat_alone[i % 8] for i in range(len(chat_busy))),
        "chat_comparisons": len(chat_busy),
        "unseeded_identical_after_restart": unseeded_before == unseeded_after,
    })
    assert all(r.ok for r in reports), verify.render(reports)
    assert all(chat_busy[i] == chat_alone[i % 8] for i in range(len(chat_busy)))
    assert unseeded_before == unseeded_after
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_verify_flags_default_sglang(launch, checkpoint, record):
    server = launch(checkpoint, "--served-model-name", MODEL, *SERVER_ARGS, name="http-default", text=True)
    try:
        cli = _verify_cli(server.url)
    finally:
        server.stop()
    record("http_default", {"command": server.command, "verify_cli": cli.stdout})
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "DIVERGES" in cli.stdout
