"""Adapters of cross-TP invariance (``--corun-tp-invariant K``): lay out the weights once they load, then run
each parallel linear layer and the LM head as K fixed shards (``sharded_linear``).

A layer ``shard_model`` did not prepare (no ``--corun-tp-invariant``, or a server without ``--corun``) runs
SGLang's own forward: in a process that prepared nothing, the pass-through costs an emptiness check. An online weight update, which writes
in SGLang's layout, is refused while a weight is regrouped (``weight_updates``).
"""

from __future__ import annotations

import torch

from corun_sglang.core import tp_shards
from corun_sglang.core.stops import CorunContractError
from corun_sglang.serving import sharded_linear
from corun_sglang.serving.adapters import state


def _problems(model_runner) -> list[str]:
    """Why this model cannot run as K shards at this TP size (``tp_shards.problems``), MoE layers included."""
    k, tp = state.config().tp_invariant, model_runner.tp_size
    hf = model_runner.model_config.hf_config
    heads = getattr(hf, "num_attention_heads", 0)
    out = tp_shards.problems(k, tp, heads, getattr(hf, "num_key_value_heads", heads),
                             getattr(hf, "intermediate_size", 0), getattr(hf, "vocab_size", 0))
    moe = sorted({type(m).__name__ for m in model_runner.model.modules() if "moe" in type(m).__name__.lower()})
    if moe:
        out.append(f"--corun-tp-invariant: {', '.join(moe)} layers are not sharded; dense models only")
    return out


@state.corun_only_after
def shard_model(result, self, *args, **kwargs):
    """After ``ModelRunner.load_model``: every column- and row-parallel linear layer and the LM head of the
    loaded model laid out for this rank's K/t shards."""
    k = state.config().tp_invariant
    if k is None:
        return result
    problems = _problems(self)
    if problems:
        raise CorunContractError("; ".join(problems) + ". Fix: drop --corun-tp-invariant for this model")
    from sglang.srt.layers.linear import ColumnParallelLinear, RowParallelLinear

    tp, rank = self.tp_size, self.tp_rank
    for module in self.model.modules():
        if isinstance(module, ColumnParallelLinear) and not module.gather_output:
            sharded_linear.prepare_column(module, k, tp, rank)
        elif isinstance(module, RowParallelLinear):
            sharded_linear.prepare_row(module, k, tp, rank)
    head = getattr(self.model, "lm_head", None)
    if head is not None:
        sharded_linear.prepare_head(head, k, tp, rank)
    return result


def column_forward(original, self, input_, *args, **kwargs):
    """``ColumnParallelLinear.forward`` of a prepared layer: one GEMM per local shard."""
    if sharded_linear.shards_of(self) is None:
        return original(self, input_, *args, **kwargs)
    return sharded_linear.column_forward(self, input_), (self.bias if self.skip_bias_add else None)


def _gather(stacked: torch.Tensor) -> torch.Tensor:
    """Every rank's [K/t, ...] partials, [K, ...] in rank order."""
    from sglang.srt.distributed import get_tp_group

    group = get_tp_group()
    out = stacked.new_empty((stacked.shape[0] * group.world_size, *stacked.shape[1:]))
    group.all_gather_into_tensor(out, stacked.contiguous())
    return out


def _caller_reduces(layer, skip_all_reduce: bool) -> bool:
    """Whether SGLang leaves this layer's sum to its caller (Qwen3's attention output: the layer communicator
    all-reduces), as ``RowParallelLinear.forward`` decides."""
    from sglang.srt.layers.linear import should_skip_mlp_all_reduce

    reduces = (layer.reduce_results and layer.tp_size > 1) or getattr(layer, "use_decode_attn_tp", False)
    return not reduces or skip_all_reduce or should_skip_mlp_all_reduce()


def row_forward(original, self, input_, skip_all_reduce=False, forward_batch=None, output_tensor=None):
    """``RowParallelLinear.forward`` of a prepared layer: a partial per local shard, all K gathered and
    summed in shard order (``sharded_linear.row_reduce``) in place of the all-reduce. Where SGLang leaves
    the sum to the caller's all-reduce, rank 0 hands it the sum and every other rank -0.0, which that
    all-reduce adds exactly (x + -0.0 is x for every x, -0.0 included), in any order."""
    if sharded_linear.shards_of(self) is None:
        return original(self, input_, skip_all_reduce=skip_all_reduce, forward_batch=forward_batch,
                        output_tensor=output_tensor)
    x = input_
    if not self.input_is_parallel:
        x = x.chunk(self.tp_size, dim=-1)[self.tp_rank].contiguous()
    partials = sharded_linear.row_partials(self, x)
    output = sharded_linear.row_reduce(partials, _gather if self.tp_size > 1 else None)
    if self.tp_size > 1 and self.tp_rank != 0 and _caller_reduces(self, skip_all_reduce):
        output = torch.full_like(output, -0.0)
    if output_tensor is not None:
        output_tensor.copy_(output)
        output = output_tensor
    return output, (self.bias if self.skip_bias_add else None)


def lm_head(original, self, hidden_states, lm_head, embedding_bias=None):
    """``LogitsProcessor._compute_lm_head`` (called through ``prefill.lm_head_rows``, the target's adapter) on
    a prepared head: SGLang's own LM-head GEMM per vocabulary shard, concatenated in shard order."""
    if sharded_linear.shards_of(lm_head) is None:
        return original(self, hidden_states, lm_head, embedding_bias)
    if embedding_bias is not None:
        raise CorunContractError("--corun-tp-invariant: an LM head with an embedding bias is not sharded")
    return sharded_linear.head_logits(lm_head, hidden_states, lambda h, head: original(self, h, head, None))


def weight_updates(original, *args, **kwargs):
    """SGLang's check before every online weight update (disk, tensor, distributed, IPC): refused while this
    rank holds regrouped weights, which the loaders would write as SGLang lays them out. The answer is the
    same on every rank (each holds K/t shards), so no update proceeds on some ranks only."""
    if sharded_linear.regrouped():
        return ("Online weight updates are not supported with --corun-tp-invariant at a TP size below K: the "
                "weights are regrouped into shards, and an update would be written in SGLang's layout. Fix: "
                "serve at --tp-size K, where nothing is regrouped, or restart the server on the new weights")
    return original(*args, **kwargs)
