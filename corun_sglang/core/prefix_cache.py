"""The deterministic prefix cache (``--corun-prefix-cache``) as pure functions: where a prompt's prefill chunks
end, which cache hits give the cold run's bits, and the store of prompt tails that identical prompts share.

A prompt of L tokens prefills in chunks that end on a fixed grid of ``GRID`` tokens from position 0, then in
one chunk up to its second-to-last token, then its last token alone (``boundaries``): the same chunks whether
part of it came from the cache or not. Two kinds of hits then reproduce the cold run's chunks exactly:

- a hit that ends on the grid (``grid_hit``): the KV of whole grid chunks is a function of the tokens up to
  the chunk's end alone (each chunk has the same shape in every prompt that holds it), so any prompt sharing
  those tokens may use it; the radix tree holds nothing else (``frontier``);
- a hit of all but the last token (``tail``): the KV of the chunk between the last grid point and L - 1 has
  a shape that depends on L, so it is shared only among prompts whose first L - 1 tokens are the same
  (``tail_key``), through ``TailStore``, never through the tree. An RL group or ``n > 1`` then prefills its
  prompt once, and each sample computes only the last token, a step the cold run takes too.

KV written by decode, and by a prompt's last-token step, is never served: a cold run computes those
positions in a prefill chunk, a different shape. (The grid rule was measured on stock SGLang:
docs/results/prefix_grid.md.)

Invariants: every function here is pure; ``TailStore`` holds opaque slot handles and counts, and changes only
through its methods; an entry in use (``users > 0``) is never chosen for eviction.
"""

from __future__ import annotations

import dataclasses
import hashlib
from array import array
from typing import Any, Iterable, Sequence

#: Tokens per prefill chunk, from position 0: a hit that ends on this grid gives the cold run's bits.
#: 1,024 cost 1.1-1.2x the default chunking on 4k-16k-token prompts, 256 2.1-2.6x (prefix_grid.md).
GRID = 1024


def frontier(prompt_len: int, grid: int = GRID) -> int:
    """The last grid point before a prompt's last token: where its whole grid chunks end (0 if none)."""
    return max(prompt_len - 1, 0) // grid * grid


def boundaries(prompt_len: int, grid: int = GRID) -> list[int]:
    """The ends of a prompt's prefill chunks, in order: every grid point before its last token, then the
    token before the last (where it is not on the grid), then the prompt's end."""
    ends = list(range(grid, frontier(prompt_len, grid) + 1, grid))
    if prompt_len >= 2 and prompt_len - 1 not in ends:
        ends.append(prompt_len - 1)
    if prompt_len >= 1:
        ends.append(prompt_len)
    return ends


def next_chunk(prompt_len: int, done: int, grid: int = GRID) -> int:
    """Tokens of the next prefill chunk of a prompt of which ``done`` tokens have KV (0 when none is left).

    ``done`` is a chunk boundary or a hit (``grid_hit``, ``tail``), so the chunk ends where the cold run's did."""
    for end in boundaries(prompt_len, grid):
        if end > done:
            return end - done
    return 0


def grid_hit(matched: int, prompt_len: int, cap: int | None = None, grid: int = GRID) -> int:
    """The tokens of a radix-tree match of ``matched`` tokens a prompt may use: down to the grid, at most its
    frontier, and at most ``cap`` (SGLang's own limit: the prompt logprobs asked for start there)."""
    limit = frontier(prompt_len, grid) if cap is None else min(cap, frontier(prompt_len, grid))
    return min(matched, limit) // grid * grid


def tail_usable(prompt_len: int, hit: int, cap: int | None, grid: int = GRID) -> bool:
    """Whether a prompt whose tree hit is ``hit`` may take a stored tail: the hit reaches its frontier, the
    tail is not empty, and ``cap`` lets the hit reach the second-to-last token."""
    end = prompt_len - 1
    return hit == frontier(prompt_len, grid) and end > hit and (cap is None or cap >= end)


def tail_key(tokens: Sequence[int], prompt_len: int, extra_key: Any = None) -> str:
    """The identity of a prompt's tail: a digest of its first L - 1 tokens (and SGLang's cache namespace)."""
    head = array("q", tokens[: max(prompt_len - 1, 0)]).tobytes()
    return hashlib.sha256(repr(extra_key).encode() + b"\0" + head).hexdigest()


@dataclasses.dataclass
class Tail:
    """The KV of a prompt tail: slots for positions ``start`` (its frontier) to ``end`` (L - 1)."""

    key: str
    slots: Any  # opaque: the KV slot indices, freed by the adapter
    start: int
    end: int
    users: int = 0
    stamp: int = 0  # the store's clock at its last use

    @property
    def tokens(self) -> int:
        return self.end - self.start


class TailStore:
    """Prompt tails shared by identical prompts, counted by their users and evicted least recently used."""

    def __init__(self):
        self._tails: dict[str, Tail] = {}
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def get(self, key: str) -> Tail | None:
        return self._tails.get(key)

    def add(self, tail: Tail) -> bool:
        """Keep ``tail`` (its first user counted) unless one of its key is kept already: then False, and the
        caller keeps its own slots."""
        if tail.key in self._tails:
            return False
        tail.users, tail.stamp = 1, self._tick()
        self._tails[tail.key] = tail
        return True

    def acquire(self, key: str) -> Tail:
        tail = self._tails[key]
        tail.users += 1
        tail.stamp = self._tick()
        return tail

    def release(self, key: str) -> None:
        tail = self._tails[key]
        if tail.users <= 0:
            raise ValueError(f"tail {key[:12]} released more often than acquired")
        tail.users -= 1
        tail.stamp = self._tick()

    def evict(self, tokens: int) -> list[Tail]:
        """Unused tails, least recently used first, until they hold ``tokens`` or none is left; removed."""
        chosen, freed = [], 0
        for tail in sorted((t for t in self._tails.values() if t.users == 0), key=lambda t: t.stamp):
            if freed >= tokens:
                break
            chosen.append(self._tails.pop(tail.key))
            freed += tail.tokens
        return chosen

    def clear(self) -> list[Tail]:
        """Every tail, removed (the pool they point into is being emptied); in use or not."""
        gone, self._tails = list(self._tails.values()), {}
        return gone

    def evictable_tokens(self) -> int:
        return sum(t.tokens for t in self._tails.values() if t.users == 0)

    def used_tokens(self) -> int:
        return sum(t.tokens for t in self._tails.values() if t.users > 0)

    def __len__(self) -> int:
        return len(self._tails)

    def tails(self) -> Iterable[Tail]:
        return list(self._tails.values())


def newly_shared(path_tokens: Iterable[tuple[int, int]], tail: Tail | None) -> int:
    """Shared KV tokens a request's admission newly holds: the tokens of the tree nodes on its hit's path that
    no running request holds yet (``(tokens, lock_ref)`` per node), and its tail's where no one uses it."""
    tree = sum(tokens for tokens, locks in path_tokens if locks == 0)
    return tree + (tail.tokens if tail is not None and tail.users == 0 else 0)
