"""Bitwise comparison of generations: where two runs of one request first differ.

A generation is a pair of equal-length sequences, token ids and the
sampled-token logprobs. Two generations agree only if both are identical bit
for bit (logprobs compared as IEEE-754 bit patterns, so -0.0 != 0.0 and NaN
payloads count).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class Generation:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]

    @classmethod
    def of(cls, tokens: Sequence[int], logprobs: Sequence[float]) -> "Generation":
        return cls(tuple(int(t) for t in tokens), tuple(float(x) for x in logprobs))

    @classmethod
    def of_reply(cls, body) -> "Generation":
        """From an SGLang ``/generate`` reply asked with ``return_logprob``."""
        steps = body["meta_info"]["output_token_logprobs"]
        return cls.of([s[1] for s in steps], [s[0] for s in steps])


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def first_divergence(a: Generation, b: Generation) -> int | None:
    """The first step at which ``a`` and ``b`` differ in token or logprob bits; None if identical.

    A length difference counts as a divergence at the shorter length.
    """
    steps = zip(a.tokens, b.tokens, a.logprobs, b.logprobs)
    for step, (ta, tb, la, lb) in enumerate(steps):
        if ta != tb or _bits(la) != _bits(lb):
            return step
    if len(a.tokens) != len(b.tokens) or len(a.logprobs) != len(b.logprobs):
        return min(len(a.tokens), len(b.tokens), len(a.logprobs), len(b.logprobs))
    return None

