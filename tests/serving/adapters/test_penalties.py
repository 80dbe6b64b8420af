"""``adapters.penalties``: with the overlap scheduler, a request's penalties at each decode step count exactly
its own earlier outputs, whether or not a co-runner's prefill ran between two of its steps; SGLang's own
feeding (at preparation, from ``output_ids[-1]``) as shipped without --corun, which is the negative control.

SGLang's real ``ScheduleBatch``, ``SamplingBatchInfo``, penalizers and ``Scheduler._forward_isolation`` run on
CPU tensors; what the overlap scheduler decides is replayed: at the preparation of the step that samples
output k, the request's ``output_ids`` hold outputs 0 .. k-2 (the previous step's result is processed after
the next launch) or 0 .. k-1 when another batch (a co-runner's prefill) ran in between; at the launch, the
step's input id is output k-1 (what ``resolve_forward_inputs`` gathers from the future map).
"""

import contextlib
import types

import pytest
import torch

from adapters.helpers import _cache, _req

OUTPUTS = [5, 9, 5, 5, 7, 9, 5, 2, 11, 5]  # the needle's outputs, 0 .. 9 (2 is EOS)
EOS = 2


def _batch(needle_params):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    _, cache = _cache(2000)
    needle, plain = _req(1, 12, 16, cache), _req(2, 20, 16, cache)
    for name, value in needle_params.items():
        setattr(needle.sampling_params, name, value)
    for req in (needle, plain):
        req.tokenizer = types.SimpleNamespace(additional_stop_token_ids=None, eos_token_id=EOS)
    batch = ScheduleBatch(reqs=[needle, plain], device="cpu")
    batch.sampling_info = SamplingBatchInfo.from_schedule_batch(batch, vocab_size=1024)
    batch.enable_overlap, batch.forward_mode = True, ForwardMode.DECODE
    batch.spec_algorithm = SpeculativeAlgorithm.NONE
    return batch


def _scheduler():
    from sglang.srt.managers.scheduler import Scheduler

    scheduler = Scheduler.__new__(Scheduler)
    scheduler.batch_record_buf, scheduler.batch_record_ct = [None, None], 0
    return scheduler


def _penalties_per_step(needle_params, caught_up_steps):
    """The needle's additive and scaling penalties at each decode step (outputs 1 .. 9), the overlap schedule
    replayed; at the steps in ``caught_up_steps`` a co-runner's prefill ran just before."""
    batch, scheduler = _batch(needle_params), _scheduler()
    needle, plain = batch.reqs
    seen = []
    for k in range(1, len(OUTPUTS)):
        known = k if k in caught_up_steps else k - 1
        needle.output_ids, plain.output_ids = list(OUTPUTS[:known]), [3] * known
        if batch.sampling_info.penalizer_orchestrator.is_required:  # as ``prepare_for_decode`` feeds them
            batch.cumulate_penalty_output_tokens()
        batch.input_ids = torch.tensor([OUTPUTS[k - 1], 3], dtype=torch.int32)  # resolved at launch
        with scheduler._forward_isolation(batch, overlap=True):
            info = batch.sampling_info
            additive = info.acc_additive_penalties[0].clone()
            scaling = None if info.acc_scaling_penalties is None else info.acc_scaling_penalties[0].clone()
        seen.append((additive, scaling))
    return seen


def _expected(params, k):
    """The needle's penalties at the step sampling output k: outputs 0 .. k-1 counted, SGLang's formulas."""
    counted = OUTPUTS[:k]
    additive = torch.zeros(1024)
    for token in counted:
        additive[token] -= params.get("frequency_penalty", 0.0)
    for token in set(counted):
        additive[token] -= params.get("presence_penalty", 0.0)
    if k < params.get("min_new_tokens", 0):
        additive[EOS] = float("-inf")
    scaling = torch.ones(1024)
    for token in set(counted):
        scaling[token] = params.get("repetition_penalty", 1.0)
    return additive, scaling


PARAMS = [{"frequency_penalty": 0.5}, {"presence_penalty": 0.75}, {"repetition_penalty": 1.25},
          {"min_new_tokens": 4}, {"frequency_penalty": 0.5, "presence_penalty": 0.25, "repetition_penalty": 1.5}]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "+".join(p))
def test_penalties_count_exactly_the_earlier_outputs_whatever_ran_in_between(serving, params):
    serving(True)
    alone = _penalties_per_step(params, caught_up_steps=set())
    crowded = _penalties_per_step(params, caught_up_steps={2, 3, 6})
    for k, ((add_a, scale_a), (add_c, scale_c)) in enumerate(zip(alone, crowded), start=1):
        expected_add, expected_scale = _expected(params, k)
        assert torch.equal(add_a, expected_add) and torch.equal(add_c, expected_add), k
        if "repetition_penalty" in params:
            assert torch.equal(scale_a, expected_scale) and torch.equal(scale_c, expected_scale), k


@pytest.mark.parametrize("params", [p for p in PARAMS if "min_new_tokens" not in p], ids=lambda p: "+".join(p))
def test_negative_control_as_shipped_a_co_runners_prefill_changes_what_the_penalties_count(serving, params):
    serving(False)
    alone = _penalties_per_step(params, caught_up_steps=set())
    crowded = _penalties_per_step(params, caught_up_steps={2, 3, 6})
    differs = [k for k, (a, c) in enumerate(zip(alone, crowded), start=1)
               if not torch.equal(a[0], c[0]) or (a[1] is not None and not torch.equal(a[1], c[1]))]
    assert differs, "SGLang's feeding at preparation no longer depends on what ran in between"


def test_a_decode_step_without_one_input_id_per_request_stops_the_server(serving):
    from corun_sglang.serving.adapters import penalties
    from corun_sglang.core.stops import CorunContractError

    serving(True)
    batch = _batch({"frequency_penalty": 0.5})
    batch.input_ids = torch.tensor([5], dtype=torch.int64)
    with pytest.raises(CorunContractError):
        penalties.launch_feed(lambda self, b, overlap: contextlib.nullcontext(), None, batch, overlap=True)


def test_batches_without_penalties_are_fed_nothing(serving):
    serving(True)
    batch, scheduler = _batch({}), _scheduler()
    assert not batch.sampling_info.penalizer_orchestrator.is_required
    batch.input_ids = None  # nothing reads them
    with scheduler._forward_isolation(batch, overlap=True):
        assert batch.sampling_info.acc_additive_penalties is None
