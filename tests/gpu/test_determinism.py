"""The CoRun contract on a real server: a request's tokens and logprobs do not depend on its co-runners.

Scenario (sizes from the environment, defaults in brackets): ``CORUN_PROMPTS``
[32] prompts of 16-2048 tokens, each with its own seed, temperature 0.6,
top_p 1.0, ``CORUN_NEW_TOKENS`` [64] new tokens, compared bitwise (token ids
and sampled-token logprobs) when run alone, all together, all together in
reversed order, and among ``CORUN_CORUNNERS`` [224] mixed-length co-runners;
greedy likewise. Default SGLang runs the same harness as the negative
control. A third server with a KV pool too small for all requests at once
must finish every request without retraction and with the same outputs.
"""

import os
import random

import pytest

import harness
from corun_sglang.probes import generate

pytestmark = pytest.mark.e2e

N_PROMPTS = int(os.environ.get("CORUN_PROMPTS", "32"))
N_CORUNNERS = int(os.environ.get("CORUN_CORUNNERS", "224"))
NEW_TOKENS = int(os.environ.get("CORUN_NEW_TOKENS", "64"))
TEMPERATURE = 0.6
#: Filters of the sampled requests (defaults: none, as in the contract's main scenario).
FILTERS = {
    "top_p": float(os.environ.get("CORUN_TOP_P", "1.0")),
    "top_k": int(os.environ.get("CORUN_TOP_K", "-1")),
    "min_p": float(os.environ.get("CORUN_MIN_P", "0.0")),
}
#: Extra options for every server of this module (e.g. "--disable-prefill-cuda-graph").
SERVER_ARGS = os.environ.get("CORUN_SERVER_ARGS", "").split()

PROMPTS = generate.token_prompts(N_PROMPTS, 16, 2048, seed=0)
SEEDS = [1000 + i for i in range(N_PROMPTS)]
CORUNNERS = generate.token_prompts(N_CORUNNERS, 16, 2048, seed=1)


def _sampled():
    return [harness.request(p, NEW_TOKENS, TEMPERATURE, s, **FILTERS) for p, s in zip(PROMPTS, SEEDS)]


def _greedy():
    return [harness.request(p, NEW_TOKENS, 0.0) for p in PROMPTS]


def _corunners():
    rnd = random.Random(2)
    return [
        harness.request(p, rnd.randint(16, 2 * NEW_TOKENS), rnd.choice([0.0, 0.6, 1.0]), 5000 + i)
        for i, p in enumerate(CORUNNERS)
    ]


def _among(url, requests):
    """``requests`` sent concurrently with the co-runners, in a shuffled order; results of ``requests``."""
    mixed = [(i, r) for i, r in enumerate(requests)] + [(None, r) for r in _corunners()]
    random.Random(3).shuffle(mixed)
    out = harness.generate(url, [r for _, r in mixed])
    by_index = {i: g for (i, _), g in zip(mixed, out) if i is not None}
    return [by_index[i] for i in range(len(requests))]


def _scenarios(url):
    sampled, greedy = _sampled(), _greedy()
    alone = harness.generate(url, sampled, concurrent=False)
    together = harness.generate(url, sampled)
    reversed_ = harness.generate(url, sampled[::-1])[::-1]
    among = _among(url, sampled)
    greedy_alone = harness.generate(url, greedy, concurrent=False)
    greedy_together = harness.generate(url, greedy)
    greedy_reversed = harness.generate(url, greedy[::-1])[::-1]
    greedy_among = _among(url, greedy)
    return {
        "outputs_together": together,
        "sampled: alone vs together": harness.compare(alone, together),
        "sampled: alone vs reversed": harness.compare(alone, reversed_),
        "sampled: alone vs among co-runners": harness.compare(alone, among),
        "greedy: alone vs together": harness.compare(greedy_alone, greedy_together),
        "greedy: alone vs reversed": harness.compare(greedy_alone, greedy_reversed),
        "greedy: alone vs among co-runners": harness.compare(greedy_alone, greedy_among),
    }


def _report(results):
    return {k: harness.summary(v) for k, v in results.items() if k != "outputs_together"}


def _retractions(log: str) -> int:
    """SGLang's retraction log lines ("#retracted_reqs: ..."), and corun's refusal to retract."""
    return sum(1 for line in log.splitlines() if "#retracted_reqs" in line or "retraction was about" in line)


@pytest.fixture(scope="module")
def corun_results(launch, checkpoint):
    server = launch(checkpoint, "--corun", *SERVER_ARGS, name="determinism-corun")
    try:
        results = _scenarios(server.url)
        results["retraction_log_lines"] = _retractions(server.log_text())
        results["command"] = server.command
    finally:
        server.stop()
    return results


def test_corun_outputs_identical_whatever_the_co_runners(corun_results, record):
    report = _report({k: v for k, v in corun_results.items() if isinstance(v, list) and k != "command"})
    record("determinism_corun", {"command": corun_results["command"], "shape": os.environ.get("CORUN_SHAPE"),
                                 "prompts": N_PROMPTS, "corunners": N_CORUNNERS, "new_tokens": NEW_TOKENS,
                                 "filters": FILTERS, "report": report})
    assert all(r["divergent"] == 0 for r in report.values()), report
    assert corun_results["retraction_log_lines"] == 0


def test_default_sglang_diverges_in_the_same_harness(launch, checkpoint, record):
    """The negative control. Default SGLang runs without its prefix cache (a later run would otherwise prefill
    one token where the first prefilled the prompt) and is judged on greedy outputs (it ignores
    ``sampling_seed``, so its sampled outputs differ even alone): what diverges then is the batch."""
    server = launch(checkpoint, "--disable-radix-cache", *SERVER_ARGS, name="determinism-default")
    try:
        results = _scenarios(server.url)
    finally:
        server.stop()
    report = _report(results)
    record("determinism_default", {"command": server.command, "prompts": N_PROMPTS,
                                   "corunners": N_CORUNNERS, "new_tokens": NEW_TOKENS, "report": report})
    greedy = report["greedy: alone vs among co-runners"]
    assert greedy["divergent"] > greedy["comparisons"] // 2, report


def test_congested_pool_completes_without_retraction(launch, checkpoint, corun_results, record):
    need = sum(len(p) + NEW_TOKENS for p in PROMPTS)
    pool = max(need // 4, max(len(p) for p in PROMPTS) + NEW_TOKENS + 64)
    server = launch(
        checkpoint, "--corun", "--max-total-tokens", str(pool), *SERVER_ARGS, name="determinism-congested"
    )
    try:
        congested = harness.generate(server.url, _sampled())
        log = server.log_text()
    finally:
        server.stop()
    divergences = harness.compare(corun_results["outputs_together"], congested)
    report = {"pool_tokens": pool, "tokens_needed_at_once": need,
              "vs uncongested": harness.summary(divergences), "retraction_log_lines": _retractions(log)}
    record("determinism_congested", {"command": server.command, "prompts": N_PROMPTS,
                                     "new_tokens": NEW_TOKENS, "report": report})
    assert report["vs uncongested"]["divergent"] == 0, report
    assert report["retraction_log_lines"] == 0, report
