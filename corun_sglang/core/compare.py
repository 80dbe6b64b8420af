"""Bitwise comparison of generations: where two runs of one request first differ, and their digests.

A generation is the output token ids with their sampled-token logprobs (equal-length sequences), the
prompt's logprobs where they were asked for, the top-k logprobs of each output step and prompt position
and the logprobs of chosen token ids at each output step where those were asked for (each an ordered
tuple of ``(logprob, token id)`` pairs), and how the output ended. Two generations agree only if all of
these but the ending are identical bit for bit (logprobs compared as IEEE-754 bit patterns, so
-0.0 != 0.0 and NaN payloads count; a top-k list in its order, so two orders of equal values differ);
how they ended and how many prompt tokens a prefix cache served are facts about the run, not part of the
comparison. SGLang's JSON (orjson) writes a logprob that is not finite (-inf, NaN) as null, and gives the
prompt's first position none: every such value, in every part, reads as the one NaN ``float("nan")``, so
two nulls at one place agree and a null never equals a number.

``digest`` is a function of exactly the compared parts: two generations agree iff their digests are
equal (up to SHA-256 collisions), so a committed digest lets anyone recount agreements. A generation
without top-k or chosen-token logprobs has the digest it had before those parts existed.
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
    #: per output step, its top-k ``(logprob, token id)`` pairs in the order served; empty when not asked for.
    top_logprobs: tuple[tuple[tuple[float, int], ...], ...] = ()
    #: per prompt position from ``logprob_start_len`` on, its top-k pairs; empty when not asked for.
    prompt_top_logprobs: tuple[tuple[tuple[float, int], ...], ...] = ()
    #: per output step, the ``(logprob, token id)`` pairs of the chosen ids (``token_ids_logprob``).
    token_ids_logprobs: tuple[tuple[tuple[float, int], ...], ...] = ()

    @property
    def nonfinite_logprobs(self) -> int:
        """Sampled tokens whose logprob is not finite (served as null, read as NaN): a row with no allowed token,
        where the token is whatever the kernels made of it."""
        return sum(x != x for x in self.logprobs)

    @classmethod
    def of(cls, tokens: Sequence[int], logprobs: Sequence[float], prompt_logprobs: Sequence = (),
           finish: str | None = None, cached_tokens: int = 0, top_logprobs: Sequence = (),
           prompt_top_logprobs: Sequence = (), token_ids_logprobs: Sequence = ()) -> "Generation":
        return cls(tuple(int(t) for t in tokens), tuple(served_logprob(x) for x in logprobs),
                   tuple(served_logprob(x) for x in prompt_logprobs), finish,
                   int(cached_tokens), _pairs(top_logprobs), _pairs(prompt_top_logprobs), _pairs(token_ids_logprobs))

    @classmethod
    def of_reply(cls, body) -> "Generation":
        """From an SGLang ``/generate`` reply asked with ``return_logprob`` (and, where asked, top-k or
        chosen-token logprobs)."""
        meta = body["meta_info"]
        steps = meta["output_token_logprobs"]
        finish = meta.get("finish_reason")
        return cls.of([s[1] for s in steps], [s[0] for s in steps],
                      [s[0] for s in meta.get("input_token_logprobs") or ()],
                      finish.get("type") if isinstance(finish, dict) else finish, meta.get("cached_tokens") or 0,
                      meta.get("output_top_logprobs") or (), meta.get("input_top_logprobs") or (),
                      meta.get("output_token_ids_logprobs") or ())


def served_logprob(x) -> float:
    """A logprob as served: null (not finite, or none given) reads as NaN."""
    return float("nan") if x is None else float(x)


def _pairs(steps: Sequence) -> tuple[tuple[tuple[float, int], ...], ...]:
    """Per step, its ``(logprob, token id)`` pairs (SGLang's ``[logprob, id, text]`` entries; a step without
    any, such as the prompt's first position, is empty)."""
    return tuple(tuple((served_logprob(e[0]), int(e[1])) for e in (step or ())) for step in steps)


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def first_difference(a: Sequence[float], b: Sequence[float]) -> int | None:
    """The first index at which two sequences of logprobs differ in bits; None if identical. A length
    difference counts as a difference at the shorter length."""
    for i, (x, y) in enumerate(zip(a, b)):
        if _bits(x) != _bits(y):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def first_divergence(a: Generation, b: Generation) -> int | None:
    """The first step at which ``a`` and ``b`` differ in token or logprob bits; None if identical.

    Prompt logprobs or prompt top-k logprobs that differ (in bits, ids, order or number) give ``PROMPT``. A
    length difference counts as a divergence at the shorter length. Outputs whose tokens and logprobs agree
    but whose top-k or chosen-token logprobs differ diverge at the first step where those differ.
    """
    if first_difference(a.prompt_logprobs, b.prompt_logprobs) is not None:
        return PROMPT
    if _steps_differ(a.prompt_top_logprobs, b.prompt_top_logprobs) is not None:
        return PROMPT
    steps = zip(a.tokens, b.tokens, a.logprobs, b.logprobs)
    for step, (ta, tb, la, lb) in enumerate(steps):
        if ta != tb or _bits(la) != _bits(lb):
            return step
    if len(a.tokens) != len(b.tokens) or len(a.logprobs) != len(b.logprobs):
        return min(len(a.tokens), len(b.tokens), len(a.logprobs), len(b.logprobs))
    found = [s for s in (_steps_differ(a.top_logprobs, b.top_logprobs),
                         _steps_differ(a.token_ids_logprobs, b.token_ids_logprobs)) if s is not None]
    return min(found) if found else None


def _steps_differ(a, b) -> int | None:
    """The first step whose ``(logprob, id)`` pairs differ in order, id or bits (a missing step differs)."""
    for step, (pa, pb) in enumerate(zip(a, b)):
        if len(pa) != len(pb) or any(ia != ib or _bits(la) != _bits(lb) for (la, ia), (lb, ib) in zip(pa, pb)):
            return step
    return None if len(a) == len(b) else min(len(a), len(b))


def digest(g: Generation) -> str:
    """16 hex digits of SHA-256 over the token ids and the bit patterns of both logprob sequences.

    Each part is length-prefixed, so no two different generations share an encoding.
    """
    h = hashlib.sha256()
    for part, fmt in ((g.tokens, "<q"), (g.logprobs, "<d"), (g.prompt_logprobs, "<d")):
        h.update(struct.pack("<q", len(part)))
        for x in part:
            h.update(struct.pack(fmt, x))
    for tag, steps in ((b"top", g.top_logprobs), (b"prompt-top", g.prompt_top_logprobs),
                       (b"token-ids", g.token_ids_logprobs)):
        if not steps:  # absent parts leave the digest as it was before they existed
            continue
        h.update(tag + struct.pack("<q", len(steps)))
        for pairs in steps:
            h.update(struct.pack("<q", len(pairs)))
            for logprob, token in pairs:
                h.update(struct.pack("<dq", logprob, token))
    return h.hexdigest()[:16]
