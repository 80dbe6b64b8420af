"""Scheduling policy of CoRun as pure functions.

Nothing here touches SGLang objects; the adapters in ``adapters.py`` read
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
