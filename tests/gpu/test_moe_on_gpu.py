"""SGLang's fused MoE on a GPU, at the kernels, as ``--corun`` runs it:
- ``--corun-moe-padding skip``: with the padding rows' expert ids set to -1 and the filter on, every
  real row has the bits it has with the padding routed;
- decode tiers: a tier's layer, run with the kernel configuration SGLang picks for its own row count
  (other tiles and K step than N's), gives its rows the bits of the N-row layer. The fused-MoE
  kernel sums a row's products over K in one order whatever the tiles, so a tier needs nothing of
  the experts; the negative control for the harness is the routing test below."""

import pytest
import torch

from corun_sglang.core import moe_padding

fused_moe = pytest.importorskip("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe")

#: A Qwen3-30B-A3B MoE layer (128 experts, top 8, hidden 2048, expert width 768) in a 256-slot decode
#: graph with 16 requests running: 240 padding rows, all the same token, as SGLang pads a graph.
EXPERTS, TOP_K, HIDDEN, WIDTH, SLOTS, RUNNING = 128, 8, 2048, 768, 256, 16


@pytest.fixture(scope="module")
def layer(make_args_module):
    from sglang.srt.runtime_context import publish

    publish(make_args_module(), role="scheduler")  # the kernels read their configuration from it
    g = torch.Generator(device="cuda").manual_seed(0)

    def normal(*shape, std=0.05):
        return torch.randn(*shape, device="cuda", generator=g, dtype=torch.bfloat16) * std

    w1, w2 = normal(EXPERTS, 2 * WIDTH, HIDDEN), normal(EXPERTS, HIDDEN, WIDTH)
    hidden = normal(SLOTS, HIDDEN, std=1.0)
    hidden[RUNNING:] = hidden[RUNNING]  # padding rows: one token repeated
    logits = normal(SLOTS, EXPERTS, std=1.0).float()
    logits[RUNNING:] = logits[RUNNING]
    weights, ids = torch.softmax(logits, -1).topk(TOP_K, dim=-1)
    return hidden, w1, w2, (weights / weights.sum(-1, keepdim=True)).contiguous(), ids.to(torch.int32).contiguous()


def _experts(layer, ids, filter_expert):
    hidden, w1, w2, weights, _ = layer
    # in place, into a copy: the kernels' own output buffer would come from the TP group's pool
    return fused_moe.fused_experts_impl(hidden.clone(), w1, w2, weights, ids, inplace=True, filter_expert=filter_expert)


def test_padding_rows_without_experts_leave_every_real_row_bitwise_equal(layer):
    ids = layer[4]
    routed = _experts(layer, ids.clone(), filter_expert=False)
    skipped_ids = ids.clone()
    with moe_padding.forward(moe_padding.rows(SLOTS, torch.tensor([RUNNING], dtype=torch.int32, device="cuda"))):
        assert moe_padding.mask(skipped_ids)
    assert (skipped_ids[RUNNING:] == moe_padding.UNROUTED).all() and torch.equal(skipped_ids[:RUNNING], ids[:RUNNING])
    skipped = _experts(layer, skipped_ids, filter_expert=True)
    assert torch.equal(skipped[:RUNNING], routed[:RUNNING])
    assert not skipped[RUNNING:].any()  # a row without an expert comes out zero
    # the filter alone, on a batch without padding, changes nothing either
    assert torch.equal(_experts(layer, ids.clone(), filter_expert=True), routed)


def test_the_harness_sees_a_real_row_routed_elsewhere(layer):
    """Negative control: one real row sent to another expert changes that row, and only it."""
    ids = layer[4]
    routed = _experts(layer, ids.clone(), filter_expert=False)
    moved = ids.clone()
    moved[0, 0] = next(e for e in range(EXPERTS) if e not in ids[0].tolist())
    other = _experts(layer, moved, filter_expert=False)
    assert not torch.equal(other[0], routed[0]) and torch.equal(other[1:], routed[1:])


def test_a_tier_under_its_own_kernel_configuration_gives_the_rows_of_the_n_slot_graph(layer):
    hidden, w1, w2, weights, ids = layer
    configs = [fused_moe.try_get_optimal_moe_config(w1.shape, w2.shape, TOP_K, None, m) for m in (RUNNING, SLOTS)]
    assert configs[0] != configs[1]  # the comparison spans two configurations, else it proves nothing
    full = _experts(layer, ids.clone(), filter_expert=False)
    tier = [t[:RUNNING].contiguous() for t in (hidden, weights, ids)]  # a 16-slot graph's rows
    own = fused_moe.fused_experts_impl(tier[0].clone(), w1, w2, tier[1], tier[2].clone(), inplace=True,
                                       filter_expert=False)
    assert torch.equal(own, full[:RUNNING])
