"""What an adapter reads: whether this process serves ``--corun``, its configuration, a request's prompt
and reservation, a model runner's environment, and the arguments of the SGLang call it wraps.

Invariants:
- ``config()`` is this process's published ``corun_config`` (``CorunServerArgs``) under ``--corun`` and
  None otherwise: one lookup per call, never a re-derivation from the server args; it is the one answer to
  "does this process serve ``--corun``", and the guards (``corun_only``, ``corun_only_after``,
  ``corun_only_stream``) make an adapter a pass-through wherever it is None;
- an ``IdentityMap`` keeps a value for an object by identity and drops it with the object;
- nothing here changes SGLang's state.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any

from corun_sglang.core import policy
from corun_sglang.core.config import CorunConfig, ablation_mechanisms


def published():
    """The server args this process published, or None (it serves nothing)."""
    from sglang.srt.runtime_context import get_context

    try:
        return get_context().server_args
    except ValueError:  # not published: this process serves nothing
        return None


def config() -> CorunConfig | None:
    """This process's CoRun configuration, or None where it does not serve ``--corun``."""
    args = published()
    return args.corun_config if getattr(args, "corun", False) else None


def corun_only(adapter):
    """An AROUND adapter (``adapter(original, *args, **kwargs)``) that acts only under ``--corun``: elsewhere
    the call goes to ``original`` unchanged."""

    @functools.wraps(adapter)
    def guarded(original, *args, **kwargs):
        if config() is None:
            return original(*args, **kwargs)
        return adapter(original, *args, **kwargs)

    return guarded


def corun_only_after(adapter):
    """An AFTER adapter (``adapter(result, *args, **kwargs)``) that acts only under ``--corun``: elsewhere the
    result stands as SGLang returned it."""

    @functools.wraps(adapter)
    def guarded(result, *args, **kwargs):
        return result if config() is None else adapter(result, *args, **kwargs)

    return guarded


def corun_only_stream(adapter):
    """An AROUND adapter of an async generator that acts only under ``--corun``: elsewhere the items of
    ``original`` pass through unchanged."""

    @functools.wraps(adapter)
    async def guarded(original, *args, **kwargs):
        source = original(*args, **kwargs) if config() is None else adapter(original, *args, **kwargs)
        try:
            async for item in source:
                yield item
        finally:  # a consumer that stops early closes the source now, running its own cleanup
            await source.aclose()

    return guarded


def applies(mechanism: str) -> bool:
    """Whether this process applies ``mechanism``: under ``--corun``, or in a ``--corun-ablation``."""
    args = published()
    return config() is not None or mechanism in ablation_mechanisms(getattr(args, "corun_ablation", None))


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
    """The KV tokens full-sequence admission reserves for a request (``policy.reserved_tokens``): its whole
    sequence less the prompt prefix it does not own (``cache_protected_len``: the prefix cache's tree path
    and stored tail; 0 without it), which admission counts once for all who share it."""
    own = len(req.origin_input_ids) - req.cache_protected_len
    return policy.reserved_tokens(own, req.sampling_params.max_new_tokens, page_size)


def environment(model_runner) -> dict:
    """A model runner's ``environment.environment``: its model, options, GPU (``cpu`` without CUDA) and software."""
    import torch

    from corun_sglang.records import environment

    gpu = torch.cuda.get_device_name(torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    return environment.environment(
        model_runner.model_config.hf_config.to_dict(), model_runner.model_config.dtype, model_runner.server_args,
        gpu=gpu, cuda=torch.version.cuda, installed=environment.versions(), blas=environment.blas_setup(),
    )


class IdentityMap:
    """Values kept for objects by identity, each dropped when its object is: for SGLang objects that compare
    by value and do not hash (dataclasses such as ``ReqState``), which a ``WeakKeyDictionary`` cannot hold."""

    def __init__(self):
        self._items: dict[int, tuple[weakref.ref, Any]] = {}

    def get(self, obj, default=None):
        ref, value = self._items.get(id(obj), (None, default))
        return value if ref is not None and ref() is obj else default

    def __setitem__(self, obj, value) -> None:
        key = id(obj)
        ref = self._items.get(key, (None, None))[0]
        if ref is None or ref() is not obj:

            def forget(dead, key=key):
                if self._items.get(key, (None,))[0] is dead:
                    del self._items[key]

            ref = weakref.ref(obj, forget)
        self._items[key] = (ref, value)

    def __len__(self) -> int:
        return len(self._items)
