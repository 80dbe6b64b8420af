"""Bitwise comparison of generations: where two runs of one request first differ, and their digests.

A generation is the output token ids with their sampled-token logprobs (equal-length sequences), the
prompt's logprobs where they were asked for, and how the output ended. Two generations agree only if
tokens, output logprobs and prompt logprobs are identical bit for bit (logprobs compared as IEEE-754
bit patterns, so -0.0 != 0.0 and NaN payloads count); how they ended and how many prompt tokens a
prefix cache served are facts about the run, not part of the comparison.

``digest`` is a function of exactly the compared parts: two generations agree iff their digests are
equal (up to SHA-256 collisions), so a committed digest lets anyone recount agreements.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import Sequence

#: ``first_divergence``'s answer when the prompt logprobs differ (before any output step).
PROMPT = -1


@dataclasses.dataclass(frozen=True)
class Generation:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    #: logprobs of the prompt's tokens from ``logprob_start_len`` on (SGLang gives the first token none:
    #: it reads as NaN); empty when not asked for.
    prompt_logprobs: tuple[float, ...] = ()
    #: SGLang's ``finish_reason`` type: "length", "stop" (EOS, a stop token or string), "abort"; None if unknown.
    finish: str | None = None
    #: prompt tokens a prefix cache served (SGLang's ``meta_info["cached_tokens"]``).
    cached_tokens: int = 0

    @classmethod
    def of(cls, tokens: Sequence[int], logprobs: Sequence[float], prompt_logprobs: Sequence = (),
           finish: str | None = None, cached_tokens: int = 0) -> "Generation":
        return cls(tuple(int(t) for t in tokens), tuple(float(x) for x in logprobs),
                   tuple(float("nan") if x is None else float(x) for x in prompt_logprobs), finish,
                   int(cached_tokens))

    @classmethod
    def of_reply(cls, body) -> "Generation":
        """From an SGLang ``/generate`` reply asked with ``return_logprob``."""
        meta = body["meta_info"]
        steps = meta["output_token_logprobs"]
        finish = meta.get("finish_reason")
        return cls.of([s[1] for s in steps], [s[0] for s in steps],
                      [s[0] for s in meta.get("input_token_logprobs") or ()],
                      finish.get("type") if isinstance(finish, dict) else finish, meta.get("cached_tokens") or 0)


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def first_divergence(a: Generation, b: Generation) -> int | None:
    """The first step at which ``a`` and ``b`` differ in token or logprob bits; None if identical.

    Prompt logprobs that differ (in bits or in number) give ``PROMPT``. A length difference counts as
    a divergence at the shorter length.
    """
    if len(a.prompt_logprobs) != len(b.prompt_logprobs) or any(
            _bits(x) != _bits(y) for x, y in zip(a.prompt_logprobs, b.prompt_logprobs)):
        return PROMPT
    steps = zip(a.tokens, b.tokens, a.logprobs, b.logprobs)
    for step, (ta, tb, la, lb) in enumerate(steps):
        if ta != tb or _bits(la) != _bits(lb):
            return step
    if len(a.tokens) != len(b.tokens) or len(a.logprobs) != len(b.logprobs):
        return min(len(a.tokens), len(b.tokens), len(a.logprobs), len(b.logprobs))
    return None


def digest(g: Generation) -> str:
    """16 hex digits of SHA-256 over the token ids and the bit patterns of both logprob sequences.

    Each part is length-prefixed, so no two different generations share an encoding.
    """
    h = hashlib.sha256()
    for part, fmt in ((g.tokens, "<q"), (g.logprobs, "<d"), (g.prompt_logprobs, "<d")):
        h.update(struct.pack("<q", len(part)))
        for x in part:
            h.update(struct.pack(fmt, x))
    return h.hexdigest()[:16]
