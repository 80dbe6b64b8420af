"""Scheduling policy of CoRun as pure functions.

Nothing here touches SGLang objects; the adapters in ``corun_sglang.serving.adapters`` read
SGLang's state, call these functions and act on the answer.
"""

from __future__ import annotations


def chunk_budget(chunk_size: int) -> int:
    """Tokens the next chunk of an in-flight chunked prefill takes at most.

    Always the configured chunk size, never less: a prompt's chunk boundaries
    then depend only on its own length and the chunk size, not on free KV
    memory or on co-running requests (whose KV is reserved in full at
    admission, so the chunk always fits).
    """
    return chunk_size


def reserved_tokens(prompt_len: int, max_new_tokens: int, page_size: int) -> int:
    """KV tokens a request may ever hold: its prompt in whole pages, every new token, one alignment page.

    The same bound SGLang uses to cap ``max_new_tokens`` against the pool, so
    any request SGLang accepts fits an empty pool.
    """
    return -(-prompt_len // page_size) * page_size + max_new_tokens + page_size


def admits(
    candidate: int, running: list[int], pool_tokens: int, max_running: int
) -> bool:
    """Whether a waiting request may start now (the paper's full-sequence admission).

    ``candidate`` and ``running`` are ``reserved_tokens`` of the waiting
    request and of every admitted, unfinished request. It starts only if fewer
    than ``max_running`` (N) requests run and the KV pool holds the whole
    sequences of all of them plus its own. Under this rule a decode step never
    lacks KV memory, so no request is ever retracted, and admission does not
    depend on how far co-runners have decoded.
    """
    return len(running) < max_running and sum(running) + candidate <= pool_tokens

