"""``adapters.logprobs``: SGLang's own top-k logprob helpers give a request the top-k of its own row in one
order (value descending, id ascending), whatever its co-runners ask for; as shipped without --corun."""

import pytest
import torch

from corun_sglang.core import ranking
from corun_sglang.serving.adapters import logprobs as adapter
from corun_sglang.core.stops import CorunContractError


def _tied(rows=6, width=512, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randint(0, 3, (rows, width), generator=g).float(), -1)


def _decode(rows, nums):
    """SGLang's decode path: ``OutputLogprobProcessor.compute_logprobs`` over the batch's rows."""
    from sglang.srt.layers.logprob_processor import OutputLogprobProcessor

    result = OutputLogprobProcessor().compute_logprobs(
        rows.clone(), nums, [None] * len(nums), torch.zeros(len(nums), dtype=torch.int64))
    return [(v.tolist(), i.tolist()) for v, i in zip(result.top_logprobs_val, result.top_logprobs_idx)]


def _needle_among(rows, co_runner_k):
    """Row 0 asks for its top 3; the other rows are co-runners asking for ``co_runner_k``."""
    return _decode(rows, [3] + [co_runner_k] * (rows.shape[0] - 1))[0]


def test_a_needles_top_k_is_its_own_rows_whatever_its_co_runners_ask(serving):
    serving(True)
    rows = _tied()
    alone = _decode(rows[:1], [3])[0]
    for k in (0, 1, 5, 64, 400):
        assert _needle_among(rows, k) == alone
    _, ids = ranking.top(rows[:1], 3)
    assert alone[1] == ids[0].tolist()
    values, ids = alone
    assert all(i < j for a, b, i, j in zip(values, values[1:], ids, ids[1:]) if a == b)  # ties: ascending ids


def test_negative_control_as_shipped_the_co_runners_k_picks_the_needles_ties(serving):
    serving(False)
    rows = _tied()
    seen = {tuple(map(tuple, _needle_among(rows, k))) for k in (0, 5, 64, 400)}
    assert len(seen) > 1, seen


def _prompt_rows(rows, nums, pruned):
    """SGLang's prefill path for prompt positions: ``get_top_logprobs_chunk`` over a (packed) prefill."""
    from sglang.srt.layers import logprob_processor

    values, ids = [], []
    logprob_processor.get_top_logprobs_chunk(rows.clone(), nums, pruned, values, ids, 0)
    return [[torch.as_tensor(v).tolist() for v in vals] for vals in values], ids


def test_a_prompts_top_k_is_the_same_alone_and_packed_with_another_prompt(serving):
    serving(True)
    rows = _tied(rows=10)
    alone = _prompt_rows(rows[:4], [2], [4])
    packed = _prompt_rows(rows, [2, 50], [4, 6])
    assert packed[0][0] == alone[0][0] and packed[1][0] == alone[1][0]
    serving(False)
    shipped = {tuple(map(tuple, _prompt_rows(rows, [2, k], [4, 6])[1][0])) for k in (1, 50, 300)}
    assert len(shipped) > 1  # the negative control: as shipped, the pack's largest k picks the ties


def test_anything_but_topk_of_the_rows_stops_the_server():
    ranked = adapter.Ranked(_tied())
    with pytest.raises(CorunContractError):
        ranked.shape
    with pytest.raises(CorunContractError):
        ranked.topk(3, dim=0)
    values, indices = ranked.topk(3, dim=1)
    assert torch.equal(indices, ranking.top(_tied(), 3)[1])


def test_without_corun_the_helpers_are_sglangs(serving):
    serving(False)
    rows = _tied()
    values, ids = _decode(rows, [5] * rows.shape[0])[0]
    expected = torch.topk(rows, 5)
    assert ids == expected.indices[0].tolist() and values == expected.values[0].tolist()


def _mixed_token_ids(rows, asks):
    """A batch whose rows ask for ``asks[i]`` token ids (None: none) through SGLang's decode path, then its
    prefill result processor's ``move_logprobs_to_cpu``: what each row's reply carries."""
    import types

    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.logprob_processor import OutputLogprobProcessor
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    out = LogitsProcessorOutput(next_token_logits=None)
    OutputLogprobProcessor().compute_logprobs(
        rows.clone(), [0] * len(asks), asks, torch.zeros(len(asks), dtype=torch.int64)).write_output_to(out)
    SchedulerBatchResultProcessor.move_logprobs_to_cpu(
        None, batch=types.SimpleNamespace(return_logprob=True), logits_output=out)
    return out.next_token_token_ids_logprobs_val


def test_a_batch_mixing_token_ids_logprob_with_rows_without_it_is_served_row_by_row(serving):
    serving(True)
    rows, chosen = _tied(rows=4), [0, 1, 2, 13, 100]
    alone = _mixed_token_ids(rows[:1], [chosen])[0]
    mixed = _mixed_token_ids(rows, [chosen, None, [7, 3], None])
    assert mixed[0] == alone == rows[0, chosen].tolist()
    assert mixed[1] == mixed[3] == [] and mixed[2] == rows[2, [7, 3]].tolist()


def test_negative_control_as_shipped_a_mixed_token_ids_batch_kills_the_result_processor(serving):
    serving(False)
    with pytest.raises(AttributeError, match="tolist"):
        _mixed_token_ids(_tied(rows=4), [[0, 1, 2], None, None, None])
    assert _mixed_token_ids(_tied(rows=2), [[0, 1], [2]])[1] == _tied(rows=2)[1, [2]].tolist()  # unmixed: served
