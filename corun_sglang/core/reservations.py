"""What full-sequence admission holds of the KV pool, as numbers an operator can read.

Under ``--corun`` a request is admitted only when the pool holds its whole sequence
(``policy.reserved_tokens``: prompt + ``max_new_tokens``) beside those of the requests already
admitted (``policy.admits``). The reservation, not the tokens written so far, decides how many
requests run at once. Pure functions over reservations and pool sizes; ``adapters`` reads SGLang's
scheduler and ``metrics`` exports the numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from corun_sglang.core import policy


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The KV pool as full-sequence admission sees it at one moment.

    Invariant: ``reserved_tokens <= pool_tokens`` whenever admission alone admitted the requests,
    and ``used_tokens <= reserved_tokens`` (a request never writes past its reservation)."""

    reserved_tokens: int  # sum of the reservations of admitted, unfinished requests
    used_tokens: int  # KV tokens written now
    pool_tokens: int  # the KV pool
    waiting_for_kv: int  # waiting requests whose reservation does not fit beside the admitted ones
    waiting_for_isolation: int  # waiting requests that would fit now but for one prefill at a time
    shared_tokens: int = 0  # prefix cache: KV tokens running requests share (counted once, not reserved)
    cached_tokens: int = 0  # prefix cache: KV tokens cached for later hits that no running request holds


def snapshot(admitted: Iterable[int], waiting: Iterable[int], pool_tokens: int, free_tokens: int,
             max_running: int, shared_tokens: int = 0, cached_tokens: int = 0) -> Snapshot:
    """The pool's numbers from the reservations of the ``admitted`` and ``waiting`` requests.

    A waiting request waits for KV when its reservation does not fit beside the admitted ones
    (``policy.admits`` refuses it for KV); it waits for isolation when it fits and fewer than
    ``max_running`` (N) run, so only the prefill taking one request (or one pack) at a time holds it back.
    With the prefix cache, reservations leave out the KV running requests share (``shared_tokens``), which
    the pool holds once beside them; cached KV no one holds is evicted on demand and holds nothing back.
    At most the free slots, ``max_running`` less the admitted, count as waiting for isolation: the rest
    wait for N."""
    admitted = list(admitted)
    reserved = sum(admitted)
    room = pool_tokens - reserved - shared_tokens
    waiting = list(waiting)
    fits = sum(1 for w in waiting if w <= room)
    return Snapshot(
        reserved_tokens=reserved,
        used_tokens=pool_tokens - free_tokens,
        pool_tokens=pool_tokens,
        waiting_for_kv=len(waiting) - fits,
        waiting_for_isolation=min(fits, max(0, max_running - len(admitted))),
        shared_tokens=shared_tokens,
        cached_tokens=cached_tokens,
    )


def sglang_max_new_tokens(prompt_len: int, max_req_len: int, pool_tokens: int, page_size: int,
                          given: int | None = None) -> int:
    """The ``max_new_tokens`` SGLang's scheduler gives a request (``Scheduler.init_req_max_new_tokens``).

    Without one (``given`` None: an OpenAI request without ``max_tokens``) it is the rest of the
    context, ``max_req_len - prompt_len - 1``; any value is capped to that and to what the pool holds."""
    paged_prompt = -(-prompt_len // page_size) * page_size
    wanted = 1 << 30 if given is None else given
    return max(0, min(wanted, max_req_len - prompt_len - 1, pool_tokens - paged_prompt - page_size - 1))


def fit_at_once(reservation: int, pool_tokens: int, max_running: int) -> int:
    """How many requests of one ``reservation`` full-sequence admission runs at once."""
    return min(max_running, pool_tokens // reservation)


def capacity_line(context_len: int, max_req_len: int, pool_tokens: int, page_size: int, max_running: int,
                  default_max_new_tokens: int | None) -> str:
    """One log line: how many requests without ``max_tokens`` the pool runs at once.

    Without ``--corun-default-max-new-tokens`` such a request reserves about the whole context, whatever
    its prompt (the count is for a 1-token prompt, the most that fit). With it, a request reserves its
    prompt plus the bound; the line gives the average prompt length up to which all N fit."""
    one = sglang_max_new_tokens(1, max_req_len, pool_tokens, page_size, default_max_new_tokens)
    reservation = policy.reserved_tokens(1, one, page_size)
    n = f"N = {max_running:,}"
    if default_max_new_tokens is None:
        fit = fit_at_once(reservation, pool_tokens, max_running)
        return (f"corun admission: a request without max_tokens gets the rest of the {context_len:,}-token context "
                f"as max_new_tokens and reserves {reservation:,} KV tokens: {fit:,} of {n} such requests fit the "
                f"{pool_tokens:,}-token KV pool at once. To run more, send max_tokens or bound them with "
                "--corun-default-max-new-tokens")
    beside = one + page_size  # a reservation less its prompt's pages
    prompt_room = (pool_tokens // max_running - beside) // page_size * page_size
    head = (f"corun admission: a request without max_tokens gets max_new_tokens {one:,} "
            f"(--corun-default-max-new-tokens) and reserves its prompt + {beside:,} KV tokens: ")
    if prompt_room >= 1:
        return head + (f"all {n} such requests fit the {pool_tokens:,}-token KV pool at once while their prompts "
                       f"average at most {prompt_room:,} tokens")
    fit = fit_at_once(reservation, pool_tokens, max_running)
    return head + f"{fit:,} of {n} such requests fit the {pool_tokens:,}-token KV pool at once with 1-token prompts"
