"""Request bodies, a concurrent ``/generate`` client and divergence counts for the determinism scenarios.

Prompts come from ``corun_sglang.tools.generate.token_prompts``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from corun_sglang.compare import Generation, first_divergence
from corun_sglang.tools.generate import generation


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
        return generation(url, req, timeout=900)

    if not concurrent:
        return [one(r) for r in requests]
    with ThreadPoolExecutor(max_workers=max(1, len(requests))) as pool:
        return list(pool.map(one, requests))


def compare(reference: list[Generation], other: list[Generation]) -> list[int | None]:
    return [first_divergence(a, b) for a, b in zip(reference, other, strict=True)]


def summary(divergences: list[int | None]) -> dict:
    bad = [d for d in divergences if d is not None]
    return {"comparisons": len(divergences), "divergent": len(bad), "first_steps": bad[:50]}
