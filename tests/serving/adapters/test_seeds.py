"""``adapters.seeds``: request-bound seeds in SGLang's own sampling batch and on the requests the tokenizer
manager sends, ``n > 1`` children included; pass-through without --corun."""

import pytest

from adapters.helpers import _cache, _generate, _Manager, _req, _ReqState
from corun_sglang.serving.adapters import seeds as adapter_seeds


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


@pytest.mark.parametrize("given_seed", [None, 1234])
def test_n_samples_get_distinct_seeds_the_same_set_each_time_when_seeded(serving, given_seed):
    from sglang.srt.sampling.sampling_params import SamplingParams

    serving(True)
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


def test_identical_unseeded_requests_get_distinct_seeds_the_same_after_a_restart(serving):
    serving(True)
    from sglang.srt.sampling.sampling_params import SamplingParams

    from corun_sglang.core import seeds

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


def test_the_same_n_request_sent_twice_gets_the_same_child_seeds(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang.core.seeds import child_seed

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

    from corun_sglang.core.seeds import child_seed

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

    from corun_sglang.core import seeds

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
