"""Admission adapters: isolated prefill, full-sequence admission, the prefill pack's wait, no retraction.

Invariants:
- under ``--corun`` a waiting request is admitted only when ``policy.admits`` its whole sequence, into an
  empty prefill batch or, with a prefill pack, into one of packable prompts it joins (``packing.joins``);
  with the prefix cache, the KV its prompt shares is reserved once for all its sharers (the pool less the
  shared tokens, ``adapters.prefix``), and its first chunk ends on its own chunk boundary;
- a chunk of a chunked prefill is ``policy.chunk_budget`` long, whatever memory is free;
- a scheduler skips at most ``prefill_pack_wait`` prefills in a row (``packing.waits``); the count of
  each scheduler lives in ``_waited``, never on the scheduler;
- decode retraction never runs under ``--corun``.
"""

from __future__ import annotations

import weakref

from corun_sglang.core import packing, policy
from corun_sglang.serving.adapters import prefix, state
from corun_sglang.core.stops import CorunContractError

#: How many prefills in a row each SGLang ``Scheduler`` skipped for its pack (``prefill_wait``).
_waited: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def chunked_req_token_budget(original, self):
    """Next chunk of a chunked prefill: the configured chunk size, whatever memory is free."""
    if not state.applies("isolated-prefill"):
        return original(self)
    return policy.chunk_budget(self.rem_chunk_tokens)


@state.corun_only
def add_one_req(original, self, req, *args, **kwargs):
    """Admit a waiting request only under full-sequence admission (``policy.admits``), into an empty
    prefill batch or, with a prefill pack, into one of packable prompts it fits (``packing.joins``)."""
    cfg = state.config()
    pack = cfg.packing
    if self.can_run_list and pack is None:  # this prefill batch is taken: SGLang's own limit refuses the request
        return original(self, req, *args, **kwargs)
    from sglang.srt.managers.schedule_policy import AddReqResult

    prompt = state.prompt(req)
    if self.can_run_list and not (
        packing.joins([state.prompt(r) for r in self.can_run_list], prompt, *pack)
        # whole, never chunked: its page-rounded length fits what is left of the chunk
        and (self.rem_chunk_tokens is None or self.ceil_paged_tokens(prompt[0]) <= self.rem_chunk_tokens)
    ):
        return AddReqResult.OTHER
    running = [*([] if self.running_batch is None else self.running_batch.reqs), *self.can_run_list]
    shared = 0
    if cfg.prefix_grid is not None:  # shared KV counted once; the first chunk ends on its boundary
        shared = prefix.shared_tokens(self.tree_cache) + prefix.newly_shared(self.tree_cache, req)
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens = min(self.rem_chunk_tokens, prefix.first_chunk(req))
    if not policy.admits(
        candidate=state.reserved(req, self.page_size),
        running=[state.reserved(r, self.page_size) for r in running],
        pool_tokens=self.token_to_kv_pool_allocator.size - shared,
        max_running=self.max_running_requests,
    ):
        return AddReqResult.NO_TOKEN
    result = original(self, req, *args, **kwargs)
    if cfg.prefix_grid is not None and self.can_run_list and self.can_run_list[-1] is req:
        prefix.admitted(self.tree_cache, req)
    return result


def _pack_waits(scheduler, running_batch) -> bool:
    """``packing.waits`` for the scheduler's waiting queue and ``running_batch``, at this server's pack."""
    page = scheduler.page_size
    return packing.waits(
        ((*state.prompt(r), state.reserved(r, page)) for r in scheduler.waiting_queue),
        [state.reserved(r, page) for r in running_batch.reqs],
        scheduler.token_to_kv_pool_allocator.size, scheduler.max_running_requests, *state.config().packing,
    )


@state.corun_only
def prefill_wait(original, self, running_batch, *args, **kwargs):
    """With ``--corun-prefill-pack-wait W``: a prefill pack that admission would cut short or the queue
    leaves underfilled (``packing.waits``) is skipped for up to W passes in a row, each a decode step of
    ``running_batch`` instead; then it runs as admission allows."""
    wait = state.config().prefill_pack_wait
    if not wait:
        return original(self, running_batch, *args, **kwargs)
    waited = _waited.get(self, 0)
    if (waited < wait and self.chunked_req is None and self.waiting_queue
            and not running_batch.is_empty() and not running_batch.batch_is_full
            and _pack_waits(self, running_batch)):
        from sglang.srt.managers.schedule_batch import NextBatchPlan

        _waited[self] = waited + 1
        return NextBatchPlan(batch_to_run=None, running_batch=running_batch)
    _waited[self] = 0
    return original(self, running_batch, *args, **kwargs)


@state.corun_only
def retract_decode(original, self, server_args, *args, **kwargs):
    """Decode retraction never runs under ``--corun``: full-sequence admission rules it out."""
    raise CorunContractError(
        f"decode retraction was about to run for a batch of {len(self.reqs)} requests "
        f"(KV available: {self.token_to_kv_pool_allocator.available_size()} tokens). "
        "Full-sequence admission should make this impossible; please report it"
    )


@state.corun_only
def default_max_new_tokens(original, self, req, *args, **kwargs):
    """A request without ``max_new_tokens`` (a chat completion without ``max_tokens``) gets
    ``--corun-default-max-new-tokens`` before SGLang caps it to the context and the pool, so the
    reservation admission makes for it is bounded; unset, it keeps SGLang's own, the rest of the context."""
    bound = state.config().default_max_new_tokens
    if bound is not None and req.sampling_params.max_new_tokens is None:
        req.sampling_params.max_new_tokens = bound
    return original(self, req, *args, **kwargs)
