"""Thin hook adapters: each checks ``--corun`` and hands the decision to a pure policy.

Every adapter here is named in ``hooks.HOOKS`` and is a pass-through when the
server runs without ``--corun``.
"""

from __future__ import annotations

import logging

from corun_sglang import policy
from corun_sglang.startup import check_startup

logger = logging.getLogger(__name__)


def _corun(server_args) -> bool:
    return bool(getattr(server_args, "corun", False))


def scheduler_init(original, self, server_args, *args, **kwargs):
    """Scheduler start: a ``--corun`` scheduler re-checks its own process before loading weights."""
    if _corun(server_args):
        check_startup()
        logger.info("corun scheduler: %s", server_args.corun_config.summary())
    return original(self, server_args, *args, **kwargs)


def _serving_corun() -> bool:
    """Whether this process serves with ``--corun`` (its published server args say so)."""
    from sglang.srt.runtime_context import get_context

    try:
        return _corun(get_context().server_args)
    except ValueError:  # not published: this process serves nothing
        return False


def chunked_req_token_budget(original, self):
    """Next chunk of a chunked prefill: the configured chunk size, whatever memory is free."""
    if not _serving_corun():
        return original(self)
    return policy.chunk_budget(self.rem_chunk_tokens)
