"""Operations adapters: reservations, step shapes and the ``corun_`` metrics made visible, contract stops answered.

Invariants:
- a ``--corun`` scheduler logs, once its KV pool is known, how many requests without ``max_tokens`` run at
  once (``reservations.capacity_line``); with ``--enable-metrics`` its collector publishes the ``corun_``
  gauges with SGLang's own stats (``reservations.snapshot``), and the steps each batch ran since the last
  publication (``steps.Tally``: decode steps by graph size, padding slots, prefills by kind), counted in
  Python ints as each batch runs, with no GPU read. The metrics of each SGLang collector, its step tally and
  the scheduler it serves live in ``_watched``, never on the collector;
- a ``CorunContractError`` in a ``--corun`` scheduler's event loop is counted, logged on one line
  (``stops.line``), answered to every request the scheduler holds (``stops.STATUS``), and then goes on
  to SGLang's scheduler-crash path, which stops the server.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from typing import Any

from corun_sglang.core import reservations, steps, stops
from corun_sglang.serving.adapters import state
from corun_sglang.core.stops import CorunContractError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Watch:
    metrics: Any  # metrics.Metrics
    scheduler: weakref.ref  # the scheduler whose reservations and steps the collector publishes
    decode_sizes: tuple[int, ...]  # the decode graphs the scheduler captures, ascending
    pack: tuple[int, int] | None  # its prefill pack and shortest packable prompt, or None
    tally: steps.Tally = dataclasses.field(default_factory=steps.Tally)  # steps since the last publication


#: The ``corun_`` metrics of each SGLang ``SchedulerMetricsCollector``, its step tally and the scheduler it
#: serves.
_watched: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _watch(collector, scheduler, counted, decode_sizes=(), pack=None) -> None:
    """Have ``collector`` publish ``counted`` (``metrics.Metrics``) for ``scheduler``, which captures the decode
    graphs ``decode_sizes`` and packs prefills at ``pack`` (``CorunConfig.packing``)."""
    _watched[collector] = _Watch(counted, weakref.ref(scheduler), tuple(decode_sizes), pack)
    counted.serve_decode_graphs(decode_sizes)


def _metrics_of(scheduler):
    """The ``corun_`` metrics of ``scheduler``'s collector, or None (no ``--enable-metrics``)."""
    collector = getattr(scheduler, "metrics_collector", None)
    watch = None if collector is None else _watched.get(collector)
    return None if watch is None else watch.metrics


def _admitted(scheduler) -> list:
    """The admitted, unfinished requests of ``scheduler``: running, in the batch it runs, a chunked prompt."""
    batches = (scheduler.running_batch, getattr(scheduler, "last_batch", None),
               getattr(scheduler, "cur_batch_for_debug", None))
    candidates = [r for b in batches if b is not None for r in b.reqs]
    if getattr(scheduler, "chunked_req", None) is not None:
        candidates.append(scheduler.chunked_req)
    seen, admitted = set(), []
    for req in candidates:
        if id(req) not in seen and not req.finished():
            seen.add(id(req))
            admitted.append(req)
    return admitted


@state.corun_only_after
def scheduler_reservations(result, self, *args, **kwargs):
    """A ``--corun`` scheduler, its KV pool known, logs how many requests without ``max_tokens`` run at once
    (``reservations.capacity_line``); with ``--enable-metrics`` it registers the ``corun_`` metrics under
    SGLang's scheduler labels, published whenever SGLang logs its own stats (``publish_reservations``)."""
    cfg = state.config()
    logger.info(reservations.capacity_line(
        self.model_config.context_len, self.max_req_len, self.token_to_kv_pool_allocator.size, self.page_size,
        self.max_running_requests, cfg.default_max_new_tokens,
    ))
    collector = self.metrics_collector
    if collector is not None:
        from corun_sglang.serving import metrics

        _watch(collector, self, metrics.Metrics(collector.labels), cfg.decode_sizes, cfg.packing)
    return result


def publish_reservations(result, self, *args, **kwargs):
    """With SGLang's scheduler stats, the ``corun_`` gauges: reservations of the admitted and waiting requests
    and the KV pool of the scheduler this collector serves (``reservations.snapshot``)."""
    watch = _watched.get(self)
    scheduler = None if watch is None else watch.scheduler()
    if scheduler is None:
        return result
    page, pool = scheduler.page_size, scheduler.token_to_kv_pool_allocator
    cfg = state.config()
    tree = scheduler.tree_cache if cfg is not None and cfg.prefix_grid is not None else None
    watch.metrics.publish(reservations.snapshot(
        [state.reserved(r, page) for r in _admitted(scheduler)],
        [state.reserved(r, page) for r in scheduler.waiting_queue],
        pool.size, pool.available_size(), scheduler.max_running_requests,
        shared_tokens=0 if tree is None else tree.protected_size(),
        cached_tokens=0 if tree is None else tree.evictable_size(),
    ))
    watch.metrics.count(watch.tally.drain())
    return result


def count_step(result, self, batch, *args, **kwargs):
    """After a ``--corun`` scheduler with ``--enable-metrics`` ran ``batch``: a decode step counted by the graph
    it replayed (``steps.graph_size``) with its padding slots, a prefill by kind (``steps.prefill_kind``)."""
    collector = getattr(self, "metrics_collector", None)
    watch = None if collector is None else _watched.get(collector)
    if watch is None:
        return result
    mode = batch.forward_mode
    if mode.is_decode():
        watch.tally.decode(batch.batch_size(), watch.decode_sizes)
    elif mode.is_extend():
        watch.tally.prefill(steps.prefill_kind(
            zip((len(r.origin_input_ids) for r in batch.reqs), batch.prefix_lens, batch.extend_lens), watch.pack))
    return result


def _in_flight(scheduler) -> list:
    """Every unfinished request ``scheduler`` holds: waiting, admitted."""
    return [r for r in scheduler.waiting_queue if not r.finished()] + _admitted(scheduler)


@state.corun_only
def event_loop(original, self, *args, **kwargs):
    """A ``--corun`` scheduler's event loop. A ``CorunContractError`` stops the server: it is counted
    (``corun_contract_stops_total``), its cause logged on one line (``stops.line``), every request the
    scheduler holds answered with ``stops.STATUS`` and that cause, and after ``stops.ANSWER_GRACE_S`` the
    error goes on to SGLang's scheduler-crash path, which stops the server's whole process tree."""
    try:
        return original(self, *args, **kwargs)
    except CorunContractError as error:
        _contract_stop(self, error)
        raise


def _contract_stop(scheduler, error: CorunContractError) -> None:
    from sglang.srt.managers.io_struct import AbortReq
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    counter = _metrics_of(scheduler)
    if counter is not None:
        counter.count_stop()
    logger.error(stops.line(error))
    reason = FINISH_ABORT(stops.client_message(error), stops.STATUS, type(error).__name__).to_json()
    try:
        held = _in_flight(scheduler)
        for req in held:
            scheduler.ipc_channels.send_to_tokenizer.send_output(AbortReq(finished_reason=reason, rid=req.rid), req)
    except Exception:  # the stop goes on; its clients then see the connection close
        logger.exception("corun contract stop: in-flight requests could not all be answered")
        return
    if held:
        time.sleep(stops.ANSWER_GRACE_S)
