"""``verify``: the audit logic against small local OpenAI-compatible servers.

Local servers stand in for deployments: one whose completions depend only on
(prompt, seed) (must pass, with or without a ``system_fingerprint``), one whose
logprobs shift with the number of requests in flight, as batch-dependent kernels
do (must fail), one that ignores ``seed`` (must fail), and one whose outputs are
invariant but whose fingerprint changes after the first requests, as a server
reconfigured mid-run (must fail). One invariant server writes a logprob that is not finite as JSON null, as
SGLang's orjson replies do (must pass: the null reads as NaN, the same bits every time).
"""

import hashlib
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from corun_sglang.commands import verify


def _completion(prompt: str, seed: int, max_tokens: int, shift: float, fingerprint: str | None) -> dict:
    rnd = random.Random(hashlib.sha256(f"{prompt}|{seed}".encode()).hexdigest())
    tokens = [f" w{rnd.randrange(1000)}" for _ in range(max_tokens)]
    logprobs = [-rnd.random() * 5 + shift for _ in range(max_tokens)]
    if fingerprint == "fp_null":  # a step whose logprob is not finite: orjson writes it as null
        logprobs[1] = None
    return {
        "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{
            "index": 0, "text": "".join(tokens), "finish_reason": "length",
            "logprobs": {"tokens": tokens, "token_logprobs": logprobs,
                         "text_offset": list(range(max_tokens)), "top_logprobs": None},
        }],
        "usage": {"prompt_tokens": 1, "completion_tokens": max_tokens, "total_tokens": max_tokens + 1},
        **({} if fingerprint is None else {"system_fingerprint": fingerprint}),
    }


#: Requests answered with the first fingerprint by the server that is reconfigured mid-run.
RECONFIGURED_AFTER = 3


def _completions(mode: str):
    """A completions endpoint's answer (for ``json_server``) of the kind ``mode`` names (the module docstring)."""
    inflight = {"n": 0, "answered": 0}
    lock = threading.Lock()

    def answer(path, body):
        with lock:
            inflight["n"] += 1
        time.sleep(0.05)  # let concurrent requests overlap, as in a batch
        with lock:
            busy = inflight["n"]
            inflight["answered"] += 1
            answered = inflight["answered"]
        seed = body.get("seed")
        if mode == "ignores-seed":
            seed = random.random()
        shift = 1e-6 * (busy - 1) if mode == "batch-dependent" else 0.0
        fingerprint = {"no-fingerprint": None, "null-logprob": "fp_null"}.get(mode, "fp_1")
        if mode == "reconfigured" and answered > RECONFIGURED_AFTER:
            fingerprint = "fp_2"
        reply = _completion(body["prompt"], seed, body["max_tokens"], shift, fingerprint)
        with lock:
            inflight["n"] -= 1
        return 200, reply

    return answer


@pytest.fixture
def serve(json_server):
    started = []

    def start(mode):
        started.append(json_server(_completions(mode)))
        return started[-1].url

    start.answered = lambda: sum(len(server.posts) for server in started)
    return start


def test_prompts_are_reproducible_and_varied():
    a = verify.prompts(10, seed=3)
    assert a == verify.prompts(10, seed=3) and a != verify.prompts(10, seed=4)
    assert len({len(p.split()) for p in a}) > 5


@pytest.mark.parametrize("mode,says", [("invariant", "system_fingerprint: fp_1 in every reply"),
                                       ("no-fingerprint", "system_fingerprint: none"),
                                       ("null-logprob", "system_fingerprint: fp_null in every reply")])
def test_invariant_server_passes(serve, mode, says):
    url = serve(mode)
    send = verify.openai_sender(url, "m", max_tokens=8, temperature=0.6)
    audit = verify.run(send, verify.prompts(6), batch=12)
    assert audit.ok and all(r.ok for r in audit.prompts)
    text = verify.render(audit)
    assert "no divergence" in text and says in text and "DIFFERS" not in text


@pytest.mark.parametrize("mode", ["batch-dependent", "ignores-seed"])
def test_nondeterministic_servers_are_flagged_with_the_step(serve, mode):
    url = serve(mode)
    send = verify.openai_sender(url, "m", max_tokens=8, temperature=0.6)
    audit = verify.run(send, verify.prompts(6), batch=12)
    assert not audit.ok and not all(r.ok for r in audit.prompts)
    text = verify.render(audit)
    assert "DIVERGES" in text and "at step 0" in text


def test_a_fingerprint_that_changes_between_rounds_fails_though_every_output_matches(serve):
    url = serve("reconfigured")
    send = verify.openai_sender(url, "m", max_tokens=8, temperature=0.6)
    audit = verify.run(send, verify.prompts(RECONFIGURED_AFTER), batch=8)
    assert all(r.ok for r in audit.prompts) and not audit.ok
    assert audit.fingerprints["alone"] == ["fp_1"] and audit.fingerprints["concurrent reversed"] == ["fp_2"]
    text = verify.render(audit)
    assert "system_fingerprint DIFFERS across rounds (alone: fp_1; concurrent: fp_2;" in text
    assert text.endswith("no divergence; fingerprints differ")


@pytest.mark.parametrize("mode,code", [("invariant", 0), ("batch-dependent", 1), ("reconfigured", 1)])
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


@pytest.mark.parametrize("argv,says", [
    (["--prompts", "0"], "--prompts 0: nothing to check"),
    (["--batch", "0"], "--batch 0: a concurrent round holds every prompt and a co-runner, so --batch must be at "
                       "least 16"),
    (["--prompts", "4", "--batch", "3"], "--batch must be at least 4"),
    (["--prompts", "1", "--batch", "1"], "--batch must be at least 2"),
])
def test_cli_refuses_a_run_that_would_compare_nothing(serve, capsys, argv, says):
    from corun_sglang.commands import cli

    url = serve("invariant")
    assert cli.main(["verify", "--base-url", url, "--model", "m", *argv]) == 2
    out = capsys.readouterr()
    assert says in out.err and "no divergence" not in out.out
    assert serve.answered() == 0  # refused before any request
    with pytest.raises(ValueError, match="nothing to check"):
        verify.run(verify.openai_sender(url, "m", 4, 0.6), [], batch=8)
