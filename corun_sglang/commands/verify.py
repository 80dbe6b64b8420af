"""``corun-sglang verify``: audit any OpenAI-compatible server for batch invariance.

Each prompt is sent alone (one request in flight), then inside concurrent
rounds: once with all prompts and filler requests at once, once more in
reversed order. Every request carries its own ``seed``. A prompt passes when
its completion (tokens and sampled-token logprobs, compared as bits) is the
same in every round; the report names the first divergent step otherwise.

Each reply's ``system_fingerprint`` (the OpenAI field naming the server's
configuration; None from a server that sends none) is collected per round. The
check passes only when every prompt passes and every reply carries the same
fingerprint: a server whose configuration changed mid-run has compared nothing.
A run that would compare nothing (no prompt, or concurrent rounds without a
co-runner) is refused before any request (``problems``).

The prompts are plain text built from a fixed word list, so the check needs
nothing from the model but the completions endpoint with ``logprobs``.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Sequence

from corun_sglang.core.compare import Generation, first_divergence, served_logprob
from corun_sglang.probes import harness
from corun_sglang.probes.generate import text_prompts

#: The prompts verify sends: text of seeded words (``tools.generate.text_prompts``).
prompts = text_prompts


@dataclasses.dataclass(frozen=True)
class Request:
    prompt: str
    seed: int


@dataclasses.dataclass(frozen=True)
class Reply:
    generation: Generation
    fingerprint: str | None = None  # the reply's ``system_fingerprint``


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


@dataclasses.dataclass
class Audit:
    """A run's per-prompt reports and the fingerprints its replies carried, by round."""

    prompts: list[PromptReport]
    fingerprints: dict[str, list[str | None]]  # round name -> each distinct fingerprint, in order of arrival

    @property
    def fingerprints_differ(self) -> bool:
        return len({f for seen in self.fingerprints.values() for f in seen}) > 1

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.prompts) and not self.fingerprints_differ


Send = Callable[[Request], Reply]


def problems(prompts: int, batch: int) -> list[str]:
    """What keeps ``prompts`` prompts in concurrent rounds of ``batch`` requests from comparing anything
    (empty: nothing). Each round holds every prompt and at least one co-runner, so ``batch`` is at least
    ``prompts`` and at least 2."""
    out = []
    if prompts < 1:
        out.append(f"--prompts {prompts}: nothing to check; give at least 1")
    if batch < max(2, prompts):
        out.append(f"--batch {batch}: a concurrent round holds every prompt and a co-runner, so --batch must be "
                   f"at least {max(2, prompts)} (--prompts {prompts}, and 2)")
    return out


def openai_sender(base_url: str, model: str, max_tokens: int, temperature: float,
                  api_key: str = "EMPTY", extra_body: dict | None = None, timeout: float = 600) -> Send:
    """A ``Send`` over the OpenAI completions API (the official client; thread-safe)."""
    import openai

    client = openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, timeout=timeout)

    def send(req: Request) -> Reply:
        out = client.completions.create(
            model=model, prompt=req.prompt, max_tokens=max_tokens, temperature=temperature,
            seed=req.seed, logprobs=0, extra_body=extra_body or None,
        )
        lp = out.choices[0].logprobs
        if lp is None or lp.token_logprobs is None:
            raise RuntimeError("the server returned no logprobs; verify needs `logprobs` support")
        generation = Generation(tuple(lp.tokens), tuple(served_logprob(x) for x in lp.token_logprobs))
        return Reply(generation, getattr(out, "system_fingerprint", None))

    return send


def _distinct(replies: Sequence[Reply]) -> list[str | None]:
    return list(dict.fromkeys(r.fingerprint for r in replies))


def run(send: Send, texts: Sequence[str], batch: int, seed: int = 0) -> Audit:
    """Alone, then concurrent rounds of at least ``batch`` requests, each round's requests all at once
    (``harness.together``); one report per prompt and the fingerprints of each round. ``ValueError`` where
    ``problems`` finds the run would compare nothing."""
    found = problems(len(texts), batch)
    if found:
        raise ValueError("; ".join(found))
    requests = [Request(t, seed + i) for i, t in enumerate(texts)]
    fillers = [Request(t, seed + 100_000 + i)
               for i, t in enumerate(prompts(max(0, batch - len(requests)), seed=seed + 1))]
    alone = [send(r) for r in requests]
    fingerprints = {"alone": _distinct(alone)}
    rounds = {}
    mixed = list(requests) + fillers
    random.Random(seed).shuffle(mixed)
    rounds["concurrent"] = mixed
    rounds["concurrent reversed"] = mixed[::-1]
    results = {}
    for name, order in rounds.items():
        outs = harness.together(send, order)
        fingerprints[name] = _distinct(outs)
        by_request = {id(r): g for r, g in zip(order, outs)}
        results[name] = [by_request[id(r)] for r in requests]
    reports = [
        PromptReport(i, {name: first_divergence(alone[i].generation, got[i].generation)
                         for name, got in results.items()})
        for i in range(len(requests))
    ]
    return Audit(reports, fingerprints)


def fingerprint_line(fingerprints: dict[str, list[str | None]]) -> str:
    """The fingerprints a run's replies carried: one, none, or how they differ by round."""
    seen = list(dict.fromkeys(f for round_seen in fingerprints.values() for f in round_seen))
    if len(seen) == 1:
        return ("system_fingerprint: none (the server sends none)" if seen[0] is None
                else f"system_fingerprint: {seen[0]} in every reply")
    by_round = "; ".join(f"{name}: {', '.join(map(str, found))}" for name, found in fingerprints.items())
    return f"system_fingerprint DIFFERS across rounds ({by_round}): the server's configuration changed mid-run"


def render(audit: Audit) -> str:
    reports = audit.prompts
    lines = [r.line() for r in reports]
    bad = sum(not r.ok for r in reports)
    comparisons = sum(len(r.divergences) for r in reports)
    lines.append(fingerprint_line(audit.fingerprints))
    lines.append(
        f"{len(reports)} prompts, {comparisons} comparisons: "
        + ("no divergence" if bad == 0 else f"{bad} prompts diverge")
        + ("; fingerprints differ" if audit.fingerprints_differ else "")
    )
    return "\n".join(lines)
