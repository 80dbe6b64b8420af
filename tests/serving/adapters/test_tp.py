"""``adapters.tp``: a prepared layer runs as shards in place of SGLang's forward, an unprepared one runs
SGLang's own; ``shard_model`` prepares every parallel layer of a loaded model, or refuses a model that does
not split into K shards."""

import gc
import types

import pytest
import torch

from corun_sglang.core.stops import CorunContractError
from corun_sglang.serving import sharded_linear
from corun_sglang.serving.adapters import tp

H, HEAD = 64, 16


def _layers(tp_size=1, rank=0):
    from sglang.srt.layers.linear import QKVParallelLinear, RowParallelLinear

    torch.manual_seed(0)
    kw = dict(bias=False, tp_rank=rank, tp_size=tp_size, params_dtype=torch.bfloat16)
    qkv, o = QKVParallelLinear(H, HEAD, 4, 2, **kw), RowParallelLinear(4 * HEAD, H, input_is_parallel=True, **kw)
    for layer in (qkv, o):
        layer.weight.data.copy_(torch.randn_like(layer.weight, dtype=torch.float32).to(torch.bfloat16) * 0.1)
    return qkv, o


def _head(weight: torch.Tensor) -> torch.nn.Module:
    """An LM head as ``_compute_lm_head`` reads one: a module with a ``weight``."""
    head = torch.nn.Module()
    head.weight = torch.nn.Parameter(weight, requires_grad=False)
    return head


def _not_called(*args, **kwargs):
    pytest.fail("SGLang's forward ran on a prepared layer")


def test_an_unprepared_layer_runs_sglangs_forward(tp_group):
    from sglang.srt.layers.linear import ColumnParallelLinear, RowParallelLinear

    qkv, o = _layers()
    x = torch.randn(3, H).to(torch.bfloat16)
    calls = []
    out = tp.column_forward(lambda *a, **k: calls.append("column") or ColumnParallelLinear.forward(*a, **k), qkv, x)
    assert calls == ["column"] and torch.equal(out[0], qkv.quant_method.apply(qkv, x, None))
    y = torch.randn(3, 4 * HEAD).to(torch.bfloat16)
    out = tp.row_forward(lambda *a, **k: calls.append("row") or RowParallelLinear.forward(*a, **k), o, y)
    assert calls[-1] == "row" and torch.equal(out[0], o.quant_method.apply(o, y, None))


def test_a_prepared_layer_runs_as_shards(tp_group):
    qkv, o = _layers()
    sharded_linear.prepare_column(qkv, 2, 1, 0)
    sharded_linear.prepare_row(o, 2, 1, 0)
    x, y = torch.randn(3, H).to(torch.bfloat16), torch.randn(3, 4 * HEAD).to(torch.bfloat16)
    out, bias = tp.column_forward(_not_called, qkv, x)
    assert bias is None and torch.equal(out, sharded_linear.column_forward(qkv, x))
    into = torch.empty(3, H, dtype=torch.bfloat16)
    out, _ = tp.row_forward(_not_called, o, y, output_tensor=into)
    assert out is into and torch.equal(into, sharded_linear.ordered_sum(sharded_linear.row_partials(o, y)))


def test_where_the_caller_all_reduces_rank_0_hands_it_the_sum_and_the_others_negative_zeros(tp_group, monkeypatch):
    """Qwen3's attention output leaves its sum to the layer communicator's all-reduce: adding the other
    ranks' -0.0 to rank 0's sum gives the sum's bits, its -0.0 and +0.0 included. (The gather of the one-process
    group stands in for SGLang's, a CUDA op.)"""
    monkeypatch.setattr(tp, "_gather", lambda stacked: stacked)
    outs = []
    for rank in range(2):
        _, o = _layers(tp_size=2, rank=rank)
        o.reduce_results = False
        sharded_linear.prepare_row(o, 2, 2, rank)
        y = torch.randn(3, 2 * HEAD, generator=torch.Generator().manual_seed(rank)).to(torch.bfloat16)
        outs.append(tp.row_forward(_not_called, o, y)[0])
    assert torch.signbit(outs[1]).all() and not outs[1].any()
    total = outs[0].clone()
    total[0, :2] = torch.tensor([-0.0, 0.0])
    assert torch.equal((total + outs[1]).view(torch.int16), total.view(torch.int16))


def _runner(heads=4, kv=2, extra=()):
    qkv, o = _layers()
    model = torch.nn.Module()
    model.qkv_proj, model.o_proj = qkv, o
    for i, module in enumerate(extra):
        model.add_module(f"extra{i}", module)
    model.lm_head = _head(torch.zeros(128, H))
    hf = types.SimpleNamespace(num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=128,
                               vocab_size=128)
    return types.SimpleNamespace(tp_size=1, tp_rank=0, model=model, model_config=types.SimpleNamespace(hf_config=hf))


@pytest.fixture
def tp_invariant(make_args, tp_group):
    from sglang.srt.runtime_context import publish

    def publish_args(k):
        publish(make_args(corun=True, corun_tp_invariant=k), role="scheduler")

    return publish_args


def test_shard_model_prepares_every_parallel_layer_and_the_head(tp_invariant):
    tp_invariant(2)
    runner = _runner()
    assert tp.shard_model("loaded", runner) == "loaded"
    kinds = {name: sharded_linear.shards_of(getattr(runner.model, name)).kind
             for name in ("qkv_proj", "o_proj", "lm_head")}
    assert kinds == {"qkv_proj": "column", "o_proj": "row", "lm_head": "head"}


def test_shard_model_refuses_a_model_that_does_not_split(tp_invariant):
    tp_invariant(2)
    with pytest.raises(CorunContractError, match="9 attention heads.*3 KV heads"):
        tp.shard_model(None, _runner(heads=9, kv=3))

    class Qwen3MoeSparseMoeBlock(torch.nn.Module):
        pass

    with pytest.raises(CorunContractError, match="Qwen3MoeSparseMoeBlock layers are not sharded"):
        tp.shard_model(None, _runner(extra=[Qwen3MoeSparseMoeBlock()]))


def test_without_the_option_nothing_is_prepared(serving, tp_group):
    serving(True)
    runner = _runner()
    tp.shard_model(None, runner)
    assert sharded_linear.shards_of(runner.model.qkv_proj) is None


def test_the_lm_head_target_runs_one_head_gemm_per_vocabulary_shard(serving, tp_group):
    from corun_sglang.serving.adapters import prefill

    serving(True)
    head = _head(torch.randn(8, H))
    sharded_linear.prepare_head(head, 2, 1, 0)
    seen = []

    def original(self, hidden, lm_head, embedding_bias=None):
        seen.append(lm_head.weight.shape[0])
        return hidden @ lm_head.weight.T

    x = torch.randn(3, H)
    logits = prefill.lm_head_rows(original, None, x, head)
    assert seen == [4, 4] and torch.equal(logits, torch.cat([x @ head.weight[:4].T, x @ head.weight[4:].T], -1))
    seen.clear()
    plain = _head(head.weight)
    assert torch.equal(prefill.lm_head_rows(original, None, x, plain), x @ head.weight.T) and seen == [8]


def test_an_online_weight_update_is_refused_while_weights_are_regrouped(tp_group, sglang_plugins):
    from sglang.srt.model_executor.model_runner_components import weight_updater

    gc.collect()  # the layers earlier tests regrouped
    check = weight_updater._unsupported_derived_weight_cache_error
    assert check() is None  # SGLang's own check: nothing regrouped yet, HPC-Ops off
    qkv, _ = _layers(tp_size=2, rank=0)
    sharded_linear.prepare_column(qkv, 2, 2, 0)  # one local shard: SGLang's layout
    assert check() is None
    regrouped, _ = _layers()
    sharded_linear.prepare_column(regrouped, 2, 1, 0)
    assert "--corun-tp-invariant" in check()
    del regrouped
    gc.collect()
    assert check() is None
