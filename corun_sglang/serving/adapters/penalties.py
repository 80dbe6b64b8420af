"""Penalty adapters: under ``--corun`` a request's penalties at a decode step count exactly its own earlier outputs.

SGLang's penalizers (frequency, presence, repetition, ``min_new_tokens``) keep per-row state that a decode
step feeds with one token per request (``ScheduleBatch.cumulate_penalty_output_tokens``, called while
the step is prepared). With the overlap scheduler, the step is prepared before the previous step's
result is processed, so SGLang feeds ``req.output_ids[-1]``: the token of two steps back (the prompt's
last token on the first step), or of the step just before when something else ran in between, such as
a co-runner's prefill. Which outputs a request's penalties count then depends on its co-runners'
arrivals: a token can be counted, skipped or never reach the state.

Under ``--corun`` with the overlap scheduler the feeding moves to the step's launch, where the step's
input ids are resolved on the GPU (``Scheduler._forward_isolation``, entered after
``resolve_forward_inputs`` and before the penalties are accumulated for the forward): a decode step's
input id is the request's previous output token, so at the step that samples output k the state has
counted exactly outputs 0 .. k-1, as SGLang's non-overlap scheduler counts them. The feeding runs on the
forward stream, ordered before the forward's reads and, through SGLang's WAR barrier, before the next
iteration's filter or merge of the same tensors.

Invariants:
- under ``--corun``, with the overlap scheduler, a decode batch whose penalizers are required feeds each
  row its own step input id, once per launch, and the preparation feeds nothing;
- a decode batch whose input ids are missing or not one per request stops the server
  (``CorunContractError``);
- without the overlap scheduler, or without ``--corun``, SGLang feeds as it ships.
"""

from __future__ import annotations

from corun_sglang.serving.adapters import state
from corun_sglang.core.stops import CorunContractError


def _feeds_at_launch(batch) -> bool:
    return bool(getattr(batch, "enable_overlap", False)) and state.config() is not None


def prepared_feed(original, self, *args, **kwargs):
    """SGLang's feeding of penalties while a decode step is prepared: under ``--corun`` with the overlap
    scheduler the launch feeds them instead."""
    if _feeds_at_launch(self):
        return None
    return original(self, *args, **kwargs)


def feed_step_inputs(batch) -> None:
    """Feed a decode batch's resolved step input ids (each row's previous output) to its penalizers."""
    import torch

    if batch.forward_mode is None or not batch.forward_mode.is_decode():
        return
    info = batch.sampling_info
    orchestrator = None if info is None else info.penalizer_orchestrator
    if orchestrator is None or not orchestrator.is_required:
        return
    ids = batch.input_ids
    if ids is None or ids.dim() != 1 or ids.shape[0] != len(batch.reqs):
        shape = None if ids is None else tuple(ids.shape)
        raise CorunContractError(
            f"a decode step of {len(batch.reqs)} requests with penalties launched with input ids of shape {shape}, "
            "not one per request, so their penalties cannot count their own outputs. Fix: corun-sglang is "
            "written against SGLang 0.5.17; reinstall it")
    orchestrator.cumulate_output_tokens(ids.to(torch.int64))


def launch_feed(original, self, batch, *args, **kwargs):
    """``Scheduler._forward_isolation``: under ``--corun`` an overlapped decode step feeds its penalizers its
    resolved input ids before SGLang accumulates the penalties for the forward."""
    overlap = state.bind(original, self, batch, *args, **kwargs).arguments.get("overlap")
    if overlap and _feeds_at_launch(batch):
        feed_step_inputs(batch)
    return original(self, batch, *args, **kwargs)
