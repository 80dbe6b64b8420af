"""``sampler``: the corun backend inside SGLang's sampler machinery (CPU, Triton interpreter).

A one-process gloo group stands in for the TP group SGLang's ``Sampler``
needs; samplers come from SGLang's own ``create_sampler``.
"""

import pytest
import torch

from corun_sglang.serving import sampling_kernels
from corun_sglang.serving.sampler import CorunSampler

ALL = 1 << 30


@pytest.fixture(scope="module")
def sglang_sampling(make_args_module, tp_group):
    from sglang.srt.runtime_context import publish

    publish(make_args_module(corun=True), role="scheduler")
    from sglang.srt.layers.sampler import create_sampler

    return create_sampler


def _info(temps, top_ks, seeds):
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    rows = len(temps)
    top_ks = torch.tensor(top_ks, dtype=torch.int32)
    return SamplingBatchInfo(
        temperatures=torch.tensor(temps).view(-1, 1),
        top_ps=torch.ones(rows),
        top_ks=top_ks,
        min_ps=torch.zeros(rows),
        is_all_greedy=bool((top_ks <= 1).all()),
        is_any_greedy=bool((top_ks <= 1).any()),
        need_top_p_sampling=False,
        need_top_k_sampling=bool((top_ks != ALL).any()),
        need_min_p_sampling=False,
        vocab_size=1000,
        sampling_seed=None if seeds is None else torch.tensor(seeds, dtype=torch.int64),
        device="cpu",
    )


def _run(sampler, logits, info):
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput

    out = LogitsProcessorOutput(next_token_logits=logits.clone())
    rows = logits.shape[0]
    ids = sampler(out, info, True, [0] * rows, [None] * rows, torch.arange(rows, dtype=torch.int64) + 50)
    return ids.to(torch.int64), out.next_token_logprobs


LOGITS = torch.randn(12, 1000, generator=torch.Generator().manual_seed(0)) * 4


def test_corun_backend_is_what_sglang_creates(sglang_sampling):
    assert type(sglang_sampling()) is CorunSampler


def test_tokens_are_the_request_bound_kernel_draws(sglang_sampling):
    info = _info([0.6] * 4, [ALL] * 4, [1, 2, 3, 4])
    ids, _ = _run(sglang_sampling(), LOGITS[:4], info)
    expected = sampling_kernels.sample(LOGITS[:4], info.temperatures, info.sampling_seed,
                          torch.arange(4, dtype=torch.int64) + 50, info.top_ks, info.top_ps, info.min_ps)
    assert torch.equal(ids, expected.to(torch.int64))


def _greedy_rows_alone_and_mixed(sampler, seeded):
    """Greedy rows 0..5 in an all-greedy batch, then the same rows next to sampled rows."""
    greedy = _info([1.0] * 6, [1] * 6, [0] * 6 if seeded else None)
    mixed = _info([1.0] * 6 + [0.7] * 6, [1] * 6 + [ALL] * 6, list(range(12)) if seeded else None)
    alone = _run(sampler, LOGITS[:6], greedy)
    together = _run(sampler, LOGITS, mixed)
    return alone, (together[0][:6], together[1][:6])


def test_greedy_rows_do_not_depend_on_their_co_runners(sglang_sampling):
    (ids_a, lp_a), (ids_b, lp_b) = _greedy_rows_alone_and_mixed(sglang_sampling(), seeded=True)
    assert torch.equal(ids_a, ids_b)
    assert torch.equal(lp_a.view(torch.int32), lp_b.view(torch.int32))


def test_sglang_default_sampler_logprobs_depend_on_co_runners(sglang_sampling, make_args_module):
    """Negative control: SGLang's sampler picks a batch-wide logprob path (all greedy or not)."""
    from sglang.srt.runtime_context import publish

    publish(make_args_module(sampling_backend="pytorch"), role="scheduler")
    try:
        (ids_a, lp_a), (ids_b, lp_b) = _greedy_rows_alone_and_mixed(sglang_sampling("pytorch"), seeded=False)
    finally:
        publish(make_args_module(corun=True), role="scheduler")
    assert torch.equal(ids_a, ids_b)
    assert not torch.equal(lp_a.view(torch.int32), lp_b.view(torch.int32))


def test_logprobs_are_log_softmax_of_scaled_logits(sglang_sampling):
    info = _info([0.6, 1.0], [ALL, 1], [9, 9])
    ids, lp = _run(sglang_sampling(), LOGITS[:2], info)
    ref = torch.log_softmax(LOGITS[:2] / info.temperatures, -1).gather(1, ids.view(-1, 1)).squeeze(1)
    assert torch.equal(lp, ref)


def test_a_batch_without_seeds_is_refused(sglang_sampling):
    with pytest.raises(RuntimeError, match="seeds"):
        _run(sglang_sampling(), LOGITS[:2], _info([0.6, 0.6], [ALL, ALL], None))
