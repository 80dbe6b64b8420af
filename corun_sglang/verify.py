"""``corun-sglang verify``: audit any OpenAI-compatible server for batch invariance.

Each prompt is sent alone (one request in flight), then inside concurrent
rounds: once with all prompts and filler requests at once, once more in
reversed order. Every request carries its own ``seed``. A prompt passes when
its completion (tokens and sampled-token logprobs, compared as bits) is the
same in every round; the report names the first divergent step otherwise.

The prompts are plain text built from a fixed word list, so the check needs
nothing from the model but the completions endpoint with ``logprobs``.
"""

from __future__ import annotations

import dataclasses
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from corun_sglang.compare import Generation, first_divergence
from corun_sglang.tools.generate import WORDS, text_prompts  # noqa: F401 (WORDS: the words of the prompts)

#: The prompts verify sends: text of seeded words (``tools.generate.text_prompts``).
prompts = text_prompts


@dataclasses.dataclass(frozen=True)
class Request:
    prompt: str
    seed: int


@dataclasses.dataclass
class PromptReport:
    index: int
    divergences: dict[str, int | None]  # round name -> first divergent step (None: identical)

    @property
    def ok(self) -> bool:
        return all(step is None for step in self.divergences.values())

    def line(self) -> str:
        if self.ok:
            return f"prompt {self.index:3d}: identical in {len(self.divergences)} rounds"
        bad = "; ".join(f"{name} at step {step}" for name, step in self.divergences.items() if step is not None)
        return f"prompt {self.index:3d}: DIVERGES ({bad})"


Send = Callable[[Request], Generation]


def openai_sender(base_url: str, model: str, max_tokens: int, temperature: float,
                  api_key: str = "EMPTY", extra_body: dict | None = None, timeout: float = 600) -> Send:
    """A ``Send`` over the OpenAI completions API (the official client; thread-safe)."""
    import openai

    client = openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, timeout=timeout)

    def send(req: Request) -> Generation:
        out = client.completions.create(
            model=model, prompt=req.prompt, max_tokens=max_tokens, temperature=temperature,
            seed=req.seed, logprobs=0, extra_body=extra_body or None,
        )
        lp = out.choices[0].logprobs
        if lp is None or lp.token_logprobs is None:
            raise RuntimeError("the server returned no logprobs; verify needs `logprobs` support")
        return Generation(tuple(lp.tokens), tuple(float(x) for x in lp.token_logprobs))

    return send


def _concurrently(send: Send, requests: Sequence[Request]) -> list[Generation]:
    with ThreadPoolExecutor(max_workers=max(1, len(requests))) as pool:
        return list(pool.map(send, requests))


def run(send: Send, texts: Sequence[str], batch: int, seed: int = 0) -> list[PromptReport]:
    """Alone, then concurrent rounds of at least ``batch`` requests; one report per prompt."""
    requests = [Request(t, seed + i) for i, t in enumerate(texts)]
    fillers = [Request(t, seed + 100_000 + i)
               for i, t in enumerate(prompts(max(0, batch - len(requests)), seed=seed + 1))]
    alone = [send(r) for r in requests]
    rounds = {}
    mixed = list(requests) + fillers
    random.Random(seed).shuffle(mixed)
    rounds["concurrent"] = mixed
    rounds["concurrent reversed"] = mixed[::-1]
    results = {}
    for name, order in rounds.items():
        outs = _concurrently(send, order)
        by_request = {id(r): g for r, g in zip(order, outs)}
        results[name] = [by_request[id(r)] for r in requests]
    return [
        PromptReport(i, {name: first_divergence(alone[i], got[i]) for name, got in results.items()})
        for i in range(len(requests))
    ]


def render(reports: Sequence[PromptReport]) -> str:
    lines = [r.line() for r in reports]
    bad = sum(not r.ok for r in reports)
    comparisons = sum(len(r.divergences) for r in reports)
    lines.append(
        f"{len(reports)} prompts, {comparisons} comparisons: "
        + ("no divergence" if bad == 0 else f"{bad} prompts diverge")
    )
    return "\n".join(lines)
