"""Request-bound seed adapters: every request leaves the tokenizer, and every batch row is sampled, with
its own seed.

Invariants:
- a request without a seed gets ``seeds.request_seed`` of the server seed, its prompt and parameters;
- sample ``i`` of an ``n > 1`` request gets ``seeds.child_seed(seed, i)`` on its own copy of the shared
  ``SamplingParams``, ``i`` counted per logical request's state in ``_samples_sent``, never on the state;
- a scheduler never raises on a malformed seed: the tokenizer's check refuses such requests, and a
  scheduler samples it from the derived seed.
"""

from __future__ import annotations

import copy
import logging
import weakref
from typing import Any

from corun_sglang import requests_check, rng, seeds
from corun_sglang.adapters import state

logger = logging.getLogger(__name__)

#: How many sample children of each logical request's ``ReqState`` were sent (``_sample_index``), by the
#: state's identity: ``id`` -> (a weak reference to it, the count). A ``WeakKeyDictionary`` cannot hold it:
#: ``ReqState`` is a dataclass, compared by value and unhashable. An entry goes with its state.
_samples_sent: dict[int, tuple[weakref.ref, int]] = {}


def _count_sent(req_state: Any) -> int:
    """The children of ``req_state`` sent so far, counting one more."""
    key = id(req_state)
    ref, sent = _samples_sent.get(key, (None, 0))
    if ref is None or ref() is not req_state:

        def forget(dead, key=key):
            if _samples_sent.get(key, (None,))[0] is dead:
                del _samples_sent[key]

        ref, sent = weakref.ref(req_state, forget), 0
    _samples_sent[key] = (ref, sent + 1)
    return sent


def _ensure_seed(sampling_params, input_ids, random_seed) -> int:
    problem = requests_check.seed_problem(sampling_params.sampling_seed)
    if problem:  # the tokenizer's check refuses such a request; a scheduler never raises on one
        logger.error("corun: %s; the request is sampled from its derived seed instead", problem)
        sampling_params.sampling_seed = None
    if sampling_params.sampling_seed is None:
        sampling_params.sampling_seed = seeds.request_seed(
            random_seed, input_ids, seeds.params_of(sampling_params)
        )
    return sampling_params.sampling_seed


def batch_seeds(original, self, batch, vocab_size):
    """Every row of a ``--corun`` batch carries its request's seed (``seeds.request_seed`` if none was given)."""
    result = original(self, batch, vocab_size)
    server_args = state.published()
    if state.corun(server_args):
        values = [
            _ensure_seed(r.sampling_params, r.origin_input_ids, server_args.random_seed)
            for r in batch.reqs
        ]
        self.sampling_seed = rng.seeds_of(values, device=batch.device)
    return result


def _seed_request(manager, tokenized_obj) -> None:
    sp = tokenized_obj.sampling_params
    if sp is None or not hasattr(sp, "sampling_seed"):
        return
    input_ids = list(tokenized_obj.input_ids) if tokenized_obj.input_ids is not None else []
    logical = manager.child_rid_to_logical_rid.get(tokenized_obj.rid)
    if logical is None or sp.max_new_tokens == 0:
        _ensure_seed(sp, input_ids, manager.server_args.random_seed)
        return
    # Sample i of an n > 1 request: children share one SamplingParams object, so
    # each gets its own copy with the child seed derived from (seed, i).
    index = _sample_index(manager, logical)
    child = copy.copy(sp)
    base = sp.sampling_seed
    if base is None:
        base = seeds.request_seed(manager.server_args.random_seed, input_ids, seeds.params_of(sp))
    child.sampling_seed = seeds.child_seed(base, index)
    tokenized_obj.sampling_params = child


def _sample_index(manager, logical: str) -> int:
    """The position of the next sample child of the logical request ``logical``: 0, 1, ... in the order
    SGLang sends them (``TokenizerManager._handle_batch_request``). The count is kept for the logical
    request's own state, which SGLang creates for each request and drops once every child is sent, so
    the same request sent again counts from 0 whatever its rid."""
    return _count_sent(manager.rid_to_state[logical])


def send_one_request(original, self, tokenized_obj, *args, **kwargs):
    """Requests leave the tokenizer manager with their seed fixed."""
    if state.corun(self.server_args):
        _seed_request(self, tokenized_obj)
    return original(self, tokenized_obj, *args, **kwargs)


def send_batch_request(original, self, tokenized_objs, *args, **kwargs):
    """A batch of requests leaves the tokenizer manager with each seed fixed."""
    if state.corun(self.server_args):
        for obj in tokenized_objs:
            _seed_request(self, obj)
    return original(self, tokenized_objs, *args, **kwargs)
