"""What a determinism scenario proves, computed from what it sent and received: rows a skeptic can recount.

A scenario sends requests (``Sent``): each has a ``key`` (which request: the same key means the same
body, so the same output is owed), a ``run`` (which sending of it), and a ``role``:

- ``reference``: the request served alone; every other run of its key is compared with it;
- ``null``: the request served alone once more (the null control: it must equal the reference, or the
  harness itself, a prefix cache or an unseeded sampler, would explain a divergence);
- ``compared``: the request among co-runners, in another order, streamed, beside aborted requests...;
- ``corunner``: sent only to run beside compared requests (checked whole, not compared);
- ``aborted``: a co-runner the scenario aborts (neither checked whole nor compared).

``judge`` turns one (shape, arm, scenario)'s sends into one ``requests.jsonl`` row per compared,
null or reference output (with its digest, first divergence, prompt length and the prompt tokens a
prefix cache served it, ``cached_tokens``), one ``suite.jsonl`` row of counts and evidence (the
cached tokens in all, and per role: ``cached_by_role``), and the problems that fail the test.

Invariants: pure; counts are recomputable from the request rows alone (``compare.digest``); every
output is checked whole: non-empty, and of its ``max_new_tokens`` unless it ended by EOS or a stop
condition (``ignore_eos`` false); the overlap recorded for a row is its worst compared request's (the
smallest margin over its intended count), and each compared request's row carries its own
(``intended``, ``running_max``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from corun_sglang.core.compare import Generation, digest, first_divergence
from corun_sglang.tools.loads import Overlap

ROLES = ("reference", "null", "compared", "corunner", "aborted")


@dataclasses.dataclass(frozen=True)
class Sent:
    key: str
    run: str
    role: str
    params: dict  # the request's sampling_params
    generation: Generation | None  # None: no reply (an aborted co-runner may have none)
    start: float = 0.0
    end: float = 0.0
    #: requests the scenario claims were running beside this one, itself included (compared runs)
    intended: int = 0
    reference_arm: str | None = None  # compared with another arm's reference of the same key
    prompt_tokens: int = 0  # the request's prompt length
    logprob_start_len: int | None = None  # where its prompt logprobs start, if it asked for them


def whole(generation: Generation | None, params: dict) -> str | None:
    """Why an output is not whole for its request, or None: empty, cut short, or too long."""
    if generation is None or not generation.tokens:
        return "empty output"
    n, want = len(generation.tokens), params.get("max_new_tokens")
    if len(generation.logprobs) != n:
        return f"{n} tokens but {len(generation.logprobs)} logprobs"
    if want is None:
        return None
    if params.get("ignore_eos"):
        return None if n == want else f"{n} of {want} tokens with ignore_eos"
    if n > want:
        return f"{n} tokens, more than max_new_tokens {want}"
    if n < want and generation.finish not in ("stop", None):
        return f"{n} of {want} tokens, ended by {generation.finish!r}, not by EOS or a stop condition"
    return None


def greedy(body: dict) -> dict:
    """``body`` with greedy decoding: what an arm that ignores ``sampling_seed`` is sent."""
    params = {**body["sampling_params"], "temperature": 0.0}
    return {**body, "sampling_params": params}


@dataclasses.dataclass
class Judged:
    requests: list[dict]
    row: dict
    problems: list[str]


def judge(shape: str, arm: str, scenario: str, sents: list[Sent], overlap_of: Callable[[Sent], Overlap] | None,
          references: dict[str, Sent] | None = None, **extra) -> Judged:
    """Rows and problems of one arm's run of a scenario.

    ``overlap_of(sent)`` reads the server's running counts during a compared request (None: overlap is
    not claimed); ``references`` holds other arms' references by key (for ``reference_arm``).
    """
    problems, out = [], []
    own = {}
    for s in sents:
        if s.role not in ROLES:
            raise ValueError(f"unknown role {s.role!r}")
        if s.role == "reference":
            if s.key in own:
                problems.append(f"{s.key}: two references")
            own[s.key] = s
        if s.role != "aborted":
            why = whole(s.generation, s.params)
            if why:
                problems.append(f"{s.key} {s.run}: {why}")
    first_steps, null_first, worst = [], [], None
    comparisons = nulls = 0
    cached = sum(s.generation.cached_tokens for s in sents if s.generation is not None)
    by_role = {role: sum(s.generation.cached_tokens for s in sents if s.role == role and s.generation is not None)
               for role in ROLES if any(s.role == role for s in sents)}
    for s in sents:
        if s.role in ("corunner", "aborted"):
            continue
        ref = own.get(s.key) if s.reference_arm is None else (references or {}).get(s.key)
        if ref is None:
            problems.append(f"{s.key} {s.run}: no reference")
            continue
        gen = s.generation or Generation((), ())
        step = None if s.role == "reference" else first_divergence(ref.generation or Generation((), ()), gen)
        out.append({"shape": shape, "arm": arm, "scenario": scenario, "key": s.key, "run": s.run, "role": s.role,
                    "digest": digest(gen), "tokens": len(gen.tokens), "finish": gen.finish,
                    "first_divergence": step, "prompt_tokens": s.prompt_tokens, "cached_tokens": gen.cached_tokens,
                    **({"logprob_start_len": s.logprob_start_len} if s.logprob_start_len is not None else {}),
                    **({"reference_arm": s.reference_arm} if s.reference_arm else {}),
                    **({"nonfinite_logprobs": gen.nonfinite_logprobs} if gen.nonfinite_logprobs else {})})
        if s.role == "null":
            nulls += 1
            if step is not None:
                null_first.append(step)
        elif s.role == "compared":
            comparisons += 1
            if step is not None:
                first_steps.append(step)
            if overlap_of is not None and s.intended:
                seen = overlap_of(s)
                out[-1].update(intended=s.intended, running_max=seen.observed_max)
                if worst is None or seen.observed_max - s.intended < worst[1].observed_max - worst[0]:
                    worst = (s.intended, seen)
    row = {"shape": shape, "arm": arm, "scenario": scenario, "comparisons": comparisons,
           "divergent": len(first_steps), "first_steps": first_steps[:50], "null_comparisons": nulls,
           "null_divergent": len(null_first), "cached_tokens": cached, "cached_by_role": by_role,
           "claims_overlap": any(s.role == "compared" and s.intended for s in sents),
           "overlap": None if worst is None else worst[1].as_row(worst[0]), **extra}
    if null_first:
        problems.append(f"null control: {len(null_first)} of {nulls} alone-vs-alone runs differ "
                        f"(first steps {null_first[:10]})")
    if worst is not None and worst[1].observed_max < worst[0]:
        problems.append(f"overlap not proven: the server ran at most {worst[1].observed_max} requests "
                        f"({worst[1].samples} samples) while one needed {worst[0]}")
    return Judged(out, row, problems)
