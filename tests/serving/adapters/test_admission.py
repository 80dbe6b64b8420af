"""``adapters.admission`` on real SGLang objects: chunk budget, whole-sequence admission, the prefill pack and
its wait, no retraction, the default ``max_new_tokens``; pass-through without --corun.

The tests build SGLang's own ``PrefillAdder`` over a real token allocator and chunk cache (CPU tensors), with
the corun hooks applied by SGLang's plugin loader, and publish server args with and without corun.
"""

import types

import pytest

from adapters.helpers import PACK, _adder, _cache, _recording, _req, _Scheduler
from corun_sglang.core import packing
from corun_sglang.serving.adapters import admission
from corun_sglang.core.stops import CorunContractError


def test_prefill_batch_holds_one_request(serving):
    from sglang.srt.managers.schedule_policy import AddReqResult

    serving(True)
    adder, cache = _adder(10_000, [])
    assert adder.add_one_req(_req(1, 100, 10, cache), False, None) is AddReqResult.CONTINUE
    assert adder.add_one_req(_req(2, 100, 10, cache), False, None) is AddReqResult.OTHER
    assert len(adder.can_run_list) == 1


@pytest.mark.parametrize("corun,admitted", [(False, True), (True, False)])
def test_admission_reserves_whole_sequences_of_running_requests(serving, corun, admitted):
    """Pool 1000, one running request that may still grow to 300 + 200 tokens.

    SGLang admits a 400 + 200 request on its estimate of the running request's
    growth; CoRun refuses it, because both whole sequences do not fit.
    """
    from sglang.srt.managers.schedule_policy import AddReqResult

    serving(corun)
    adder, cache = _adder(1000, [(300, 200)])
    result = adder.add_one_req(_req(1, 400, 200, cache), False, None)
    assert (result is AddReqResult.CONTINUE) is admitted
    if not admitted:
        assert result is AddReqResult.NO_TOKEN


def test_admission_accepts_when_whole_sequences_fit(serving):
    from sglang.srt.managers.schedule_policy import AddReqResult

    serving(True)
    adder, cache = _adder(1000, [(300, 200)])
    assert adder.add_one_req(_req(1, 200, 200, cache), False, None) is AddReqResult.CONTINUE


def test_admission_respects_n(serving):
    from sglang.srt.managers.schedule_policy import AddReqResult

    serving(True)
    adder, cache = _adder(100_000, [(10, 10)] * 4, max_running=4)
    assert adder.add_one_req(_req(1, 10, 10, cache), False, None) is AddReqResult.NO_TOKEN


def test_chunked_prompt_continues_before_anything_new(serving):
    from sglang.srt.managers.schedule_policy import AddReqResult

    serving(True)
    adder, cache = _adder(10_000, [], chunk=256)
    long = _req(1, 1000, 10, cache)
    adder.add_one_req(long, False, None)
    assert adder.new_chunked_req is long
    assert long.extend_range.end - long.extend_range.start == 256

    nxt, cache2 = _adder(10_000, [], chunk=256)
    nxt.add_chunked_req(long)
    assert nxt.can_run_list == [long]
    assert nxt.add_one_req(_req(2, 10, 10, cache2), True, None) is AddReqResult.OTHER


@pytest.mark.parametrize("corun,expected", [(False, 100), (True, 256)])
def test_chunk_length_does_not_depend_on_free_memory(serving, corun, expected):
    """Pool 400 with 300 tokens in use: SGLang shrinks the next chunk to what is free; CoRun does not."""
    serving(corun)
    adder, _ = _adder(400, [], chunk=256, used=300)
    assert adder.chunked_req_token_budget() == expected


def test_retraction_is_an_error_under_corun(make_args):
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    alloc, cache = _cache(100)
    batch = ScheduleBatch(reqs=[_req(1, 10, 10, cache)], token_to_kv_pool_allocator=alloc, device="cpu")
    with pytest.raises(CorunContractError, match="retraction"):
        batch.retract_decode(make_args(corun=True))


# ----------------------------------------------------------------- packed prefill


def _packing_adder(pool_tokens, running=(), chunk=4096):
    adder, cache = _adder(pool_tokens, list(running), chunk=chunk)
    adder.prefill_max_requests = None  # what --corun resolves with a prefill pack
    return adder, cache


def test_packable_prompts_share_a_prefill_up_to_the_pack(packing_args):
    from sglang.srt.managers.schedule_policy import AddReqResult

    assert packing_args().prefill_max_requests is None
    adder, cache = _packing_adder(100_000)
    for rid, n in enumerate((40, 100, 100)):
        assert adder.add_one_req(_req(rid, n, 10, cache), False, None) is AddReqResult.CONTINUE
    assert adder.add_one_req(_req(3, 40, 10, cache), False, None) is AddReqResult.OTHER  # 280 > 256
    assert adder.add_one_req(_req(4, 16, 10, cache), False, None) is AddReqResult.OTHER  # shorter than 33
    assert [len(r.origin_input_ids) for r in adder.can_run_list] == [40, 100, 100]

    alone, cache = _packing_adder(100_000)
    assert alone.add_one_req(_req(5, 300, 10, cache), False, None) is AddReqResult.CONTINUE
    assert alone.add_one_req(_req(6, 40, 10, cache), False, None) is AddReqResult.OTHER  # 300 is not packable

    packing_args(pack=False)  # isolated prefill: one request, whatever its length
    single, cache = _adder(100_000, [])
    assert single.add_one_req(_req(7, 40, 10, cache), False, None) is AddReqResult.CONTINUE
    assert single.add_one_req(_req(8, 40, 10, cache), False, None) is AddReqResult.OTHER


def test_a_chunked_prompt_packs_nothing_with_it(packing_args):
    from sglang.srt.managers.schedule_policy import AddReqResult

    packing_args()
    first, cache = _packing_adder(10_000, chunk=256)
    long = _req(1, 1000, 10, cache)
    first.add_one_req(long, False, None)
    assert first.new_chunked_req is long
    nxt, cache2 = _packing_adder(10_000, chunk=256)
    nxt.add_chunked_req(long)
    assert nxt.add_one_req(_req(2, 40, 10, cache2), True, None) is AddReqResult.OTHER


def test_a_packable_prompt_joins_only_whole(packing_args):
    """Chunk 100 (below the pack, as page rounding can leave it): a third 40-token prompt would be chunked."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    packing_args()
    adder, cache = _packing_adder(100_000, chunk=100)
    assert adder.add_one_req(_req(1, 40, 10, cache), False, None) is AddReqResult.CONTINUE
    assert adder.add_one_req(_req(2, 40, 10, cache), False, None) is AddReqResult.CONTINUE
    assert adder.add_one_req(_req(3, 40, 10, cache), False, None) is AddReqResult.OTHER
    assert adder.new_chunked_req is None and len(adder.can_run_list) == 2


def test_admission_reserves_the_whole_sequences_of_prompts_already_packed(packing_args):
    """Pool 400: two packed prompts of 40 + 100 new tokens reserve 282 tokens; a third (40 + 100) does not fit."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    packing_args()
    adder, cache = _packing_adder(400)
    assert adder.add_one_req(_req(1, 40, 100, cache), False, None) is AddReqResult.CONTINUE
    assert adder.add_one_req(_req(2, 40, 100, cache), False, None) is AddReqResult.CONTINUE
    assert adder.add_one_req(_req(3, 40, 100, cache), False, None) is AddReqResult.NO_TOKEN


# (KV pool, running (prompt, max_new), waiting (prompt, max_new)); N = 8, pack 256 from 33 tokens.
# A request reserves prompt + max_new + 1 tokens. Whether the prefill is cut short by KV or N:
CUT_SHORT = {
    "kv refuses the second prompt": (600, [(100, 200)], [(100, 100)] * 3, True),
    "the pack fills first": (1000, [(100, 200)], [(100, 100)] * 3, False),
    "kv refuses the first prompt": (400, [(100, 200)], [(100, 100)] * 3, False),
    "a long prompt runs alone": (10_000, [(100, 200)], [(300, 100), (100, 100)], False),
    "n refuses the second prompt": (10_000, [(40, 10)] * 7, [(100, 100)] * 2, True),
    "the queue ends": (10_000, [(100, 200)], [(100, 100)], False),
}


def _scheduler(adder, queue, cache):
    """What ``prefill_wait`` reads of SGLang's ``Scheduler``, over the adder's pool and waiting ``queue``."""
    return _Scheduler(
        waiting_queue=[_req(i, p, n, cache) for i, (p, n) in enumerate(queue)], chunked_req=None, page_size=1,
        token_to_kv_pool_allocator=adder.token_to_kv_pool_allocator, max_running_requests=8)


@pytest.mark.parametrize("pool,running,queue,short", CUT_SHORT.values(), ids=CUT_SHORT)
def test_a_pack_is_cut_short_exactly_where_the_prefill_adder_stops_on_kv_or_n(packing_args, pool, running, queue,
                                                                            short):
    """The prediction agrees with SGLang's PrefillAdder under the corun hooks, fed the queue as the scheduler
    feeds it: in order, up to the first refusal."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    packing_args()
    adder, cache = _packing_adder(pool, running)
    scheduler = _scheduler(adder, queue, cache)
    assert admission._pack_waits(scheduler, adder.running_batch) is short
    for req in scheduler.waiting_queue:
        result = adder.add_one_req(req, False, None)
        if result is not AddReqResult.CONTINUE:
            break
    assert (bool(adder.can_run_list) and result is AddReqResult.NO_TOKEN) is short
    queue_shape = [(p, 0, p + n + 1) for p, n in queue]
    admitted, refused = packing.next_prefill(queue_shape, [p + n + 1 for p, n in running], pool, 8, PACK, 33)
    assert (admitted, refused) == (len(adder.can_run_list), result is AddReqResult.NO_TOKEN)


def test_a_pack_the_kv_pool_cuts_short_waits_up_to_the_limit_then_runs(packing_args, serving):
    from sglang.srt.managers.schedule_batch import NextBatchPlan
    from sglang.srt.managers.scheduler import Scheduler

    seen = {}
    original = _recording(Scheduler.get_new_batch_prefill, seen, result="prefill")
    pool, running, queue, _ = CUT_SHORT["kv refuses the second prompt"]
    adder, cache = _packing_adder(pool, running)
    scheduler, batch = _scheduler(adder, queue, cache), adder.running_batch

    packing_args(wait=2)
    for _ in range(2):
        plan = admission.prefill_wait(original, scheduler, batch)
        assert isinstance(plan, NextBatchPlan) and plan.batch_to_run is None and plan.running_batch is batch
    assert not seen
    assert admission.prefill_wait(original, scheduler, batch) == "prefill" and seen["running_batch"] is batch
    assert isinstance(admission.prefill_wait(original, scheduler, batch), NextBatchPlan)  # it counts anew
    scheduler.chunked_req = scheduler.waiting_queue[0]  # a chunked prompt's next chunk never waits
    assert admission.prefill_wait(original, scheduler, batch) == "prefill"
    scheduler.chunked_req = None
    batch.batch_is_full = True  # SGLang's own scheduler admits nothing now: nothing to wait for
    assert admission.prefill_wait(original, scheduler, batch) == "prefill"
    batch.batch_is_full = False

    pool, running, queue, _ = CUT_SHORT["the pack fills first"]
    full, cache = _packing_adder(pool, running)
    assert admission.prefill_wait(original, _scheduler(full, queue, cache), full.running_batch) == "prefill"
    packing_args(wait=0)
    assert admission.prefill_wait(original, scheduler, batch) == "prefill"
    serving(False)
    assert admission.prefill_wait(original, scheduler, batch) == "prefill"
    untouched = _scheduler(adder, queue, cache)  # without a wait, SGLang's scheduler is left as it is
    before = dict(vars(untouched))
    assert admission.prefill_wait(original, untouched, batch) == "prefill"
    assert vars(untouched) == before and untouched not in admission._waited


def test_a_pack_the_queue_leaves_underfilled_waits_on_a_loaded_server_only(packing_args, serving):
    """N = 8, pack 256: with 4 requests running a lone 100-token prompt waits for others (100 < 192 tokens),
    as SGLang's PrefillAdder would admit it alone; with 3 running, or 200 tokens waiting, it runs at once."""
    from sglang.srt.managers.schedule_batch import NextBatchPlan
    from sglang.srt.managers.schedule_policy import AddReqResult
    from sglang.srt.managers.scheduler import Scheduler

    seen = {}
    original = _recording(Scheduler.get_new_batch_prefill, seen, result="prefill")
    packing_args(wait=2)
    adder, cache = _packing_adder(10_000, [(40, 10)] * 4)
    scheduler, batch = _scheduler(adder, [(100, 100)], cache), adder.running_batch
    assert admission._pack_waits(scheduler, batch)
    assert adder.add_one_req(scheduler.waiting_queue[0], False, None) is AddReqResult.CONTINUE  # admitted alone
    for _ in range(2):
        assert isinstance(admission.prefill_wait(original, scheduler, batch), NextBatchPlan)
    assert admission.prefill_wait(original, scheduler, batch) == "prefill"

    light, cache = _packing_adder(10_000, [(40, 10)] * 3)
    assert not admission._pack_waits(_scheduler(light, [(100, 100)], cache), light.running_batch)
    filled, cache = _packing_adder(10_000, [(40, 10)] * 4)
    assert not admission._pack_waits(_scheduler(filled, [(100, 100), (100, 100)], cache), filled.running_batch)


# ----------------------------------------------------------------- the default max_new_tokens


@pytest.mark.parametrize("corun,bound,given,prompt,expected", [
    (True, 512, None, 100, 512),
    (True, 512, 64, 100, 64),  # a request's own max_new_tokens is kept
    (True, 512, None, 3800, 4095 - 3800 - 1),  # SGLang still caps the bound to the context
    (True, None, None, 100, 4095 - 100 - 1),  # unset: SGLang's own, the rest of the context
    (False, None, None, 100, 4095 - 100 - 1),
])
def test_a_request_without_max_new_tokens_gets_the_default_bound(make_args, corun, bound, given, prompt, expected):
    from sglang.srt.managers.scheduler import Scheduler

    from sglang.srt.runtime_context import publish

    _, cache = _cache(100)
    req = _req(1, prompt, given, cache)
    args = make_args(corun=corun, corun_default_max_new_tokens=bound)
    publish(args, role="scheduler")
    scheduler = types.SimpleNamespace(max_new_tokens_limit=None, page_size=1, max_req_len=4095,
                                      max_total_num_tokens=100_000, server_args=args)
    Scheduler.init_req_max_new_tokens(scheduler, req)  # SGLang's, hooked
    assert req.sampling_params.max_new_tokens == expected
