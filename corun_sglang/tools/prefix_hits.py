"""Which prefix-cache hits a reply of ``--corun-prefix-cache`` may show, and which one a scenario predicts.

A reply's ``cached_tokens`` is the prompt prefix its prefill did not compute. SGLang caps the cached prefix of a
prompt of L tokens at ``cap``: L - 1, or where its prompt logprobs start. The deterministic prefix cache
(``corun_sglang.core.prefix_cache``) serves it only

- whole grid chunks, up to its frontier and the cap (``prefix_cache.grid_hit``);
- all but its last token, from the stored tail of a prompt whose first L - 1 tokens are its own, where the
  grid chunks reach its frontier and the cap allows it (``prefix_cache.tail_usable``).

``allowed`` is every length those rules can give; ``predicted`` the one they give against a known cache.

Invariants: pure; ``predicted`` is always one of ``allowed``'s lengths; without a grid chunk or a tail in reach
(a prompt of at most ``GRID`` tokens with no stored twin, or a cap of 0) only 0 is allowed.
"""

from __future__ import annotations

from corun_sglang.core.prefix_cache import GRID, frontier, grid_hit, tail_usable


def cap(prompt_len: int, logprob_start_len: int | None = None) -> int:
    """SGLang's limit on a prompt's cached prefix: all but its last token, and no further than where its prompt
    logprobs start (a ``logprob_start_len`` below 0 or None asks for none)."""
    limit = max(prompt_len - 1, 0)
    return limit if logprob_start_len is None or logprob_start_len < 0 else min(limit, logprob_start_len)


def allowed(prompt_len: int, logprob_start_len: int | None = None, grid: int = GRID) -> set[int]:
    """Every ``cached_tokens`` the rules can give a prompt: grid multiples up to its frontier and its cap, and
    L - 1 where a stored tail may complete a hit."""
    limit = cap(prompt_len, logprob_start_len)
    hits = set(range(0, min(frontier(prompt_len, grid), limit) + 1, grid))
    if tail_usable(prompt_len, frontier(prompt_len, grid), limit, grid):
        hits.add(prompt_len - 1)
    return hits


def predicted(prompt_len: int, held_len: int, shared: int, logprob_start_len: int | None = None,
              grid: int = GRID) -> int:
    """The hit the rules give a prompt from a cache that holds what one other prompt left there: a prompt of
    ``held_len`` tokens (0: an empty cache) whose first ``shared`` tokens are this prompt's. It left its grid
    chunks, which this prompt shares as far as both agree; and its tail, which serves this prompt where the two
    have the same first L - 1 tokens (so the same length)."""
    limit = cap(prompt_len, logprob_start_len)
    hit = grid_hit(min(shared, frontier(held_len, grid)), prompt_len, limit, grid)
    if held_len == prompt_len and shared >= prompt_len - 1 and tail_usable(prompt_len, hit, limit, grid):
        return prompt_len - 1
    return hit
