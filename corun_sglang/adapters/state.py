"""What an adapter reads: whether this process serves ``--corun``, its configuration, a request's prompt
and reservation, and the arguments of the SGLang call it wraps.

Invariants:
- ``config()`` is this process's published ``corun_config`` (``CorunServerArgs``) under ``--corun`` and
  None otherwise: one lookup per call, never a re-derivation from the server args;
- nothing here changes SGLang's state.
"""

from __future__ import annotations

import functools
import inspect

from corun_sglang import policy
from corun_sglang.config import CorunConfig, ablation_mechanisms


def corun(server_args) -> bool:
    """Whether ``server_args`` serve ``--corun``."""
    return bool(getattr(server_args, "corun", False))


def published():
    """The server args this process published, or None (it serves nothing)."""
    from sglang.srt.runtime_context import get_context

    try:
        return get_context().server_args
    except ValueError:  # not published: this process serves nothing
        return None


def serving_corun() -> bool:
    """Whether this process serves with ``--corun`` (its published server args say so)."""
    return corun(published())


def config() -> CorunConfig | None:
    """This process's CoRun configuration, or None where it does not serve ``--corun``."""
    args = published()
    return args.corun_config if corun(args) else None


def applies(mechanism: str) -> bool:
    """Whether this process applies ``mechanism``: under ``--corun``, or in a ``--corun-ablation``."""
    args = published()
    return corun(args) or mechanism in ablation_mechanisms(getattr(args, "corun_ablation", None))


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def bind(fn, *args, **kwargs) -> inspect.BoundArguments:
    """The arguments of a call of ``fn``, by parameter name (``bindings`` checks the names at startup)."""
    return _signature(fn).bind(*args, **kwargs)


def prompt(req) -> tuple[int, int]:
    """A request's ``(prompt_len, prefix_len)``."""
    return len(req.origin_input_ids), len(req.prefix_indices)


def reserved(req, page_size: int) -> int:
    """The KV tokens full-sequence admission reserves for a request (``policy.reserved_tokens``)."""
    return policy.reserved_tokens(len(req.origin_input_ids), req.sampling_params.max_new_tokens, page_size)
