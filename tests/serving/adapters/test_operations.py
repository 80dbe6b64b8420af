"""``adapters.operations``: reservations, contract stops, and the step and isolation metrics of a ``--corun``
scheduler, on real SGLang batches.

Prefill batches are SGLang's own: ``PrefillAdder`` admits (and chunks) real requests over a real token
allocator and chunk cache on CPU tensors, and ``ScheduleBatch.prepare_for_extend`` lays the batch out as the
scheduler runs it. The values are read back through prometheus_client.
"""

import functools
import types

import pytest
import torch
from prometheus_client import CollectorRegistry
from sglang.srt.runtime_context import publish

from adapters.helpers import PACK, _adder, _req, _Scheduler
from corun_sglang.core import steps
from corun_sglang.serving import metrics
from corun_sglang.serving.adapters import operations
from corun_sglang.core.stops import CorunContractError

CHUNK = 64


class _Collector(types.SimpleNamespace):
    """What the operations adapters read of SGLang's ``SchedulerMetricsCollector``."""

    __hash__ = object.__hash__


def _cache(pool_tokens):
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    alloc = TokenToKVPoolAllocator(pool_tokens, torch.bfloat16, "cpu", None, False)
    r2t = ReqToTokenPool(size=16, max_context_len=8192, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(disable=True, req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=1)
    return alloc, r2t, ChunkCache(params)


class _Pool:
    """A KV pool, request pool and chunk cache on CPU, and SGLang's prefill batches over them."""

    def __init__(self, pool_tokens=100_000, max_running=8, chunk=CHUNK):
        self.alloc, self.r2t, self.cache = _cache(pool_tokens)
        self.max_running, self.chunk = max_running, chunk

    def adder(self, running=()):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import PrefillAdder
        from sglang.srt.server_args import get_global_server_args

        batch = ScheduleBatch(reqs=list(running), device="cpu")
        return PrefillAdder(1, self.cache, self.alloc, batch, 1.0, 16384, self.chunk, max_running_requests=self.max_running,
                            prefill_max_requests=get_global_server_args().prefill_max_requests)

    def prefill(self, adder):
        """The prefill batch ``adder`` admitted, laid out as SGLang's scheduler runs it."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        batch = ScheduleBatch.init_new(
            adder.can_run_list, self.r2t, self.alloc, self.cache,
            types.SimpleNamespace(vocab_size=1024, is_encoder_decoder=False), False, SpeculativeAlgorithm.NONE,
            chunked_req=adder.new_chunked_req)
        batch.prepare_for_extend()
        return batch


def _decode(reqs):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ScheduleBatch(reqs=list(reqs), device="cpu", forward_mode=ForwardMode.DECODE)


@pytest.fixture
def corun_scheduler(make_args, monkeypatch):
    """A ``--corun`` scheduler with ``--enable-metrics`` whose ``corun_`` metrics registered (``scheduler_reservations``)
    in a private registry; ``value(name, **labels)`` reads one back."""
    registry = CollectorRegistry()
    monkeypatch.setattr(metrics, "Metrics", functools.partial(metrics.Metrics, registry=registry))

    def start(pool, **options):
        args = make_args(corun=True, chunked_prefill_size=pool.chunk, **options)
        publish(args, role="scheduler")
        scheduler = _Scheduler(
            server_args=args, metrics_collector=_Collector(labels={"model_name": "m"}), page_size=1,
            running_batch=pool.adder().running_batch, last_batch=None, cur_batch_for_debug=None, chunked_req=None,
            waiting_queue=[], token_to_kv_pool_allocator=pool.alloc, max_running_requests=args.max_running_requests,
            max_req_len=4095, model_config=types.SimpleNamespace(context_len=4096))
        operations.scheduler_reservations(None, scheduler)
        return scheduler

    def value(name, **labels):
        return registry.get_sample_value(name, {"model_name": "m", **labels})

    return start, value


def _published(scheduler):
    operations.publish_reservations(None, scheduler.metrics_collector, "SGLang's SchedulerStats")


def test_decode_steps_count_by_the_graph_they_replay_and_their_padding(corun_scheduler):
    start, value = corun_scheduler
    pool = _Pool(max_running=32)
    scheduler = start(pool, max_running_requests=32, corun_decode_tier_candidates="8,16")
    assert [value(metrics.DECODE_GRAPHS, graph_size=str(s)) for s in (8, 16, 24, 32)] == [1, 1, None, 1]

    reqs = [_req(i, 10, 10, pool.cache) for i in range(32)]
    for running in (1, 8, 9, 17, 32, 5):
        assert operations.count_step("result", scheduler, _decode(reqs[:running])) == "result"
    assert value(metrics.DECODE_STEPS + "_total", graph_size="8") is None  # published with SGLang's stats
    _published(scheduler)
    assert {s: value(metrics.DECODE_STEPS + "_total", graph_size=str(s)) for s in (8, 16, 32)} == {8: 3, 16: 1, 32: 2}
    assert value(metrics.PADDED_SLOTS + "_total") == 7 + 0 + 7 + 15 + 0 + 3

    operations.count_step(None, scheduler, _decode(reqs[:2]))
    _published(scheduler)  # each step counted once
    assert value(metrics.DECODE_STEPS + "_total", graph_size="8") == 4
    assert value(metrics.PADDED_SLOTS + "_total") == 32 + 6


def _kinds(value):
    return {k: value(metrics.PREFILLS + "_total", kind=k) or 0 for k in steps.PREFILL_KINDS}


def test_isolated_prefills_and_the_chunks_of_a_long_prompt_count_by_kind(corun_scheduler):
    from sglang.srt.managers.schedule_policy import AddReqResult

    start, value = corun_scheduler
    pool = _Pool()
    scheduler = start(pool)
    adder = pool.adder()
    assert adder.add_one_req(_req(1, 40, 10, pool.cache), False, None) is AddReqResult.CONTINUE
    operations.count_step(None, scheduler, pool.prefill(adder))

    long = _req(2, 2 * CHUNK + 10, 10, pool.cache)  # three chunks
    adder = pool.adder()
    adder.add_one_req(long, False, None)
    assert adder.new_chunked_req is long
    operations.count_step(None, scheduler, pool.prefill(adder))
    for _ in range(2):  # the scheduler's next passes: the next chunk, then the last
        pool.cache.cache_unfinished_req(long, chunked=True)
        long.init_next_round_input()
        adder = pool.adder()
        adder.add_chunked_req(long)
        operations.count_step(None, scheduler, pool.prefill(adder))
    assert adder.can_run_list[0].extend_range.length == 10  # the last chunk ran
    _published(scheduler)
    assert _kinds(value) == {steps.ISOLATED: 1, steps.PACKED: 0, steps.CHUNK: 3}


def test_a_pack_counts_as_packed_alone_or_shared(corun_scheduler):
    from sglang.srt.managers.schedule_policy import AddReqResult

    start, value = corun_scheduler
    pool = _Pool(chunk=2 * PACK)
    scheduler = start(pool, corun_prefill_pack_candidate=PACK)
    shared = pool.adder()
    for rid, n in enumerate((40, 100)):
        assert shared.add_one_req(_req(rid, n, 10, pool.cache), False, None) is AddReqResult.CONTINUE
    alone, long = pool.adder(), pool.adder()
    assert alone.add_one_req(_req(5, 100, 10, pool.cache), False, None) is AddReqResult.CONTINUE  # padded to the pack
    assert long.add_one_req(_req(6, PACK + 1, 10, pool.cache), False, None) is AddReqResult.CONTINUE  # its own size
    for adder in (shared, alone, long):
        operations.count_step(None, scheduler, pool.prefill(adder))
    _published(scheduler)
    assert _kinds(value) == {steps.ISOLATED: 1, steps.PACKED: 2, steps.CHUNK: 0}


def test_requests_waiting_for_isolation_are_those_admission_takes_one_prefill_at_a_time(corun_scheduler):
    """Pool 1000 with one running request reserving 501: a waiting request counts as waiting for isolation
    exactly when SGLang's PrefillAdder, under --corun, admits it into an empty prefill; the others wait for KV."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    start, value = corun_scheduler
    pool = _Pool(pool_tokens=1000, chunk=4096)
    scheduler = start(pool)
    running = _req(100, 300, 200, pool.cache)
    scheduler.running_batch = pool.adder([running]).running_batch
    waiting = [(100, 100), (400, 200), (498, 0), (499, 0), (10, 10)]
    scheduler.waiting_queue = [_req(200 + i, p, n, pool.cache) for i, (p, n) in enumerate(waiting)]
    _published(scheduler)
    admitted = 0
    for p, n in waiting:
        fresh = _Pool(pool_tokens=1000, chunk=4096)
        adder = fresh.adder([_req(100, 300, 200, fresh.cache)])
        admitted += adder.add_one_req(_req(9, p, n, fresh.cache), False, None) is AddReqResult.CONTINUE
    assert value(metrics.WAITING_ISOLATION) == admitted == 3
    assert value(metrics.WAITING) == len(waiting) - admitted


def test_without_metrics_or_corun_no_step_is_counted(make_args, corun_scheduler):
    start, value = corun_scheduler
    pool = _Pool()
    batch = _decode([_req(1, 10, 10, pool.cache)])
    bare = _Scheduler(metrics_collector=None)
    assert operations.count_step("result", bare, batch) == "result"  # no --enable-metrics
    # without --corun no corun_ metrics register, so a batch has nothing to count into
    plain_args = make_args(corun=False)
    publish(plain_args, role="scheduler")
    plain = _Scheduler(server_args=plain_args, metrics_collector=_Collector(labels={"model_name": "m"}))
    assert operations.scheduler_reservations("reporter", plain) == "reporter"
    assert operations.count_step("result", plain, batch) == "result"
    assert value(metrics.DECODE_GRAPHS, graph_size="256") is None


# ----------------------------------------------------------------- reservations, metrics, contract stops


def _stats_scheduler(adder, waiting, cache, **kwargs):
    return _Scheduler(
        running_batch=adder.running_batch, last_batch=None, cur_batch_for_debug=None, chunked_req=None,
        waiting_queue=[_req(200 + i, p, n, cache) for i, (p, n) in enumerate(waiting)], page_size=1,
        token_to_kv_pool_allocator=adder.token_to_kv_pool_allocator, **{"max_running_requests": 8, **kwargs})


def _private_metrics():
    from prometheus_client import CollectorRegistry

    from corun_sglang.serving import metrics

    registry = CollectorRegistry()
    labels = {"model_name": "m", "tp_rank": 0}
    return metrics.Metrics(labels, registry=registry), lambda name: registry.get_sample_value(
        name, {"model_name": "m", "tp_rank": "0"})


def test_reservation_gauges_count_what_admission_refuses_for_kv(serving):
    """Pool 1000, one running request reserving 300 + 200 + 1 (and one finished, which reserves nothing): a
    waiting request counts as waiting for KV exactly when SGLang's PrefillAdder, under --corun, refuses it
    for KV."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH
    from sglang.srt.managers.schedule_policy import AddReqResult

    serving(True)
    waiting = [(100, 100), (400, 200), (498, 0), (499, 0)]
    adder, cache = _adder(1000, [(300, 200), (50, 50)], used=350)
    adder.running_batch.reqs[1].finished_reason = FINISH_LENGTH(50)
    scheduler = _stats_scheduler(adder, waiting, cache)
    counted, value = _private_metrics()
    collector = _Collector()
    operations._watch(collector, scheduler, counted)
    operations.publish_reservations(None, collector, "SGLang's SchedulerStats")
    assert (value("corun_kv_reserved_tokens"), value("corun_kv_used_tokens"), value("corun_kv_pool_tokens")) == (
        501, 350, 1000)
    refused = 0
    for p, n in waiting:
        fresh, fresh_cache = _adder(1000, [(300, 200)])
        refused += fresh.add_one_req(_req(9, p, n, fresh_cache), False, None) is AddReqResult.NO_TOKEN
    assert value("corun_requests_waiting_for_kv") == refused == 2

    scheduler.chunked_req = _req(300, 60, 10, cache)  # a prompt between its chunks reserves its sequence too
    scheduler.cur_batch_for_debug = adder.running_batch  # counted once
    operations.publish_reservations(None, collector, "SGLang's SchedulerStats")
    assert value("corun_kv_reserved_tokens") == 501 + 71 and value("corun_requests_waiting_for_kv") == 3


def test_reservation_gauges_are_sglangs_alone_without_corun():
    collector = _Collector()
    assert operations.publish_reservations("logged", collector, "stats") == "logged"


@pytest.mark.parametrize("with_metrics", [False, True])
def test_a_corun_scheduler_logs_its_capacity_and_registers_the_metrics(make_args, monkeypatch, caplog, with_metrics):
    import functools
    import logging

    from prometheus_client import CollectorRegistry

    from corun_sglang.serving import metrics

    registry = CollectorRegistry()
    monkeypatch.setattr(metrics, "Metrics", functools.partial(metrics.Metrics, registry=registry))
    adder, cache = _adder(104_000, [(100, 512)])
    collector = _Collector(labels={"model_name": "m"}) if with_metrics else None
    scheduler = _stats_scheduler(adder, [], cache, server_args=make_args(corun=True), max_req_len=40_959,
                                 model_config=types.SimpleNamespace(context_len=40_960), max_running_requests=256,
                                 metrics_collector=collector)
    with caplog.at_level(logging.INFO, logger=operations.__name__):
        assert operations.scheduler_reservations("reporter", scheduler, 0, 0, None) == "reporter"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("corun admission")]
    assert len(lines) == 1 and "2 of N = 256" in lines[0]
    if with_metrics:
        operations.publish_reservations(None, collector, "stats")
        assert registry.get_sample_value("corun_kv_reserved_tokens", {"model_name": "m"}) == 613
    else:
        assert registry.get_sample_value("corun_kv_reserved_tokens", {"model_name": "m"}) is None


class _Tokenizer:
    """The scheduler's channel to the tokenizer manager: what it was sent."""

    def __init__(self):
        self.sent = []

    def send_output(self, output, recv_obj=None):
        self.sent.append(output)


def _stopping_scheduler(make_args, corun=True):
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    adder, cache = _adder(10_000, [(100, 10), (100, 10), (100, 10)])
    adder.running_batch.reqs[2].finished_reason = FINISH_LENGTH(10)  # finished: already answered
    counted, value = _private_metrics()
    args = make_args(corun=corun)
    publish(args, role="scheduler")  # the scheduler process's own
    scheduler = _stats_scheduler(
        adder, [(50, 10)], cache, server_args=args,
        ipc_channels=types.SimpleNamespace(send_to_tokenizer=_Tokenizer()), metrics_collector=_Collector())
    operations._watch(scheduler.metrics_collector, scheduler, counted)
    return scheduler, value


def test_a_contract_stop_answers_every_held_request_logs_one_line_and_stops(make_args, monkeypatch, caplog):
    import asyncio
    import logging
    from http import HTTPStatus

    import fastapi
    from sglang.srt.managers.io_struct import AbortReq
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    from corun_sglang.core import stops

    monkeypatch.setattr(stops, "ANSWER_GRACE_S", 0)
    scheduler, value = _stopping_scheduler(make_args)
    error = CorunContractError("decode retraction was about to run\nfor a batch of 2 requests")

    def loop(self):
        raise error

    with caplog.at_level(logging.INFO), pytest.raises(CorunContractError) as raised:
        operations.event_loop(loop, scheduler)
    assert raised.value is error  # SGLang's scheduler-crash path gets it and stops the process tree
    assert [r.getMessage() for r in caplog.records if "corun contract stop" in r.getMessage()] == [
        "corun contract stop: decode retraction was about to run for a batch of 2 requests"]
    assert value("corun_contract_stops_total") == 1

    sent = scheduler.ipc_channels.send_to_tokenizer.sent
    assert all(isinstance(s, AbortReq) for s in sent)
    assert sorted(s.rid for s in sent) == ["100", "101", "200"]  # waiting and running, not the finished one
    reason = sent[0].finished_reason
    assert reason["status_code"] is HTTPStatus.SERVICE_UNAVAILABLE and reason["message"].startswith(stops.line(error))

    # the tokenizer manager turns the answer into an HTTP 503 (non-streaming) or a streamed error chunk
    manager = types.SimpleNamespace(rid_to_state={}, enable_lora=False)
    state = types.SimpleNamespace(obj=types.SimpleNamespace(rid="100"))
    out = {"meta_info": {"finish_reason": reason}}
    with pytest.raises(fastapi.HTTPException) as http:
        asyncio.run(TokenizerManager._handle_abort_finish_reason(manager, out, state, False))
    assert http.value.status_code == 503 and http.value.detail == reason["message"]
    assert asyncio.run(TokenizerManager._handle_abort_finish_reason(manager, out, state, True)) is out


@pytest.mark.parametrize("corun,error", [(False, CorunContractError("stop")), (True, RuntimeError("crash"))])
def test_other_scheduler_errors_take_sglangs_path_untouched(make_args, corun, error):
    scheduler, value = _stopping_scheduler(make_args, corun=corun)

    def loop(self):
        raise error

    with pytest.raises(type(error)):
        operations.event_loop(loop, scheduler)
    assert scheduler.ipc_channels.send_to_tokenizer.sent == []
    assert value("corun_contract_stops_total") == 0
