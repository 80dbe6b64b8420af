"""Request-bound seed adapters: every request leaves the tokenizer, and every batch row is sampled, with
its own seed.

Invariants:
- a request without a seed that samples (``max_new_tokens`` is not 0) gets ``seeds.request_seed`` of the
  server seed, its content (``seeds.content_digest``) and how many unseeded requests of that content this
  tokenizer manager sent before (its ``seeds.Occurrences`` in ``_received``);
- sample ``i`` of an ``n > 1`` request gets ``seeds.child_seed(base, i)`` on its own copy of the shared
  ``SamplingParams``, ``base`` being its seed or, unseeded, the seed above counted once per request; ``i``
  and ``base`` are kept per logical request's state in ``_children``, never on the state;
- the seed each request was sent with is kept for its ``ReqState`` (``sent_seed``), never on the state;
- a scheduler never raises on a malformed seed: the tokenizer's check refuses such requests, and a
  scheduler samples it from the derived seed of its content.
"""

from __future__ import annotations

import copy
import logging
import weakref
from typing import Any

from corun_sglang.core import requests_check, seeds
from corun_sglang.serving import sampling_kernels
from corun_sglang.serving.adapters import state

logger = logging.getLogger(__name__)

#: The unseeded requests of each content each SGLang ``TokenizerManager`` sent.
_received: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

#: For each logical ``n > 1`` request's ``ReqState``: (children sent so far, the base seed).
_children = state.IdentityMap()

#: For each request's ``ReqState``: the seed it was sent with.
_sent = state.IdentityMap()


def _valid_seed(sampling_params) -> int | None:
    """The request's own seed, or None (none given, or one the tokenizer's check would have refused)."""
    problem = requests_check.seed_problem(sampling_params.sampling_seed)
    if problem:  # the tokenizer's check refuses such a request; a scheduler never raises on one
        logger.error("corun: %s; the request is sampled from its derived seed instead", problem)
        return None
    return sampling_params.sampling_seed


def _derived(manager, sampling_params, input_ids, counted: bool) -> int:
    """The seed of an unseeded request: of its content and, when ``counted``, how many unseeded requests of
    that content ``manager`` sent before (else the first of its kind's)."""
    content = seeds.content_digest(input_ids, seeds.params_of(sampling_params))
    occurrence = 0
    if counted:
        counter = _received.get(manager)
        if counter is None:
            counter = _received[manager] = seeds.Occurrences()
        occurrence = counter.next(content)
    return seeds.request_seed(state.config().random_seed, content, occurrence)


@state.corun_only
def batch_seeds(original, self, batch, vocab_size):
    """Every row of a ``--corun`` batch carries its request's seed (its content's derived seed if none)."""
    result = original(self, batch, vocab_size)
    random_seed = state.config().random_seed
    values = []
    for r in batch.reqs:
        sp = r.sampling_params
        seed = _valid_seed(sp)
        if seed is None:
            content = seeds.content_digest(r.origin_input_ids, seeds.params_of(sp))
            seed = sp.sampling_seed = seeds.request_seed(random_seed, content)
        values.append(seed)
    self.sampling_seed = sampling_kernels.seeds_of(values, device=batch.device)
    return result


def _seed_request(manager, tokenized_obj) -> None:
    sp = tokenized_obj.sampling_params
    if sp is None or not hasattr(sp, "sampling_seed"):
        return
    input_ids = list(tokenized_obj.input_ids) if tokenized_obj.input_ids is not None else []
    logical = manager.child_rid_to_logical_rid.get(tokenized_obj.rid)
    if logical is None or sp.max_new_tokens == 0:  # one request, or the prompt-only request of n > 1
        given = _valid_seed(sp)
        sp.sampling_seed = given if given is not None else _derived(manager, sp, input_ids, sp.max_new_tokens != 0)
        seed = sp.sampling_seed
    else:
        # Sample i of an n > 1 request: children share one SamplingParams object, so each gets its own copy
        # with the child seed derived from (base, i).
        parent = manager.rid_to_state[logical]
        index, base = _children.get(parent, (0, None))
        if base is None:
            base = _valid_seed(sp)
            if base is None:
                base = _derived(manager, sp, input_ids, counted=True)
        _children[parent] = (index + 1, base)
        child = copy.copy(sp)
        seed = child.sampling_seed = seeds.child_seed(base, index)
        tokenized_obj.sampling_params = child
    own = manager.rid_to_state.get(tokenized_obj.rid)
    if own is not None:
        _sent[own] = seed


def sent_seed(req_state: Any) -> int | None:
    """The seed the request of ``req_state`` (SGLang's ``ReqState``) was sent with, or None (not sent)."""
    return _sent.get(req_state)


@state.corun_only
def send_one_request(original, self, tokenized_obj, *args, **kwargs):
    """Requests leave the tokenizer manager with their seed fixed."""
    _seed_request(self, tokenized_obj)
    return original(self, tokenized_obj, *args, **kwargs)


@state.corun_only
def send_batch_request(original, self, tokenized_objs, *args, **kwargs):
    """A batch of requests leaves the tokenizer manager with each seed fixed."""
    for obj in tokenized_objs:
        _seed_request(self, obj)
    return original(self, tokenized_objs, *args, **kwargs)
