"""Prefix-cache adapters (``--corun-prefix-cache``): SGLang's radix cache serving only the hits
``corun_sglang.core.prefix_cache`` makes exact, and the store of prompt tails identical prompts share.

Invariants (each a pass-through without ``--corun-prefix-cache``):
- a request's match is cut down to the grid (``prefix_cache.grid_hit``) and extended by a stored tail only
  where ``prefix_cache.tail_usable``; what it may take is decided again each time it is matched;
- the radix tree receives whole grid chunks only (SGLang's own insert at a chunk that ends on the grid); a
  prompt's tail goes to the ``TailStore`` of its tree (one per ``RadixCache``, ``_stores``), and neither its
  last token's KV nor decode KV is cached;
- a request holds the tree path of its hit (SGLang's lock) and its tail (``TailStore.acquire``) from its
  admission to its end; a tail in use is never evicted; store tails count as the tree's evictable tokens
  while unused and as its protected tokens while used, so SGLang's pool accounting stays whole;
- the store is emptied with the tree (SGLang's ``reset``, which ``/flush_cache`` calls before it empties the
  KV pool), so no tail outlives the slots it points at;
- a request's ``cache_protected_len`` covers the KV it does not own (its tree path, and a stored tail), which
  full-sequence admission counts once for all who share it (``shared_tokens``), never in a request's own.
- every slot tensor it hands SGLang (tree values, stored tails, ``req.prefix_indices``) is int64, as SGLang's
  own cache hands them: its GPU writer of the request pool (``write_req_to_token_pool_triton``) reads a
  prefix through an int64 pointer, whatever the tensor's dtype.
What each request holds lives in ``_held``, never on the request.
"""

from __future__ import annotations

import dataclasses
import weakref

import torch

from corun_sglang.core import prefix_cache
from corun_sglang.serving.adapters import state

#: The tail store of each SGLang ``RadixCache``.
_stores: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class Held:
    """What a request holds of the cache: its tail's key, and whether it holds the stored tail."""

    key: str | None = None  # its tail's key (computed once)
    offered: bool = False  # its last match offered it the stored tail
    tail: bool = False  # it holds that tail (acquired, or added by it)


_held: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def grid() -> int | None:
    """This process's prefix grid, or None where it serves no ``--corun-prefix-cache``."""
    cfg = state.config()
    return None if cfg is None else cfg.prefix_grid


def store(tree_cache) -> prefix_cache.TailStore:
    found = _stores.get(tree_cache)
    if found is None:
        found = _stores[tree_cache] = prefix_cache.TailStore()
    return found


def held(req) -> Held:
    found = _held.get(req)
    if found is None:
        found = _held[req] = Held()
    return found


def _key(req) -> str:
    h = held(req)
    if h.key is None:
        h.key = prefix_cache.tail_key(req.origin_input_ids, len(req.origin_input_ids), req.extra_key)
    return h.key


def match_prefix(original, self, params):
    """A waiting request's match: the tree's down to the grid, plus its stored tail where it may take it."""
    g = grid()
    req = getattr(params, "req", None)
    if g is None or req is None or self.disable:
        return original(self, params)
    result = original(self, params)
    prompt_len, cap = len(req.origin_input_ids), params.key.limit
    hit = prefix_cache.grid_hit(len(result.device_indices), prompt_len, cap, g)
    if hit < len(result.device_indices):
        from sglang.srt.mem_cache.radix_cache import RadixKey

        key = RadixKey(params.key.token_ids, params.key.extra_key, params.key.is_bigram, limit=hit)
        result = original(self, dataclasses.replace(params, key=key))
    h = held(req)
    h.offered = False
    if prefix_cache.tail_usable(prompt_len, len(result.device_indices), cap, g):
        tail = store(self).get(_key(req))
        if tail is not None:
            h.offered = True
            indices = torch.cat([result.device_indices, tail.slots.to(result.device_indices.device)])
            result = result._replace(device_indices=indices, cache_protected_len=len(indices))
    return result


def newly_shared(tree_cache, req) -> int:
    """Shared KV tokens admitting ``req`` newly holds (``prefix_cache.newly_shared``): its path's unheld nodes,
    and its offered tail where no running request uses it."""
    path, node = [], req.last_node
    while node is not None and node is not tree_cache.root_node:
        path.append((len(node.key), node.lock_ref))
        node = node.parent
    h = _held.get(req)
    tail = store(tree_cache).get(h.key) if h is not None and h.offered else None
    return prefix_cache.newly_shared(path, tail)


def shared_tokens(tree_cache) -> int:
    """KV tokens running requests share: the tree's locked tokens and the tails in use (``protected_size``)."""
    return tree_cache.protected_size()


def admitted(tree_cache, req) -> None:
    """``req`` joined a prefill batch: it holds its offered tail from now on."""
    h = held(req)
    if h.offered:
        store(tree_cache).acquire(h.key)
        h.tail = True


def first_chunk(req) -> int:
    """Tokens of a request's next prefill chunk from its prefix (``prefix_cache.next_chunk``)."""
    return prefix_cache.next_chunk(len(req.origin_input_ids), len(req.prefix_indices), grid())


def add_chunked_req(original, self, req, *args, **kwargs):
    """The next chunk of an in-flight prefill ends on the request's own chunk boundary."""
    if grid() is not None and self.rem_chunk_tokens is not None:
        self.rem_chunk_tokens = min(self.rem_chunk_tokens, first_chunk(req))
    return original(self, req, *args, **kwargs)


def cache_unfinished_req(original, self, req, *args, **kwargs):
    """After a prefill chunk: a chunk ending on the grid goes into the tree (SGLang's insert); the chunk that
    ends one token before the prompt's end is its tail, kept in the store unless one of its key is."""
    g = grid()
    if g is None or self.disable:
        return original(self, req, *args, **kwargs)
    prompt_len = len(req.origin_input_ids)
    end, start = len(req.get_fill_ids()), prefix_cache.frontier(prompt_len, g)
    if end <= start:
        return original(self, req, *args, **kwargs)
    slots = self.req_to_token_pool.req_to_token[req.req_pool_idx, :end]
    h = held(req)
    if not h.tail:
        tail = prefix_cache.Tail(_key(req), slots[start:end].to(dtype=torch.int64, copy=True), start, end)
        if store(self).add(tail):  # it now holds the stored tail; else its own slots stay its own
            h.tail = True
    if h.tail:
        req.cache_protected_len = end
    req.prefix_indices = slots.to(dtype=torch.int64, copy=True)


def cache_finished_req(original, self, req, is_insert: bool = True, *args, kv_len_to_handle: int, **kwargs):
    """A request ends: its whole grid chunks join the tree, its tail stays stored, the rest of its KV (its
    own tail, its last token, its decode) is freed, and it lets go of its path and its tail."""
    g = grid()
    if g is None or self.disable:
        return original(self, req, is_insert, *args, kv_len_to_handle=kv_len_to_handle, **kwargs)
    h = held(req)
    prompt_len = len(req.origin_input_ids)
    start = prefix_cache.frontier(prompt_len, g)
    kv = self.req_to_token_pool.req_to_token[req.req_pool_idx, :kv_len_to_handle]
    allocator = self.token_to_kv_pool_allocator
    tree_len = min(req.cache_protected_len, start)  # the tree path it holds
    if is_insert and not self.disable_finished_insert and kv_len_to_handle >= start > tree_len:
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        key = RadixKey(req.origin_input_ids[:start], req.extra_key, is_bigram=self.is_eagle)
        values = kv[:start].to(dtype=torch.int64, copy=True)
        inserted = self.insert(InsertParams(key=key, value=values, priority=getattr(req, "priority", 0) or 0))
        allocator.free_segment(kv[tree_len:inserted.prefix_len], start_pos=tree_len)  # duplicates
        tree_len = start
    own_from = prompt_len - 1 if h.tail else tree_len  # a held tail is the store's, never freed here
    if kv_len_to_handle > own_from:
        allocator.free_segment(kv[own_from:kv_len_to_handle], start_pos=own_from)
    if h.tail:
        store(self).release(_key(req))
        h.tail = False
    if req.last_node is not None:
        self.dec_lock_ref(req.last_node)


def evict(original, self, params, *args, **kwargs):
    """Unused stored tails go first (least recently used), then the tree's own eviction takes the rest."""
    if grid() is None or self.disable:
        return original(self, params, *args, **kwargs)
    freed = 0
    for tail in store(self).evict(params.num_tokens):
        self.token_to_kv_pool_allocator.free(tail.slots)
        freed += tail.tokens
    rest = original(self, dataclasses.replace(params, num_tokens=max(params.num_tokens - freed, 0)), *args, **kwargs)
    rest.num_tokens_evicted += freed
    return rest


def reset(original, self, *args, **kwargs):
    """SGLang empties the tree (``/flush_cache``, at idle, just before it empties the KV pool): the stored tails
    go with it, so none is served or counted from slots the pool hands out again."""
    if grid() is not None:
        store(self).clear()
    return original(self, *args, **kwargs)


def evictable_size(original, self, *args, **kwargs):
    """The tree's evictable tokens and the unused stored tails."""
    found = original(self, *args, **kwargs)
    return found if grid() is None or self.disable else found + store(self).evictable_tokens()


def protected_size(original, self, *args, **kwargs):
    """The tree's locked tokens and the stored tails in use."""
    found = original(self, *args, **kwargs)
    return found if grid() is None or self.disable else found + store(self).used_tokens()
