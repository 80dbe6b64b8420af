"""The contract as clients see it, on real ``--corun`` servers: ``system_fingerprint`` names the
configuration, and the seed every response returns replays its sample bit for bit.

- two servers of one configuration give the same fingerprint; another N or a prefill pack another;
- a returned seed sent back (``n = 1``, same prompt and parameters) gives the same tokens and logprobs:
  for a seeded request, an unseeded one, and each sample of an ``n > 1`` request, native and OpenAI;
- 8 identical unseeded requests give 8 distinct samples, and the same 8 after a restart.

Negative control: with the seed of another sample, a replay diverges.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from corun_sglang.core.compare import Generation, first_divergence

pytestmark = pytest.mark.e2e

SERVER_ARGS = os.environ.get("CORUN_SERVER_ARGS", "").split()
MODEL = "synthetic"
PROMPT = list(range(100, 164))
PACK = os.environ.get("CORUN_PACK", "1024")  # as tests/gpu/test_packing_on_gpu.py packs
PARAMS = {"max_new_tokens": 24, "temperature": 0.8, "top_p": 0.95, "ignore_eos": True}


def _server(launch, checkpoint, name, *extra):
    return launch(checkpoint, "--corun", "--served-model-name", MODEL, *SERVER_ARGS, *extra, name=name, text=True)


def _fingerprint(server) -> str:
    info = httpx.get(server.url + "/server_info", timeout=30).json()
    assert info["corun"] is True
    contract = info["corun_contract"]
    assert contract["configuration"]["N"] == info["max_running_requests"]
    assert len(contract["weights"]) == contract["tp_size"] == info["tp_size"]
    return contract["system_fingerprint"]


def _generate(server, sampling_params, n=None) -> list[dict]:
    params = {**PARAMS, **sampling_params, **({"n": n} if n else {})}
    reply = httpx.post(server.url + "/generate", json={"input_ids": PROMPT, "sampling_params": params,
                                                       "return_logprob": True}, timeout=600)
    reply.raise_for_status()
    body = reply.json()
    return body if isinstance(body, list) else [body]


def _same(a: dict, b: dict) -> bool:
    return first_divergence(Generation.of_reply(a), Generation.of_reply(b)) is None


def test_one_configuration_gives_one_fingerprint_another_n_or_pack_another(launch, checkpoint, record):
    values = {}
    for name, extra in [("a", ()), ("b", ()), ("n64", ("--max-running-requests", "64")),
                        ("pack", ("--corun-prefill-pack-candidate", PACK))]:
        server = _server(launch, checkpoint, f"fingerprint-{name}", *extra)
        try:
            values[name] = _fingerprint(server)
            (out,) = _generate(server, {"sampling_seed": 1})
            assert out["meta_info"]["system_fingerprint"] == values[name]
            chat = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY").chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=4, seed=1)
            assert chat.system_fingerprint == values[name]
        finally:
            server.stop()
    record("contract_fingerprints", values)
    assert values["a"] == values["b"]
    assert len({values["a"], values["n64"], values["pack"]}) == 3


def test_a_returned_seed_replays_its_sample_bit_for_bit(launch, checkpoint, record):
    server = _server(launch, checkpoint, "contract-replay")
    try:
        # seeded, unseeded and each sample of n > 1 (seeded and not), among co-runners
        with ThreadPoolExecutor(4) as pool:
            firsts = list(pool.map(lambda a: _generate(server, *a),
                                   [({"sampling_seed": 5},), ({},), ({"sampling_seed": 6}, 4), ({}, 4)]))
        samples = [s for group in firsts for s in group]
        seeds = [s["meta_info"]["sampling_seed"] for s in samples]
        assert seeds[0] == 5 and len(set(seeds)) == len(seeds)
        with ThreadPoolExecutor(len(samples)) as pool:  # replayed at once: other co-runners, other order
            replays = list(pool.map(lambda seed: _generate(server, {"sampling_seed": seed})[0], reversed(seeds)))
        replays.reverse()
        assert [r["meta_info"]["sampling_seed"] for r in replays] == seeds
        assert all(_same(a, b) for a, b in zip(samples, replays))
        assert not _same(samples[2], replays[3])  # negative control: another sample's seed

        client = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY", timeout=600)
        out = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, n=3,
                                        logprobs=0, extra_body={"ignore_eos": True})
        for choice in out.choices:
            seed = choice.model_extra["sampling_seed"]
            (again,) = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8,
                                                 seed=seed, logprobs=0, extra_body={"ignore_eos": True}).choices
            assert again.logprobs.tokens == choice.logprobs.tokens
            assert again.logprobs.token_logprobs == choice.logprobs.token_logprobs
        stream = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0.8, stream=True)
        chunks = [c for c in stream if c.choices]
        assert chunks and all(c.system_fingerprint == out.system_fingerprint for c in chunks)
        assert len({c.choices[0].model_extra["sampling_seed"] for c in chunks}) == 1
    finally:
        server.stop()
    record("contract_replay", {"seeds": seeds, "replayed": len(replays)})


def test_identical_unseeded_requests_are_distinct_and_the_same_after_a_restart(launch, checkpoint, record):
    def eight(name):
        server = _server(launch, checkpoint, name)
        try:
            return [_generate(server, {})[0] for _ in range(8)]  # one after another: the order of a rerun
        finally:
            server.stop()

    before, after = eight("contract-unseeded"), eight("contract-unseeded-restarted")
    tokens = [tuple(Generation.of_reply(o).tokens) for o in before]
    assert len(set(tokens)) == 8
    assert all(_same(a, b) for a, b in zip(before, after))
    record("contract_unseeded", {"distinct": len(set(tokens)), "seeds": [o["meta_info"]["sampling_seed"] for o in before]})
