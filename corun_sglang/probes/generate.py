"""Seeded prompts for the requests the probes, tests and benchmarks send (``harness`` sends them).

A prompt is a function of its seed alone. Token-id prompts draw each id uniformly from
[``FIRST_TOKEN``, vocab) with ``random.Random``; text prompts draw words of ``WORDS``; where a length
is drawn, it is log-uniform between two bounds and drawn before the prompt's ids. Callers that share
one ``random.Random`` across prompts (and their own draws) pass it to ``token_ids``; the draws, and so
the prompts, are the same for the same seed and calls on every host and Python version that keeps
``random.Random``'s sequence.
"""

from __future__ import annotations

import random

#: Token ids drawn for prompts stay in [FIRST_TOKEN, vocab): clear of the special ids at the bottom.
FIRST_TOKEN = 100
#: The vocabulary token-id prompts draw from unless told: within every served model's.
VOCAB = 150000

#: The words of text prompts.
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their can has been if more when will "
    "would who so no time river stone light garden number winter market signal paper window "
    "engine forest silver bridge letter morning animal theory orange circle pocket summer "
    "user assistant system"
).split()


def log_uniform(rnd: random.Random, low: int, high: int) -> int:
    """A length in [low, high], log-uniform (one draw of ``rnd``)."""
    return int(round(low * (high / low) ** rnd.random()))


def token_ids(rnd: random.Random, length: int, vocab: int = VOCAB) -> list[int]:
    """``length`` token ids in [FIRST_TOKEN, vocab), drawn from ``rnd``."""
    return [rnd.randrange(FIRST_TOKEN, vocab) for _ in range(length)]


def token_prompts(count: int, low: int, high: int, seed: int, vocab: int = VOCAB) -> list[list[int]]:
    """``count`` token-id prompts of log-uniform lengths in [low, high], from ``seed``."""
    rnd = random.Random(seed)
    return [token_ids(rnd, log_uniform(rnd, low, high), vocab) for _ in range(count)]


def sized_prompts(lengths: list[int], seed: int, vocab: int = VOCAB) -> list[list[int]]:
    """One token-id prompt of each of ``lengths``, from ``seed``."""
    rnd = random.Random(seed)
    return [token_ids(rnd, n, vocab) for n in lengths]


def text_prompts(count: int, seed: int = 0, low: int = 8, high: int = 400) -> list[str]:
    """``count`` text prompts of log-uniform lengths in [low, high] words of ``WORDS``, from ``seed``."""
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(log_uniform(rnd, low, high))) for _ in range(count)]
