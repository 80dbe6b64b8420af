"""Request bodies and a concurrent ``/generate`` client for the determinism scenarios.

``send`` posts ``Item``s (all at once, or one after another) and returns ``evidence.Sent``s: each output
with the client's monotonic send and receive times, which ``tools.loads`` windows read the server's
running counts against, and its prompt's length and logprob start (what a prefix cache may serve it);
all at once is ``corun_sglang.probes.harness.together``. A streamed body (``"stream": true``) is read to
its last chunk, whose ``meta_info`` holds the whole output (SGLang streams cumulative logprobs unless told
otherwise).
Prompts come from ``corun_sglang.probes.generate.token_prompts``."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import httpx

from corun_sglang.core.compare import Generation
from corun_sglang.probes.harness import together
from corun_sglang.tools.evidence import Sent


def request(prompt, max_new_tokens, temperature, seed=None, top_p=1.0, top_k=-1, min_p=0.0, *,
            ignore_eos=True, prompt_logprobs=False, **more) -> dict:
    params = {
        "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
        "top_k": top_k, "min_p": min_p, "ignore_eos": ignore_eos, **more,
    }
    if seed is not None:
        params["sampling_seed"] = seed
    body = {"input_ids": prompt, "sampling_params": params, "return_logprob": True}
    if prompt_logprobs:
        body["logprob_start_len"] = 0
    return body


@dataclasses.dataclass(frozen=True)
class Item:
    key: str
    run: str
    role: str
    body: dict
    intended: int = 0


def _reply(client: httpx.Client, url: str, body: dict):
    """SGLang's reply to ``body`` (the last chunk if streamed); None unless 200 (an aborted request)."""
    if not body.get("stream"):
        reply = client.post(url + "/generate", json=body)
        return reply.json() if reply.status_code == 200 else None
    last = None
    with client.stream("POST", url + "/generate", json=body) as reply:
        if reply.status_code != 200:
            return None
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                last = json.loads(line[len("data: "):])
    return last


def _one(client: httpx.Client, url: str, item: Item) -> list[Sent]:
    """One item's outputs; a reply other than 200, or a server that stopped answering, gives no output
    (``whole`` names it), so one arm's crash is that arm's finding, not the other arms' failure."""
    start = time.monotonic()
    try:
        body = _reply(client, url, item.body)
    except (httpx.HTTPError, ValueError):
        body = None
    end = time.monotonic()
    params = item.body["sampling_params"]
    prompt = {"prompt_tokens": len(item.body.get("input_ids") or ()),
              "logprob_start_len": item.body.get("logprob_start_len")}
    if body is None or isinstance(body, dict) and "meta_info" not in body:
        return [Sent(item.key, item.run, item.role, params, None, start, end, item.intended, **prompt)]
    outs = body if isinstance(body, list) else [body]
    keys = [item.key] if len(outs) == 1 else [f"{item.key}#{i}" for i in range(len(outs))]
    return [Sent(k, item.run, item.role, params, Generation.of_reply(o), start, end, item.intended, **prompt)
            for k, o in zip(keys, outs)]


def send(url: str, items: list[Item], concurrent: bool = True) -> list[Sent]:
    """Send ``items``; their outputs in item order (an ``n > 1`` request's samples as keys ``key#i``). One client,
    with a connection per item, serves them all: each thread only posts, so a burst leaves the client at once.

    All at once means every item's thread is up before any posts (a barrier): a burst's first request never
    reaches the server while the client is still starting the threads of the rest, which on a loaded client can
    take longer than that request runs alone."""
    limits = httpx.Limits(max_connections=len(items) + 1, max_keepalive_connections=len(items) + 1)
    with httpx.Client(timeout=900, limits=limits) as client:
        if not concurrent:
            return [s for item in items for s in _one(client, url, item)]
        ready = threading.Barrier(max(1, len(items)))

        def post(item: Item) -> list[Sent]:
            ready.wait(timeout=120)
            return _one(client, url, item)

        return [s for group in together(post, items) for s in group]


def generate(url: str, requests: list[dict], concurrent: bool = True) -> list[Generation]:
    """The generations of ``requests`` in request order (for tests that need no evidence rows). Every one
    must be whole (``evidence.whole``): a failed or cut-short request raises, so two missing outputs can
    never compare equal."""
    from corun_sglang.tools.evidence import whole

    sents = send(url, [Item(str(i), "run", "compared", r) for i, r in enumerate(requests)], concurrent)
    broken = [f"request {s.key}: {why}" for s in sents if (why := whole(s.generation, s.params))]
    assert not broken, "; ".join(broken[:10])
    return [s.generation for s in sents]


def compare(reference: list[Generation], other: list[Generation]) -> list[int | None]:
    from corun_sglang.core.compare import first_divergence

    return [first_divergence(a, b) for a, b in zip(reference, other, strict=True)]


def summary(divergences: list[int | None]) -> dict:
    bad = [d for d in divergences if d is not None]
    return {"comparisons": len(divergences), "divergent": len(bad), "first_steps": bad[:50]}
