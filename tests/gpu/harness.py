"""Workloads and a concurrent ``/generate`` client for the determinism scenarios."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import httpx

from corun_sglang.compare import Generation, first_divergence


def prompts(count: int, low: int, high: int, seed: int, vocab: int = 150000) -> list[list[int]]:
    """``count`` token-id prompts with lengths spread over [low, high] (log-uniform), seeded."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        length = int(round(low * (high / low) ** rnd.random()))
        out.append([rnd.randrange(100, vocab) for _ in range(length)])
    return out


def request(prompt, max_new_tokens, temperature, seed=None, top_p=1.0, top_k=-1, min_p=0.0) -> dict:
    params = {
        "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
        "top_k": top_k, "min_p": min_p, "ignore_eos": True,
    }
    if seed is not None:
        params["sampling_seed"] = seed
    return {"input_ids": prompt, "sampling_params": params, "return_logprob": True}


def generate(url: str, requests: list[dict], concurrent: bool = True) -> list[Generation]:
    """Send ``requests`` (all at once when ``concurrent``, else one after another); results in request order."""

    def one(req):
        with httpx.Client(timeout=900) as client:
            reply = client.post(url + "/generate", json=req)
        reply.raise_for_status()
        return Generation.of_reply(reply.json())

    if not concurrent:
        return [one(r) for r in requests]
    with ThreadPoolExecutor(max_workers=max(1, len(requests))) as pool:
        return list(pool.map(one, requests))


def compare(reference: list[Generation], other: list[Generation]) -> list[int | None]:
    return [first_divergence(a, b) for a, b in zip(reference, other, strict=True)]


def summary(divergences: list[int | None]) -> dict:
    bad = [d for d in divergences if d is not None]
    return {"comparisons": len(divergences), "divergent": len(bad), "first_steps": bad[:50]}
