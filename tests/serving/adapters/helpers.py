"""What the adapter tests share: SGLang's own requests, token allocator, chunk cache and ``PrefillAdder`` on
CPU tensors, and stand-ins for the SGLang objects an adapter reads, as far as it reads them."""

import types
from array import array

import torch

PACK = 256  # the tiny model packs prompts of 33 to 256 tokens (4 query heads on 2 KV heads)


def _cache(pool_tokens: int):
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    alloc = TokenToKVPoolAllocator(pool_tokens, torch.bfloat16, "cpu", None, False)
    r2t = ReqToTokenPool(size=16, max_context_len=8192, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(disable=True, req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=1)
    return alloc, ChunkCache(params)


def _req(rid, prompt_len, max_new, cache):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=max_new)
    sp.normalize(None)
    req = Req(str(rid), "", array("q", range(prompt_len)), sp, vocab_size=1024)
    req.init_next_round_input(cache)
    return req


def _adder(pool_tokens, running, chunk=4096, max_running=8, used=0):
    """A PrefillAdder over a pool of ``pool_tokens`` with ``running`` (prompt, max_new) requests."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.schedule_policy import PrefillAdder

    alloc, cache = _cache(pool_tokens)
    if used:
        alloc.alloc(used)
    batch = ScheduleBatch(reqs=[_req(100 + i, p, n, cache) for i, (p, n) in enumerate(running)], device="cpu")
    adder = PrefillAdder(
        1, cache, alloc, batch, 1.0, 16384, chunk,
        max_running_requests=max_running, prefill_max_requests=1,
    )
    return adder, cache


class _Scheduler(types.SimpleNamespace):
    """What the admission, reservation and stop adapters read of SGLang's ``Scheduler`` (weak-referable and
    hashed by identity, as it is)."""

    __hash__ = object.__hash__


def _recording(real, seen, result=None):
    """An ``original`` with ``real``'s signature: it records the arguments it gets and returns ``result``."""
    import inspect

    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__

    def original(*args, **kwargs):
        seen.update(inspect.signature(real).bind(*args, **kwargs).arguments)
        return result

    original.__signature__ = inspect.signature(real)
    return original


class _ReqState:
    """SGLang's ``ReqState`` of a request, as far as the adapter keeps it: by identity (weak-referable, as
    it is)."""


class _Manager:
    """The TokenizerManager attributes the seed adapter reads (weak-referable and hashed by identity, as
    SGLang's is)."""

    def __init__(self, children=()):
        import types

        self.server_args = types.SimpleNamespace(corun=True, random_seed=0)
        self.child_rid_to_logical_rid = {c: "parent" for c in children}
        self.rid_to_state = {"parent": _ReqState(), **{c: _ReqState() for c in children}}


def _generate(tm, obj):
    import asyncio

    async def run():
        return [out async for out in tm.generate_request(obj)]

    return asyncio.run(run())
