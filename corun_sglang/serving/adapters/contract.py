"""The contract as clients see it: ``system_fingerprint`` and each sample's seed on every response, the
fingerprint and the configuration it digests on ``/server_info``.

The channel: each ``--corun`` scheduler adds ``INFO`` to the init info it hands the engine
(``Scheduler.get_init_info``): its TP rank, the digest of its loaded weights (``weights.of_model``), its
record environment and the resolved configuration. The engine passes every rank's info to the tokenizer
process (``Engine._set_startup_time``), which folds them into one ``fingerprint.system_fingerprint`` and
writes it into TP rank 0's info, the one ``/server_info`` shows.

Invariants:
- the fingerprint of each SGLang ``TokenizerManager`` lives in ``_fingerprints``, never on the manager; a
  ``--corun`` engine whose schedulers did not all report ``INFO`` does not start;
- every output a ``--corun`` tokenizer manager hands on (``_wait_one_response``) carries
  ``meta_info["system_fingerprint"]`` and ``meta_info["sampling_seed"]`` (``responses.stamp_meta``);
- every OpenAI completion and chat completion of a ``--corun`` server carries them too
  (``responses``): a response through a model of SGLang's own class with the two fields added
  (``_stamped``), a stream event by event (``responses.stamp_event``), its seeds found by request id in
  ``_stream_seeds``, a context variable the stream sets and the tokenizer manager's outputs fill.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
import typing
import weakref
from typing import Optional

from corun_sglang.core import fingerprint, responses
from corun_sglang.serving import weights
from corun_sglang.serving.adapters import seeds as request_seeds
from corun_sglang.serving.adapters import state
from corun_sglang.core.stops import CorunContractError

logger = logging.getLogger(__name__)

#: The key of the scheduler init info (and so of ``/server_info``) that holds the contract.
INFO = "corun_contract"

#: The ``system_fingerprint`` of each SGLang ``TokenizerManager``.
_fingerprints: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

#: Request id -> seed of the OpenAI stream being served in this context (None outside one).
_stream_seeds: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("corun_stream_seeds", default=None)


@state.corun_only_after
def scheduler_info(result, self, *args, **kwargs):
    """A ``--corun`` scheduler's init info gains ``INFO``: its TP rank, the digest of its loaded weights,
    its record environment and the resolved configuration."""
    if not isinstance(result, dict):
        return result
    cfg = state.config()
    runner = self.tp_worker.model_runner
    started = time.perf_counter()
    digest = weights.of_model(runner.model)
    logger.info("corun weights digest of TP rank %s: %s (%.2f s)", self.ps.tp_rank, digest,
                time.perf_counter() - started)
    result[INFO] = {
        "tp_rank": self.ps.tp_rank,
        "weights": digest,
        "environment": state.environment(runner),
        "configuration": fingerprint.configuration(cfg),
        "calibration": cfg.calibration,
    }
    return result


@state.corun_only_after
def hand_over(result, tokenizer_manager, scheduler_init_result, *args, **kwargs):
    """The engine hands the schedulers' init infos to the tokenizer process: under ``--corun`` their
    ``INFO`` becomes one ``system_fingerprint``, written into TP rank 0's info (``/server_info``)."""
    infos = scheduler_init_result.scheduler_infos
    if not infos or any(INFO not in info for info in infos):
        raise CorunContractError(
            f"{sum(INFO not in info for info in infos)} of {len(infos)} schedulers reported no {INFO} at "
            "start, so this server has no system_fingerprint. Fix: start every process of the server with "
            "corun-sglang installed")
    ranks = sorted((info[INFO] for info in infos), key=lambda r: r["tp_rank"])
    first = ranks[0]
    digests = [r["weights"] for r in ranks]
    value = fingerprint.system_fingerprint(fingerprint.fields(first["environment"], first["configuration"], digests))
    infos[0][INFO] = {
        "system_fingerprint": value,
        "configuration": first["configuration"],
        "tp_size": len(ranks),
        "weights": digests,
        "environment": first["environment"],
        "calibration": first.get("calibration"),
    }
    _fingerprints[tokenizer_manager] = value
    logger.info("corun system_fingerprint: %s", value)
    return result


def system_fingerprint(tokenizer_manager) -> str | None:
    """The ``system_fingerprint`` of ``tokenizer_manager``'s server (None before the engine handed it over)."""
    try:
        return _fingerprints.get(tokenizer_manager)
    except TypeError:  # not weak-referable: no engine handed it over
        return None


@state.corun_only_stream
async def stamp_outputs(original, self, obj, *args, **kwargs):
    """Every output of a ``--corun`` generate request carries the server's fingerprint and the seed the
    request was sent with."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    if not isinstance(obj, GenerateReqInput):
        async for out in original(self, obj, *args, **kwargs):
            yield out
        return
    seed = request_seeds.sent_seed(self.rid_to_state.get(obj.rid))
    value = system_fingerprint(self)
    streamed = _stream_seeds.get()
    if streamed is not None and seed is not None:
        streamed[obj.rid] = seed
    async for out in original(self, obj, *args, **kwargs):
        if isinstance(out, dict) and isinstance(out.get("meta_info"), dict):
            responses.stamp_meta(out["meta_info"], value, seed)
            responses.complete_logprobs(out["meta_info"])
        yield out


def _choice_class(response_class) -> type:
    (choice,) = typing.get_args(response_class.model_fields["choices"].annotation)
    return choice


@functools.lru_cache(maxsize=None)
def _stamped(response_class) -> tuple[type, type]:
    """``response_class`` (an OpenAI response model of SGLang) with ``system_fingerprint``, and its choice
    class with ``sampling_seed``: subclasses, so they serialize as SGLang's and add the two fields."""
    import pydantic

    choice = _choice_class(response_class)
    seeded = pydantic.create_model(choice.__name__, __base__=choice, sampling_seed=(Optional[int], None))
    stamped = pydantic.create_model(response_class.__name__, __base__=response_class,
                                    system_fingerprint=(Optional[str], None), choices=(list[seeded], ...))
    return stamped, seeded


def _restamp(response, value: str | None, seeds: list[int | None]):
    stamped, seeded = _stamped(type(response))

    def fields(model) -> dict:
        return {name: getattr(model, name) for name in type(model).model_fields}

    choices = [seeded.model_construct(_fields_set=c.model_fields_set | {"sampling_seed"},
                                      **fields(c), sampling_seed=seeds[c.index] if c.index < len(seeds) else None)
               for c in response.choices]
    return stamped.model_construct(_fields_set=response.model_fields_set | {"system_fingerprint"},
                                   **{**fields(response), "choices": choices}, system_fingerprint=value)


def _response(original, self, request, ret, *args, **kwargs):
    """A ``--corun`` OpenAI completion or chat completion (not streamed) carries ``system_fingerprint`` and,
    on each choice, the seed its sample was drawn from."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse, CompletionResponse

    response = original(self, request, ret, *args, **kwargs)
    if not isinstance(response, (CompletionResponse, ChatCompletionResponse)):
        return response
    return _restamp(response, system_fingerprint(self.tokenizer_manager), responses.choice_seeds(ret))


@state.corun_only
def completion_response(original, self, request, ret, *args, **kwargs):
    """``/v1/completions``, not streamed: ``_response``."""
    return _response(original, self, request, ret, *args, **kwargs)


@state.corun_only
def chat_response(original, self, request, ret, *args, **kwargs):
    """``/v1/chat/completions``, not streamed: ``_response``."""
    return _response(original, self, request, ret, *args, **kwargs)


@state.corun_only_stream
def completion_stream(original, self, *args, **kwargs):
    """``/v1/completions``, streamed: ``_stream``."""
    return _stream(original, self, *args, **kwargs)


@state.corun_only_stream
def chat_stream(original, self, *args, **kwargs):
    """``/v1/chat/completions``, streamed: ``_stream``."""
    return _stream(original, self, *args, **kwargs)


async def _stream(original, self, *args, **kwargs):
    """Every chunk of a ``--corun`` OpenAI stream carries ``system_fingerprint`` and, on each choice, the
    seed of the sample it continues."""
    manager = self.tokenizer_manager
    seen: dict = {}
    _stream_seeds.set(seen)  # this request's context, copied into the tasks that serve its samples
    value = system_fingerprint(manager)
    events = original(self, *args, **kwargs)
    try:
        async for event in events:
            yield responses.stamp_event(event, value, seen) if isinstance(event, str) else event
    finally:
        await events.aclose()
