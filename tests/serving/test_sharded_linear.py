"""``sharded_linear``: SGLang's own parallel linear layers, as K shards, give the same bits at every TP size
that divides K; without the shards, TP 1 and TP 2 differ (the negative control).

SGLang's ``QKVParallelLinear``, ``MergedColumnParallelLinear`` and ``RowParallelLinear`` are built for each
rank of a TP-t server (their ``tp_rank`` / ``tp_size`` arguments) and load the same full weights through
their own weight loaders; a one-process gloo group stands in for the TP group they are built in, and the
ranks' partials are gathered by stacking them in rank order, as ``all_gather_into_tensor`` does.
"""

import pytest
import torch

from corun_sglang.serving import sharded_linear

H, HEAD, HEADS, KV, INTER, VOCAB, ROWS = 256, 32, 8, 4, 512, 1024, 5


@pytest.fixture(scope="module")
def tp_group(tp_group, make_args_module):
    from sglang.srt.runtime_context import publish

    publish(make_args_module(corun=True), role="scheduler")


@pytest.fixture(scope="module")
def weights():
    g = torch.Generator().manual_seed(0)
    shapes = {"q": (HEADS * HEAD, H), "k": (KV * HEAD, H), "v": (KV * HEAD, H), "o": (H, HEADS * HEAD),
              "gate": (INTER, H), "up": (INTER, H), "down": (H, INTER), "head": (VOCAB, H)}
    w = {name: (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16) for name, shape in shapes.items()}
    return w, torch.randn(ROWS, H, generator=g).to(torch.bfloat16)


def _rank(weights, tp: int, rank: int, k: int | None):
    """Rank ``rank`` of a TP-``tp`` server's attention output and MLP layers, loaded by SGLang's loaders and
    laid out for ``k`` shards (None: as SGLang has them)."""
    from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear

    kw = dict(bias=False, tp_rank=rank, tp_size=tp, params_dtype=torch.bfloat16)
    qkv = QKVParallelLinear(H, HEAD, HEADS, KV, **kw)
    o = RowParallelLinear(HEADS * HEAD, H, input_is_parallel=True, **kw)
    gate_up = MergedColumnParallelLinear(H, [INTER, INTER], **kw)
    down = RowParallelLinear(INTER, H, input_is_parallel=True, **kw)
    for name in "qkv":
        qkv.weight_loader(qkv.weight, weights[name], name)
    gate_up.weight_loader(gate_up.weight, weights["gate"], 0)
    gate_up.weight_loader(gate_up.weight, weights["up"], 1)
    o.weight_loader(o.weight, weights["o"])
    down.weight_loader(down.weight, weights["down"])
    if k is not None:
        for layer in (qkv, gate_up):
            sharded_linear.prepare_column(layer, k, tp, rank)
        for layer in (o, down):
            sharded_linear.prepare_row(layer, k, tp, rank)
    return qkv, o, gate_up, down


def _server(weights, x, tp: int, k: int | None):
    """A TP-``tp`` server's attention output projection (of the query heads, standing in for attention's
    per-head output) and MLP on ``x``: every rank's partials, then the reduction (``k`` shards summed in
    order; None: SGLang's all-reduce, the partials added in rank order in the activation dtype)."""
    attn, mlp = [], []
    for rank in range(tp):
        qkv, o, gate_up, down = _rank(weights, tp, rank, k)
        if k is None:
            y, z = qkv.quant_method.apply(qkv, x, None), gate_up.quant_method.apply(gate_up, x, None)
        else:
            y, z = sharded_linear.column_forward(qkv, x), sharded_linear.column_forward(gate_up, x)
        q = y[:, : qkv.num_heads * HEAD]
        act = torch.nn.functional.silu(z[:, : z.shape[-1] // 2]) * z[:, z.shape[-1] // 2:]
        if k is None:
            attn.append(o.quant_method.apply(o, q, None))
            mlp.append(down.quant_method.apply(down, act, None))
        else:
            attn += sharded_linear.row_partials(o, q)
            mlp += sharded_linear.row_partials(down, act)
    if k is None:
        return sum(attn[1:], attn[0]), sum(mlp[1:], mlp[0])
    gather = lambda stacked: stacked  # noqa: E731 - the ranks' partials are already stacked in rank order
    return (sharded_linear.row_reduce(attn, gather), sharded_linear.row_reduce(mlp, gather))


@pytest.mark.parametrize("k", [2, 4])
def test_k_shards_give_the_same_bits_at_every_tp_size_that_divides_k(tp_group, weights, k):
    w, x = weights
    reference = _server(w, x, 1, k)
    for tp in (2, 4):
        if k % tp == 0:
            got = _server(w, x, tp, k)
            assert all(torch.equal(a, b) for a, b in zip(got, reference)), f"TP {tp} differs from TP 1 at K {k}"


def test_without_shards_tp_1_and_tp_2_differ(tp_group, weights):
    w, x = weights
    one, two = _server(w, x, 1, None), _server(w, x, 2, None)
    assert all((a != b).any() for a, b in zip(one, two))


def test_at_tp_k_a_rank_computes_what_sglang_computes(tp_group, weights):
    """One local shard: nothing is re-laid out, and the partial is SGLang's own GEMM."""
    w, x = weights
    qkv, o, gate_up, down = _rank(w, 2, 1, 2)
    plain = _rank(w, 2, 1, None)
    assert torch.equal(qkv.weight, plain[0].weight) and torch.equal(o.weight, plain[1].weight)
    assert torch.equal(sharded_linear.column_forward(qkv, x), plain[0].quant_method.apply(plain[0], x, None))


def test_a_prepared_layer_holds_the_same_numbers_regrouped(tp_group, weights):
    w, _ = weights
    qkv, o, _, _ = _rank(w, 1, 0, 2)
    shards = sharded_linear.shards_of(qkv)
    assert shards.count == 2 and torch.equal(qkv.weight.index_select(0, shards.restore),
                                             torch.cat([w["q"], w["k"], w["v"]]))
    assert torch.equal(o.weight.view(2, H, -1).transpose(0, 1).reshape(H, -1), w["o"])


def test_the_sum_runs_in_shard_order_in_float32():
    big, tiny = torch.tensor([2.0 ** 8], dtype=torch.bfloat16), torch.tensor([1.0], dtype=torch.bfloat16)
    parts = [big, tiny, tiny, -big]
    assert sharded_linear.ordered_sum(parts).item() == 2.0  # ((256 + 1) + 1) - 256 in float32
    assert (((big + tiny) + tiny) - big).item() == 0.0  # the same order in bfloat16 loses both ones
    assert sharded_linear.ordered_sum([big, -big, tiny, tiny]).item() == 2.0


def test_the_lm_head_runs_sglangs_own_gemm_per_vocabulary_shard(tp_group, weights):
    from sglang.srt.layers.logits_processor import LogitsProcessor
    from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead

    w, x = weights
    head = ParallelLMHead(VOCAB, H, params_dtype=torch.bfloat16)
    head.weight.data.copy_(w["head"])
    processor = LogitsProcessor(type("Config", (), {"vocab_size": VOCAB})())
    compute = lambda h, layer: LogitsProcessor._compute_lm_head(processor, h, layer)  # noqa: E731
    sharded_linear.prepare_head(head, 2, 1, 0)
    logits = sharded_linear.head_logits(head, x, compute)
    ranks = []
    for rank in range(2):  # a TP-2 rank's head: its contiguous half of the vocabulary
        part = ParallelLMHead(VOCAB // 2, H, params_dtype=torch.bfloat16)
        part.weight.data.copy_(w["head"][rank * VOCAB // 2:(rank + 1) * VOCAB // 2])
        ranks.append(compute(x, part))
    assert logits.shape == (ROWS, VOCAB) and torch.equal(logits, torch.cat(ranks, dim=-1))


def test_a_row_parallel_bias_joins_global_shard_0_only(tp_group, weights):
    """As SGLang adds a row-parallel bias on rank 0 only: at TP 1 it joins the first shard's GEMM, at TP 2
    rank 0's, so both sizes give the same bits (a bias on every shard would count it twice at TP 1)."""
    from sglang.srt.layers.linear import RowParallelLinear

    w, _ = weights
    bias = torch.randn(H, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    y = torch.randn(ROWS, HEADS * HEAD, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)

    def partials(tp: int, rank: int) -> list:
        o = RowParallelLinear(HEADS * HEAD, H, bias=True, input_is_parallel=True, tp_rank=rank, tp_size=tp,
                              params_dtype=torch.bfloat16)
        o.weight_loader(o.weight, w["o"])
        o.bias.data.copy_(bias)
        sharded_linear.prepare_row(o, 2, tp, rank)
        width = HEADS * HEAD // tp
        return sharded_linear.row_partials(o, y[:, rank * width:(rank + 1) * width].contiguous())

    one = sharded_linear.ordered_sum(partials(1, 0))
    two = sharded_linear.ordered_sum(partials(2, 0) + partials(2, 1))
    half = HEADS * HEAD // 2
    linear = torch.nn.functional.linear
    once = sharded_linear.ordered_sum([linear(y[:, :half], w["o"][:, :half], bias),
                                       linear(y[:, half:], w["o"][:, half:].contiguous())])
    assert torch.equal(one, once) and torch.equal(two, once)
