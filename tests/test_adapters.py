"""``adapters`` on real SGLang objects: pass-through without --corun, CoRun policy with it.

The scheduler-side tests build SGLang's own ``PrefillAdder`` over a real
token allocator and chunk cache (CPU tensors), with the corun hooks applied
by SGLang's plugin loader, and publish server args with and without corun.
"""

from array import array
import types

import pytest
import torch
from sglang.srt.runtime_context import publish

from corun_sglang import packing
from corun_sglang.adapters import admission, decode, moe, operations, prefill, startup, state
from corun_sglang.adapters import seeds as adapter_seeds
from corun_sglang.stops import CorunContractError


@pytest.fixture
def serving(make_args):
    def publish_args(corun: bool):
        publish(make_args(corun=corun), role="scheduler")

    return publish_args


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


@pytest.mark.parametrize("corun", [False, True])
def test_decode_attention_uses_tensor_core_plan_under_corun(serving, corun):
    """GQA group 2 in bf16: FlashInfer's CUDA-core decode (no split-KV switch) unless --corun."""
    from sglang.srt.layers.attention import flashinfer_backend

    serving(corun)
    assert flashinfer_backend.should_use_tensor_core(torch.bfloat16, 8, 4) is corun


def test_decode_plan_turns_split_kv_off(serving):
    """The adapter rebinds SGLang's own ``call_begin_forward`` arguments, however they were passed."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterDecode

    real = FlashInferIndicesUpdaterDecode.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__
    seen = {}

    def original(*args, **kwargs):
        import inspect

        seen.update(inspect.signature(real).bind(*args, **kwargs).arguments)

    original.__signature__ = __import__("inspect").signature(real)
    serving(True)
    decode.decode_plan(original, "updater", "wrapper", "idx", "lens", 7, "indptr", "start", None, None,
                         fixed_split_size=2048, disable_split_kv=False)
    assert seen["fixed_split_size"] is None and seen["disable_split_kv"] is True
    serving(False)
    seen.clear()
    decode.decode_plan(original, "updater", "wrapper", "idx", "lens", 7, "indptr", "start", None, None,
                         fixed_split_size=2048, disable_split_kv=False)
    assert seen["fixed_split_size"] == 2048 and seen["disable_split_kv"] is False


def test_decode_plan_points_a_graph_plans_surplus_blocks_at_the_cheapest_request(serving):
    """FlashInfer's CUDA-graph decode wrapper, as far as the adapter reads it: the plan it made last and
    the page-locked int workspace each plan copies to the GPU (tests/test_decode_grid.py lays it out)."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterDecode
    from test_decode_grid import _buffer, _plan

    real = FlashInferIndicesUpdaterDecode.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__

    class Wrapper:
        is_cuda_graph_enabled = True
        _plan_info = None
        _pin_memory_int_workspace_buffer = _buffer()

    class Updater:
        num_qo_heads, num_kv_heads = 32, 8

    copied = []

    def original(updater, wrapper, *args, **kwargs):  # a plan: lays out the workspace, copies it to the GPU
        wrapper._plan_info = _plan()
        copied.append(wrapper._pin_memory_int_workspace_buffer[:28].view(torch.int32).tolist())

    original.__signature__ = __import__("inspect").signature(real)
    serving(True)
    wrapper, lens = Wrapper(), torch.tensor([900, 35, 1, 1])
    for _ in range(2):
        decode.decode_plan(original, Updater(), wrapper, torch.zeros(4), lens, 937, "indptr", "start", None, lens)
    # the first plan's copy still held the stale entries; from the second on, the surplus runs slot 2
    assert copied[0][4:] != [2, 2, 2] and copied[1] == [0, 1, 2, 3, 2, 2, 2]
    full = torch.tensor([900, 35, 40, 700])  # no padding slot left: the shortest request
    decode.decode_plan(original, Updater(), wrapper, torch.zeros(4), full, 1675, "indptr", "start", None, full)
    assert copied[-1] == [0, 1, 2, 3, 1, 1, 1]
    serving(False)  # default SGLang: the workspace is FlashInfer's alone
    wrapper = Wrapper()
    wrapper._pin_memory_int_workspace_buffer = _buffer()
    for _ in range(2):
        decode.decode_plan(original, Updater(), wrapper, torch.zeros(4), lens, 937, "indptr", "start", None, lens)
    assert copied[-1][4:] == copied[0][4:]


@pytest.mark.parametrize("leaves, error", [
    ({"_plan_info": None}, "left no _plan_info"),
    ({"_pin_memory_int_workspace_buffer": None}, "left no _pin_memory_int_workspace_buffer"),
    ({"_plan_info": "split"}, "not one whose surplus blocks"),  # a split-KV plan: its surplus is not fillable
    ({"_plan_info": "short"}, "not one whose surplus blocks"),  # another plan layout
])
def test_a_graph_plan_whose_surplus_cannot_be_filled_stops_the_server(serving, leaves, error):
    """After its plan, a CUDA-graph decode wrapper without the plan or workspace ``decode_grid`` fills, or
    with a plan it cannot fill, is an error, never a plan whose surplus blocks read outside the batch."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterDecode
    from test_decode_grid import _buffer, _plan

    real = FlashInferIndicesUpdaterDecode.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__
    plans = {"split": _plan(split_kv=1), "short": _plan()[:-1]}

    class Wrapper:
        def __init__(self, cuda_graph):
            self.is_cuda_graph_enabled = cuda_graph

    class Updater:
        num_qo_heads, num_kv_heads = 32, 8

    def original(updater, wrapper, *args, **kwargs):
        wrapper._plan_info, wrapper._pin_memory_int_workspace_buffer = _plan(), _buffer()
        for name, value in leaves.items():
            setattr(wrapper, name, plans.get(value, value))

    original.__signature__ = __import__("inspect").signature(real)
    serving(True)
    lens = torch.tensor([900, 35, 1, 1])
    with pytest.raises(CorunContractError, match=error):
        decode.decode_plan(original, Updater(), Wrapper(True), torch.zeros(4), lens, 937, "indptr", "start",
                             None, lens)
    # outside a CUDA graph the plan has no surplus blocks to fill
    decode.decode_plan(original, Updater(), Wrapper(False), torch.zeros(4), lens, 937, "indptr", "start",
                         None, lens)


def test_batch_seeds_are_per_request_and_derived_when_missing(serving):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    serving(True)
    _, cache = _cache(1000)
    given, unseeded, twin = _req(1, 10, 4, cache), _req(2, 10, 4, cache), _req(3, 10, 4, cache)
    given.sampling_params.sampling_seed = 77
    batch = ScheduleBatch(reqs=[given, unseeded, twin], device="cpu")
    info = SamplingBatchInfo.from_schedule_batch(batch, vocab_size=1024)
    seeds = info.sampling_seed.tolist()
    assert seeds[0] == 77
    assert seeds[1] == seeds[2] != 77  # same prompt and parameters: same derived seed
    serving(False)
    plain = SamplingBatchInfo.from_schedule_batch(ScheduleBatch(reqs=[_req(4, 10, 4, cache)], device="cpu"), 1024)
    assert plain.sampling_seed is None


def _tokenized(rid, sampling_params, input_ids=(5, 6, 7)):
    import types

    return types.SimpleNamespace(rid=rid, sampling_params=sampling_params, input_ids=list(input_ids))


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


@pytest.mark.parametrize("given_seed", [None, 1234])
def test_n_samples_get_distinct_seeds_the_same_set_each_time_when_seeded(given_seed):
    from sglang.srt.sampling.sampling_params import SamplingParams

    def seeds_of_a_run(manager):
        shared = SamplingParams(max_new_tokens=8, temperature=0.7, sampling_seed=given_seed)
        shared.normalize(None)
        manager.rid_to_state["parent"] = _ReqState()  # a logical request's state: SGLang makes one per request
        objs = [_tokenized(f"c{i}", shared) for i in range(4)]  # SGLang shares one SamplingParams
        for obj in objs:
            adapter_seeds.send_one_request(lambda self, o: None, manager, obj)
        assert shared.sampling_seed == given_seed  # the shared object is left alone
        seeds = [o.sampling_params.sampling_seed for o in objs]
        assert seeds == [adapter_seeds.sent_seed(manager.rid_to_state[f"c{i}"]) for i in range(4)]
        return seeds

    manager = _Manager(children=[f"c{i}" for i in range(4)])
    first = seeds_of_a_run(manager)
    assert len(set(first)) == 4
    again = seeds_of_a_run(manager)
    assert (again == first) is (given_seed is not None)  # unseeded: the next request of that content
    assert first == seeds_of_a_run(_Manager(children=[f"c{i}" for i in range(4)]))  # a fresh server


def test_identical_unseeded_requests_get_distinct_seeds_the_same_after_a_restart():
    from sglang.srt.sampling.sampling_params import SamplingParams

    from corun_sglang import seeds

    def run(manager, prompts):
        out = []
        for prompt in prompts:
            sp = SamplingParams(max_new_tokens=8, temperature=0.7)
            sp.normalize(None)
            obj = _tokenized("r", sp, prompt)
            adapter_seeds.send_one_request(lambda self, o: None, manager, obj)
            out.append(obj.sampling_params.sampling_seed)
        return out

    prompts = [(5, 6, 7)] * 4 + [(8, 9)] * 2 + [(5, 6, 7)]
    first = run(_Manager(), prompts)
    assert len(set(first[:4] + first[-1:])) == 5 and first[4] != first[5]
    assert run(_Manager(), prompts) == first  # a fresh server, the same requests in the same order
    mixed = run(_Manager(), [(8, 9)] + [(5, 6, 7)] * 5 + [(8, 9)])  # another arrival order
    assert sorted(mixed) == sorted(first)
    sp = SamplingParams(max_new_tokens=8, temperature=0.7)
    sp.normalize(None)
    content = seeds.content_digest([5, 6, 7], seeds.params_of(sp))
    assert first[:4] == [seeds.request_seed(0, content, k) for k in range(4)]


@pytest.mark.parametrize(
    "ablation,splitkv_off,isolated",
    [(None, False, False), ("splitkv-off", True, False), ("splitkv-off+isolated-prefill", True, True)],
)
def test_ablations_apply_only_their_mechanisms(make_args, ablation, splitkv_off, isolated):
    publish(make_args(corun_ablation=ablation), role="scheduler")
    assert state.applies("splitkv-off") is splitkv_off
    assert state.applies("isolated-prefill") is isolated
    assert state.serving_corun() is False


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


@pytest.fixture(params=["compute", "skip"])
def moe_padding_mode(request, make_args):
    publish(make_args(corun=True, corun_moe_padding=request.param), role="scheduler")
    return request.param


def test_sglang_keeps_the_real_token_count_where_padding_skips_the_experts(moe_padding_mode):
    from sglang.srt.model_executor import forward_batch_info

    if moe_padding_mode == "skip":
        assert forward_batch_info.enable_num_token_non_padded() is True
    else:  # SGLang's own answer (here: it has no expert-parallel group to ask)
        with pytest.raises(AssertionError, match="expert model parallel"):
            forward_batch_info.enable_num_token_non_padded()


def _moe_forward(model_self):
    """A forward of 6 rows, 4 of them requests, through ``moe_model_forward`` and one MoE layer's top-k:
    (the expert ids the layer returned, the ids before)."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput, TopK
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM

    ids = torch.arange(24, dtype=torch.int32).reshape(6, 4)
    routed = ids.clone()
    topk = StandardTopKOutput(torch.ones(6, 4), ids, torch.zeros(6, 8))
    layer = _recording(TopK.forward_cuda, {}, result=topk)
    model = _recording(Qwen3MoeForCausalLM.forward, {})
    batch = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=6, input_ids=torch.zeros(6, dtype=torch.int64),
                         req_pool_indices=torch.arange(6), seq_lens=torch.ones(6), out_cache_loc=torch.arange(6),
                         seq_lens_sum=6, num_token_non_padded=torch.tensor([4], dtype=torch.int32))

    def forward(*args, **kwargs):  # the model's forward, running its MoE layer
        model(*args, **kwargs)
        return moe.topk_padding(layer, "topk", torch.zeros(6, 16), torch.zeros(6, 8))

    forward.__signature__ = model.__signature__
    assert moe.moe_model_forward(forward, model_self, batch.input_ids, torch.arange(6), batch) is topk
    return ids, routed


def test_padding_rows_of_an_moe_forward_get_no_expert(moe_padding_mode):
    """The 2 padding rows of the forward lose their experts under skip; the 4 requests keep theirs."""
    ids, routed = _moe_forward(types.SimpleNamespace(quant_config=None))
    assert torch.equal(ids[:4], routed[:4])
    assert torch.equal(ids[4:], torch.full((2, 4), -1, dtype=torch.int32) if moe_padding_mode == "skip" else routed[4:])


def test_a_quantized_moe_models_padding_rows_keep_their_experts(moe_padding_mode):
    ids, routed = _moe_forward(types.SimpleNamespace(quant_config=object()))
    assert torch.equal(ids, routed)


def test_fused_moe_filters_unrouted_blocks_where_padding_skips_the_experts(moe_padding_mode):
    import inspect

    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe

    seen = {}
    original = _recording(fused_moe._fused_moe_kernel_sequence, seen)
    params = original.__signature__.parameters
    assert params["filter_expert"].kind is inspect.Parameter.KEYWORD_ONLY
    required = {n: None for n, p in params.items() if p.default is inspect.Parameter.empty}
    moe.fused_moe_filter(original, **{**required, "filter_expert": False})
    assert seen["filter_expert"] is (moe_padding_mode == "skip")


# ----------------------------------------------------------------- packed prefill

PACK = 256  # the tiny model packs prompts of 33 to 256 tokens (4 query heads on 2 KV heads)


@pytest.fixture
def packing_args(make_args):
    """Publish ``--corun --corun-prefill-pack-candidate 256`` (or plain ``--corun`` with ``pack=False``)."""
    def publish_args(pack: bool = True, wait: int = 0):
        args = make_args(corun=True, corun_prefill_pack_candidate=PACK if pack else None,
                         corun_prefill_pack_wait=wait)
        publish(args, role="scheduler")
        return args

    return publish_args


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
    assert admission._pack_cut_short(scheduler, adder.running_batch) is short
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


@pytest.mark.parametrize("tokens,replayed", [(33, PACK), (200, PACK), (PACK, PACK), (32, 32), (300, 300)])
def test_a_packable_prefill_replays_the_packs_graph_from_far_below(packing_args, tokens, replayed):
    def original(self, *, num_tokens, **kwargs):
        return num_tokens

    packing_args()
    assert prefill.prefill_replay(original, "runner", num_tokens=tokens, return_logprob=True) == replayed
    packing_args(pack=False)
    assert prefill.prefill_replay(original, "runner", num_tokens=tokens, return_logprob=True) == tokens


def _extend(tokens, prefixes):
    return types.SimpleNamespace(input_ids=torch.zeros(tokens, dtype=torch.long), extend_prefix_lens_cpu=prefixes,
                                 batch_size=len(prefixes))


def test_a_packable_prefill_never_runs_eagerly(packing_args):
    def original(self, forward_batch):
        return "eager"

    packing_args()
    with pytest.raises(CorunContractError, match="3 fresh prompts, 200 tokens.*256-token prefill graph"):
        prefill.eager_prefill(original, "runner", _extend(200, [0, 0, 0]))
    with pytest.raises(CorunContractError, match="1 fresh prompts, 256 tokens"):
        prefill.eager_prefill(original, "runner", _extend(PACK, [0]))
    assert prefill.eager_prefill(original, "runner", _extend(200, [300])) == "eager"  # a later chunk, alone
    assert prefill.eager_prefill(original, "runner", _extend(20, [0])) == "eager"  # shorter than 33
    assert prefill.eager_prefill(original, "runner", _extend(1000, [0])) == "eager"
    packing_args(pack=False)
    assert prefill.eager_prefill(original, "runner", _extend(200, [0, 0, 0])) == "eager"


class _Wrapper:
    """Stands in for a FlashInfer prefill wrapper: records the keywords its plan gets."""

    def __init__(self):
        self.planned = []

    def begin_forward(self, *args, **kwargs):
        self.planned.append(kwargs)


def test_prefill_plans_run_without_split_kv_under_a_pack(packing_args):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterPrefill

    real = FlashInferIndicesUpdaterPrefill.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__

    def original(self, wrapper_ragged, wrapper_paged, *args, **kwargs):
        wrapper_ragged.begin_forward("qo", "kv")
        wrapper_paged.begin_forward("qo", "kv", fixed_split_size=None)

    original.__signature__ = __import__("inspect").signature(real)
    ragged, paged = _Wrapper(), _Wrapper()
    call = ("updater", ragged, paged, "idx", "lens", 7, "seq", None, "start", "indptr", "qo", True, None)
    packing_args()
    prefill.prefill_plan(original, *call)
    assert ragged.planned == [{"disable_split_kv": True}]
    assert paged.planned == [{"disable_split_kv": True, "fixed_split_size": None}]
    assert "begin_forward" not in vars(ragged) and "begin_forward" not in vars(paged)  # the methods are back
    packing_args(pack=False)
    prefill.prefill_plan(original, *call)
    assert ragged.planned[-1] == {} and paged.planned[-1] == {"fixed_split_size": None}


def test_a_pack_set_for_fa3_stops_at_a_prefill_planned_on_another_kernel(packing_args, monkeypatch):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterPrefill

    from corun_sglang import kernel_probe, packing

    real = FlashInferIndicesUpdaterPrefill.call_begin_forward
    while hasattr(real, "__wrapped__"):
        real = real.__wrapped__

    def original(self, wrapper_ragged, wrapper_paged, *args, **kwargs):
        wrapper_ragged.begin_forward("qo", "kv")

    original.__signature__ = __import__("inspect").signature(real)

    def plan(backend, use_ragged=True):
        ragged = _Wrapper()
        ragged._backend = backend  # what FlashInfer resolves "auto" to at the first plan
        return prefill.prefill_plan(original, "updater", ragged, _Wrapper(), "idx", "lens", 7, "seq", None,
                                     "start", "indptr", "qo", use_ragged, None)

    packing_args()
    plan("fa2")  # the FA2 rule holds on any kernel
    monkeypatch.setattr(kernel_probe, "prefill_kernel", lambda head_dim, dtype, paged: packing.FA3)
    packing_args()
    plan("fa3")
    with pytest.raises(CorunContractError, match="planned on FlashInfer's fa2 kernel.*from 1 tokens"):
        plan("fa2")
    with pytest.raises(CorunContractError, match="paged fa2 kernel.*SGLANG_FLASHINFER_USE_PAGED=1"):
        plan("fa3", use_ragged=False)


def test_a_prefills_lm_head_computes_the_packs_rows_and_returns_its_own(packing_args):
    seen = []

    def original(self, hidden_states, lm_head, embedding_bias=None):
        seen.append(hidden_states.shape[0])
        return hidden_states @ lm_head

    states, head = torch.randn(3, 8), torch.randn(8, 5)
    packing_args()
    logits = prefill.lm_head_rows(original, "processor", states, head)
    assert seen == [PACK] and torch.equal(logits, states @ head)
    prefill.lm_head_rows(original, "processor", torch.randn(300, 8), head)
    assert seen[-1] == 300
    packing_args(pack=False)
    prefill.lm_head_rows(original, "processor", states, head)
    assert seen[-1] == 3


def test_the_prefill_graphs_start_at_the_pack(packing_args):
    runner = types.SimpleNamespace(server_args=packing_args())
    assert prefill.prefill_graph_runner_init("built", types.SimpleNamespace(capture_num_tokens=[256, 512]),
                                              runner) == "built"
    with pytest.raises(CorunContractError, match="needs 256 as the smallest"):
        prefill.prefill_graph_runner_init("built", types.SimpleNamespace(capture_num_tokens=[64, 256]), runner)
    plain = types.SimpleNamespace(server_args=packing_args(pack=False))
    assert prefill.prefill_graph_runner_init("built", types.SimpleNamespace(capture_num_tokens=[64]), plain) == "built"


def test_a_pack_record_from_another_environment_stops_the_server_and_a_candidate_logs_its_own(
        make_args, tmp_path, monkeypatch, caplog):
    import json

    from corun_sglang import pack_record, records

    path = tmp_path / "pack.json"
    path.write_text(json.dumps(pack_record.Record(pack=PACK, shortest=33, environment={"gpu": "A"}).to_json()))
    monkeypatch.setattr(startup, "environment", lambda model_runner: {"gpu": "B"})
    graphs = types.SimpleNamespace(capture_bs=[256])

    def runner(**options):
        return types.SimpleNamespace(server_args=make_args(corun=True, **options),
                                     req_to_token_pool=types.SimpleNamespace(size=300))

    with pytest.raises(CorunContractError,
                       match=r"--corun-prefill-pack .*pack.json was verified in another environment "
                             r"\(gpu: verified with 'A', this server has 'B'\).*verify-prefill-pack"):
        startup.decode_graph_runner_init("built", graphs, runner(corun_prefill_pack=str(path)))
    with caplog.at_level("WARNING"):
        assert startup.decode_graph_runner_init("built", graphs, runner(corun_prefill_pack_candidate=PACK)) == "built"
    assert records.environment_from_log(caplog.text) == {"gpu": "B"}
    assert pack_record.candidate_from_log(caplog.text) == {"pack": PACK, "shortest": 33, "kernel": "fa2"}
    assert startup.decode_graph_runner_init("built", graphs, runner()) == "built"  # nothing to verify


# ----------------------------------------------------------------- reservations, metrics, contract stops


class _Scheduler(types.SimpleNamespace):
    """What the admission, reservation and stop adapters read of SGLang's ``Scheduler`` (weak-referable and
    hashed by identity, as it is)."""

    __hash__ = object.__hash__


class _Collector(types.SimpleNamespace):
    """What the metrics adapters read of SGLang's ``SchedulerMetricsCollector`` (weak-referable and hashed by
    identity, as it is)."""

    __hash__ = object.__hash__


def _stats_scheduler(adder, waiting, cache, **kwargs):
    return _Scheduler(
        running_batch=adder.running_batch, last_batch=None, cur_batch_for_debug=None, chunked_req=None,
        waiting_queue=[_req(200 + i, p, n, cache) for i, (p, n) in enumerate(waiting)], page_size=1,
        token_to_kv_pool_allocator=adder.token_to_kv_pool_allocator, **{"max_running_requests": 8, **kwargs})


def _private_metrics():
    from prometheus_client import CollectorRegistry

    from corun_sglang import metrics

    registry = CollectorRegistry()
    labels = {"model_name": "m", "tp_rank": 0}
    return metrics.Metrics(labels, registry=registry), lambda name: registry.get_sample_value(
        name, {"model_name": "m", "tp_rank": "0"})


@pytest.mark.parametrize("corun,bound,given,prompt,expected", [
    (True, 512, None, 100, 512),
    (True, 512, 64, 100, 64),  # a request's own max_new_tokens is kept
    (True, 512, None, 3800, 4095 - 3800 - 1),  # SGLang still caps the bound to the context
    (True, None, None, 100, 4095 - 100 - 1),  # unset: SGLang's own, the rest of the context
    (False, None, None, 100, 4095 - 100 - 1),
])
def test_a_request_without_max_new_tokens_gets_the_default_bound(make_args, corun, bound, given, prompt, expected):
    from sglang.srt.managers.scheduler import Scheduler

    _, cache = _cache(100)
    req = _req(1, prompt, given, cache)
    scheduler = types.SimpleNamespace(max_new_tokens_limit=None, page_size=1, max_req_len=4095,
                                      max_total_num_tokens=100_000,
                                      server_args=make_args(corun=corun, corun_default_max_new_tokens=bound))
    Scheduler.init_req_max_new_tokens(scheduler, req)  # SGLang's, hooked
    assert req.sampling_params.max_new_tokens == expected


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

    from corun_sglang import metrics

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
    scheduler = _stats_scheduler(
        adder, [(50, 10)], cache, server_args=make_args(corun=corun),
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

    from corun_sglang import stops

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


# ----------------------------------------------------------------- request check (tokenizer process)


@pytest.fixture
def tokenizer_manager(make_args):
    """SGLang's own ``TokenizerManager`` (hooked), built without its IPC sockets, on a byte-level stand-in
    tokenizer (prompts are token ids): what it sends to the scheduler is recorded, and each request
    finishes as soon as it is sent."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.sampling.sampling_params import SamplingParams

    def build(corun: bool = True):
        args = make_args(corun=corun)
        publish(args, role="tokenizer")
        tm = TokenizerManager.__new__(TokenizerManager)
        tm.server_args, tm.elastic_worker_count = args, 1
        tm.init_running_status()
        tm.init_request_logging_and_dumping()
        tm.init_weight_update()
        tm.enable_trace = tm.allow_auto_truncate = tm.enable_lora = tm.enable_priority_scheduling = False
        tm.preferred_sampling_params = tm.default_priority_value = tm.mm_processor = None
        tm.tokenizer = types.SimpleNamespace(encode=lambda text, add_special_tokens=False: list(text.encode()))
        tm.context_len, tm.num_reserved_tokens, tm.validate_total_tokens, tm.is_generation = 4096, 0, True, True
        tm.model_config, tm.sampling_params_class = args.get_model_config(), SamplingParams
        tm.disaggregation_mode = None
        tm.sent = []
        tm._dispatch_to_scheduler = tm.sent.append
        tm.auto_create_handle_loop = lambda: None

        async def finished(obj, request=None):
            tm._remove_req_state(obj.rid)
            yield {"meta_info": {"id": obj.rid}}

        tm._wait_one_response = finished
        return tm

    return build


def _generate(tm, obj):
    import asyncio

    async def run():
        return [out async for out in tm.generate_request(obj)]

    return asyncio.run(run())


def _request_of(case, tm):
    """A corpus case as the ``GenerateReqInput`` its endpoint hands the tokenizer manager (OpenAI bodies
    through SGLang's own protocol models and conversions)."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang import request_corpus

    if case.path == request_corpus.GENERATE:
        return GenerateReqInput(**case.body)
    if case.path == request_corpus.COMPLETIONS:
        serving = OpenAIServingCompletion.__new__(OpenAIServingCompletion)
        serving.tokenizer_manager = tm
        serving.template_manager = types.SimpleNamespace(completion_template_name=None)
        serving.allowed_custom_labels = None
        return serving._convert_to_internal_request(CompletionRequest(**case.body))[0]
    request = ChatCompletionRequest(**case.body)  # as serving_chat builds it, the prompt already tokenized
    return GenerateReqInput(
        input_ids=list(request_corpus.PROMPT), stream=request.stream, rid=request.rid, return_text_in_logprobs=True,
        sampling_params=request.to_sampling_params(stop=[], model_generation_config={}),
        return_logprob=request.logprobs, logprob_start_len=-1, top_logprobs_num=request.top_logprobs or 0,
    )


def _corpus():
    from corun_sglang import request_corpus

    return [pytest.param(c, id=c.name) for c in request_corpus.CASES]


@pytest.mark.parametrize("case", _corpus())
def test_each_corpus_request_is_served_or_refused_by_name_before_the_scheduler(tokenizer_manager, case):
    tm = tokenizer_manager()
    if case.status == 200:
        _generate(tm, _request_of(case, tm))
        assert tm.sent
        return
    with pytest.raises(ValueError) as err:
        _generate(tm, _request_of(case, tm))
    assert all(name in str(err.value) for name in case.names), str(err.value)
    assert not tm.sent and not tm.rid_to_state  # nothing reached the scheduler, nothing left behind


def test_without_corun_the_check_passes_everything_through(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    tm = tokenizer_manager(corun=False)
    _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"frequency_penalty": 0.5, "sampling_seed": 2**70},
                                   top_logprobs_num=3, return_logprob=True))
    assert tm.sent[0].sampling_params.frequency_penalty == 0.5 and tm.sent[0].sampling_params.sampling_seed == 2**70


def test_the_same_n_request_sent_twice_gets_the_same_child_seeds(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang.seeds import child_seed

    tm = tokenizer_manager()

    def child_seeds(rid):
        tm.sent.clear()
        body = {"input_ids": [5, 6, 7], "rid": rid, "sampling_params": {"n": 3, "sampling_seed": 7, "max_new_tokens": 4}}
        _generate(tm, GenerateReqInput(**body))
        return [o.sampling_params.sampling_seed for o in tm.sent if o.sampling_params.max_new_tokens]

    expected = [child_seed(7, i) for i in range(3)]
    assert child_seeds("r") == expected
    assert child_seeds("r") == expected  # the same rid again
    assert child_seeds("other") == expected


def test_a_batch_of_n_requests_seeds_each_prompts_children_by_position(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang.seeds import child_seed

    tm = tokenizer_manager()
    body = {"input_ids": [[5, 6, 7], [8, 9]], "rid": ["a", "b"],
            "sampling_params": [{"n": 2, "sampling_seed": 1}, {"n": 2, "sampling_seed": 2}]}
    _generate(tm, GenerateReqInput(**body))
    seeds = [(o.rid.split("_")[0], o.sampling_params.sampling_seed) for o in tm.sent if o.sampling_params.max_new_tokens]
    assert seeds == [("a", child_seed(1, 0)), ("a", child_seed(1, 1)),
                     ("b", child_seed(2, 0)), ("b", child_seed(2, 1))]


@pytest.mark.parametrize("seed", ["abc", -1, 2**70, 1.5, True])
def test_a_scheduler_never_raises_on_a_seed_that_is_not_one(serving, seed):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    from corun_sglang import seeds

    serving(True)
    _, cache = _cache(1000)
    bad, twin = _req(1, 10, 4, cache), _req(2, 10, 4, cache)
    bad.sampling_params.sampling_seed = seed
    info = SamplingBatchInfo.from_schedule_batch(ScheduleBatch(reqs=[bad, twin], device="cpu"), vocab_size=1024)
    derived = seeds.request_seed(0, seeds.content_digest(list(range(10)), seeds.params_of(twin.sampling_params)))
    assert info.sampling_seed.tolist() == [derived, derived]  # sampled from the derived seed instead


def test_a_logical_requests_child_count_goes_with_its_state():
    """SGLang's ``ReqState`` compares by value and does not hash: the count is kept by identity, so an equal
    state of another request counts from 0, and the count of a dropped state is dropped with it."""
    import gc

    from sglang.srt.managers.tokenizer_manager import ReqState

    lifecycle = object()

    def state():
        return ReqState(out_list=[], finished=False, event=None, obj=None, time_stats=None, lifecycle_id=lifecycle)

    kept = len(adapter_seeds._children)
    first, twin = state(), state()
    assert first == twin
    adapter_seeds._children[first] = (3, 11)
    assert adapter_seeds._children.get(first) == (3, 11) and adapter_seeds._children.get(twin) is None
    adapter_seeds._children[twin] = (1, 12)
    assert len(adapter_seeds._children) == kept + 2
    del first, twin
    gc.collect()
    assert len(adapter_seeds._children) == kept


# ----------------------------------------------------------------- the contract as clients see it


def _answering(tm):
    """``tm`` answers each request it sends as a scheduler would: two output tokens, finished (SGLang's own
    ``_wait_one_response`` hands them on)."""
    from sglang.srt.managers.io_struct import BatchTokenizedGenerateReqInput

    def answer(obj):
        tm.sent.append(obj)
        for one in obj.batch if isinstance(obj, BatchTokenizedGenerateReqInput) else [obj]:
            state = tm.rid_to_state[one.rid]
            seed = one.sampling_params.sampling_seed
            state.out_list.append({"text": f"s{seed % 97}", "output_ids": [seed % 97, 1], "meta_info": {
                "id": one.rid, "finish_reason": {"type": "length", "length": 2}, "prompt_tokens": len(one.input_ids),
                "completion_tokens": 2, "reasoning_tokens": 0, "cached_tokens": 0, "weight_version": "default"}})
            state.finished = True
            state.event.set()  # the state stays: SGLang drops it later, from its output loop

    tm._dispatch_to_scheduler = answer
    del tm._wait_one_response  # SGLang's own, hooked
    tm.incremental_streaming_output = False
    return tm


class _InitResult(types.SimpleNamespace):
    """What the engine hands the tokenizer process of its schedulers (SGLang's ``SchedulerInitResult``)."""


def _started_scheduler(args, model, tp_rank=0):
    """SGLang's own ``Scheduler`` (hooked), as far as ``get_init_info`` and the contract read it after start."""
    from sglang.srt.managers.scheduler import Scheduler

    scheduler = Scheduler.__new__(Scheduler)
    scheduler.server_args = args
    scheduler.max_total_num_tokens, scheduler.max_req_input_len, scheduler.startup_time = 1000, 900, {}
    scheduler.ps = types.SimpleNamespace(tp_rank=tp_rank)
    config = types.SimpleNamespace(hf_config=types.SimpleNamespace(to_dict=lambda: {"hidden_size": 16}),
                                   dtype=torch.bfloat16)
    scheduler.tp_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(model=model, model_config=config, server_args=args))
    return scheduler


def _fingerprinted(make_args, tm=None, models=None, **options):
    """The init info of one scheduler per model in ``models`` (TP ranks 0, 1, ...) handed to ``tm``."""
    from corun_sglang.adapters import contract

    args = make_args(corun=True, **options)
    models = models or [torch.nn.Linear(4, 4)]
    infos = [_started_scheduler(args, m, rank).get_init_info() for rank, m in enumerate(models)]
    contract.hand_over(None, tm if tm is not None else _Manager(), _InitResult(scheduler_infos=infos))
    return infos


def test_the_scheduler_init_info_carries_the_contract_and_server_info_shows_its_fingerprint(make_args):
    from corun_sglang.adapters import contract

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    (info,) = _fingerprinted(make_args, models=[model])
    assert info["status"] == "ready" and info["max_req_input_len"] == 900  # SGLang's own info, kept
    shown = info[contract.INFO]
    assert shown["system_fingerprint"].startswith("fp_") and shown["tp_size"] == 1
    assert shown["configuration"]["N"] == 256 and shown["configuration"]["decode tiers verified"] is False
    assert shown["environment"]["model"] and shown["environment"]["tp_size"] == 1
    again = _fingerprinted(make_args, models=[model])[0][contract.INFO]["system_fingerprint"]
    assert again == shown["system_fingerprint"]  # another server of this configuration
    assert _fingerprinted(make_args, models=[model], max_running_requests=64)[0][contract.INFO][
        "system_fingerprint"] != again  # another N
    tuned = torch.nn.Linear(4, 4)
    tuned.load_state_dict(model.state_dict())
    with torch.no_grad():
        tuned.weight.view(torch.int32)[0, 0] ^= 1
    assert _fingerprinted(make_args, models=[tuned])[0][contract.INFO]["system_fingerprint"] != again


def test_every_tp_ranks_weights_are_in_the_fingerprint(make_args):
    from corun_sglang.adapters import contract

    torch.manual_seed(0)
    shards = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    first = _fingerprinted(make_args, models=shards)
    assert len(first[0][contract.INFO]["weights"]) == 2
    with torch.no_grad():
        shards[1].bias.view(torch.int32)[0] ^= 1  # rank 1's shard only
    assert (_fingerprinted(make_args, models=shards)[0][contract.INFO]["system_fingerprint"]
            != first[0][contract.INFO]["system_fingerprint"])


def test_without_corun_the_init_info_is_sglangs(make_args):
    from corun_sglang.adapters import contract

    info = _started_scheduler(make_args(corun=False), torch.nn.Linear(2, 2)).get_init_info()
    assert contract.INFO not in info and info["status"] == "ready"
    with pytest.raises(CorunContractError, match="reported no corun_contract"):
        contract.hand_over(None, _Manager(), _InitResult(scheduler_infos=[info]))


def test_meta_info_carries_the_fingerprint_and_each_samples_seed(tokenizer_manager, make_args):
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang.adapters import contract
    from corun_sglang.seeds import child_seed

    tm = _answering(tokenizer_manager())
    value = _fingerprinted(make_args, tm)[0][contract.INFO]["system_fingerprint"]
    (out,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"sampling_seed": 11}))
    assert out["meta_info"]["system_fingerprint"] == value and out["meta_info"]["sampling_seed"] == 11
    (outs,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"n": 3, "sampling_seed": 11}))
    assert [o["meta_info"]["sampling_seed"] for o in outs] == [child_seed(11, i) for i in range(3)]
    assert {o["meta_info"]["system_fingerprint"] for o in outs} == {value}


def test_a_returned_seed_replays_its_sample(tokenizer_manager):
    """Child i of an unseeded n > 1 request, and an unseeded request, sent again with the seed they returned
    and n = 1, are sampled from that seed."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    tm = _answering(tokenizer_manager())
    (children,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"n": 3, "temperature": 0.7}))
    (single,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"temperature": 0.7}))
    for out in [*children, single]:
        seed = out["meta_info"]["sampling_seed"]
        tm.sent.clear()
        (replay,) = _generate(tm, GenerateReqInput(input_ids=[5, 6, 7],
                                                   sampling_params={"temperature": 0.7, "sampling_seed": seed}))
        assert tm.sent[-1].sampling_params.sampling_seed == seed == replay["meta_info"]["sampling_seed"]
        assert replay["output_ids"] == out["output_ids"]


def test_identical_unseeded_requests_are_distinct_and_replayed_by_a_fresh_server(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    def run():
        tm = _answering(tokenizer_manager())
        return [_generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"temperature": 0.7}))[0]
                ["meta_info"]["sampling_seed"] for _ in range(8)]

    first = run()
    assert len(set(first)) == 8
    assert run() == first


def _completion_serving(tm):
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

    return OpenAIServingCompletion(tm, types.SimpleNamespace(completion_template_name=None))


def _completion(tm, **body):
    import asyncio
    import json

    from sglang.srt.entrypoints.openai.protocol import CompletionRequest

    async def run():
        response = await _completion_serving(tm).handle_request(
            CompletionRequest(model="m", prompt=[5, 6, 7], max_tokens=2, **body), None)
        if not body.get("stream"):
            return json.loads(json.dumps(response.model_dump(mode="json")))
        events = [e async for e in response.body_iterator]
        return [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {")]

    return asyncio.run(run())


def test_openai_completions_carry_the_fingerprint_and_each_choices_seed(tokenizer_manager, make_args):
    from corun_sglang.adapters import contract
    from corun_sglang.seeds import child_seed

    tm = _answering(tokenizer_manager())
    value = _fingerprinted(make_args, tm)[0][contract.INFO]["system_fingerprint"]
    out = _completion(tm, seed=5, n=2, temperature=0.7)
    assert out["system_fingerprint"] == value
    assert [c["sampling_seed"] for c in out["choices"]] == [child_seed(5, 0), child_seed(5, 1)]
    assert [c["text"] for c in out["choices"]] == [f"s{child_seed(5, i) % 97}" for i in range(2)]
    chunks = _completion(tm, seed=5, n=2, temperature=0.7, stream=True)
    assert chunks and {c["system_fingerprint"] for c in chunks} == {value}
    streamed = {c["choices"][0]["index"]: c["choices"][0]["sampling_seed"] for c in chunks}
    assert streamed == {0: child_seed(5, 0), 1: child_seed(5, 1)}
    (replay,) = _completion(tm, seed=out["choices"][1]["sampling_seed"], temperature=0.7)["choices"]
    assert replay["text"] == out["choices"][1]["text"]


def test_without_corun_openai_completions_are_sglangs(tokenizer_manager):
    tm = _answering(tokenizer_manager(corun=False))
    out = _completion(tm, seed=5, temperature=0.7)
    assert "system_fingerprint" not in out and "sampling_seed" not in out["choices"][0]
    assert all("system_fingerprint" not in c for c in _completion(tm, seed=5, stream=True))


def test_a_chat_completion_carries_the_fingerprint_and_each_choices_seed(tokenizer_manager, make_args):
    """SGLang's own chat response, as ``_build_chat_response`` makes it, through the adapter; its JSON is
    SGLang's with the two fields added."""
    from sglang.srt.entrypoints.openai.protocol import (ChatCompletionResponse, ChatCompletionResponseChoice,
                                                        ChatMessage, UsageInfo)

    from corun_sglang.adapters import contract

    tm = tokenizer_manager()
    value = _fingerprinted(make_args, tm)[0][contract.INFO]["system_fingerprint"]
    ret = [{"meta_info": {"sampling_seed": 21}}, {"meta_info": {"sampling_seed": 22}}]

    def build(self, request, ret, created):
        return ChatCompletionResponse(id="r", model="m", created=created, usage=UsageInfo(), choices=[
            ChatCompletionResponseChoice(index=i, message=ChatMessage(role="assistant", content=f"c{i}"),
                                         finish_reason="length") for i in range(len(ret))])

    serving = types.SimpleNamespace(tokenizer_manager=tm)
    plain = build(serving, None, ret, 7).model_dump(mode="json")
    stamped = contract.chat_response(build, serving, None, ret, 7)
    assert isinstance(stamped, ChatCompletionResponse)
    assert stamped.model_dump(mode="json") == {
        **plain, "system_fingerprint": value,
        "choices": [{**c, "sampling_seed": s} for c, s in zip(plain["choices"], [21, 22])]}
    serving = types.SimpleNamespace(tokenizer_manager=tokenizer_manager(corun=False))
    assert contract.chat_response(build, serving, None, ret, 7).model_dump(mode="json") == plain
