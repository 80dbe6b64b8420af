"""SGLang's parallel linear layers computed as K fixed shards (``core.tp_shards``), whatever the TP size.

``prepare`` lays out one rank's weights for its K/t local shards once the model has loaded; the forward
functions then run one GEMM per local shard, each through the layer's own ``quant_method.apply`` on a
weight of exactly the shape and strides a rank of a TP-K server holds, so each shard's GEMM is the one that
rank runs. Row-parallel partials are gathered across ranks in shard order and summed by ``ordered_sum``.

Invariants:
- with one local shard (t = K) nothing is re-laid out and a column-parallel layer runs SGLang's own GEMM;
- a prepared layer's ``weight`` holds the same numbers regrouped: a column-parallel layer's rows shard by
  shard (``tp_shards.column_order``), a row-parallel layer's storage shard-major, [K/t, out, in/K];
  ``Shards`` records which (held beside the layer, never on it), and while any weight is regrouped
  (``regrouped``) SGLang's online weight updates, which write in SGLang's layout, are refused.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Callable, Sequence

import torch

from corun_sglang.core import tp_shards

#: Each prepared layer's ``Shards``, dropped with the layer (nothing is kept on SGLang's modules).
_LAYOUTS: "weakref.WeakKeyDictionary[torch.nn.Module, Shards]" = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class Shards:
    """How a prepared layer's weight is laid out: ``held``, the global numbers of the shards this rank
    computes (``tp_shards.shards_of_rank``); ``restore`` (column-parallel) the output columns that put the
    shard-by-shard output back in SGLang's local layout, None where the order is SGLang's own."""

    kind: str  # "column", "row" or "head"
    held: range
    restore: torch.Tensor | None = None

    @property
    def count(self) -> int:
        return len(self.held)


def shards_of(layer: torch.nn.Module) -> Shards | None:
    """The layout ``prepare_*`` gave ``layer``, or None: the layer is SGLang's as it loaded. A process that
    prepared nothing answers without a lookup (every linear layer's forward asks)."""
    return _LAYOUTS.get(layer) if _LAYOUTS else None


def regrouped() -> bool:
    """Whether this process holds a weight regrouped for more than one local shard (t < K)."""
    return any(shards.count > 1 for shards in list(_LAYOUTS.values()))


def ordered_sum(partials: Sequence[torch.Tensor]) -> torch.Tensor:
    """``((p0 + p1) + p2) + ...`` in float32, rounded once to the partials' dtype (the order ``tp_shards`` states)."""
    total = partials[0].to(torch.float32)
    for partial in partials[1:]:
        total = total + partial.to(torch.float32)
    return total.to(partials[0].dtype)


class _Shard:
    """One shard's weight, standing in for its layer in ``quant_method.apply`` (never prepared itself)."""

    __slots__ = ("weight", "use_intel_amx_backend", "__weakref__")

    def __init__(self, weight: torch.Tensor, like: torch.nn.Module):
        self.weight = weight
        self.use_intel_amx_backend = getattr(like, "use_intel_amx_backend", False)


def prepare_column(layer: torch.nn.Module, k: int, tp: int, rank: int) -> None:
    """Regroup a column-parallel layer's weight (and bias) rows shard by shard."""
    count = tp_shards.local_shards(k, tp)
    restore = None
    if count > 1:
        order = tp_shards.column_order(list(layer.output_partition_sizes), count)
        index = torch.tensor(order, device=layer.weight.device)
        with torch.no_grad():
            layer.weight.data.copy_(layer.weight.data.index_select(0, index))
            if getattr(layer, "bias", None) is not None:
                layer.bias.data.copy_(layer.bias.data.index_select(0, index))
        restore = torch.tensor(tp_shards.inverse(order), device=layer.weight.device)
    _LAYOUTS[layer] = Shards("column", tp_shards.shards_of_rank(k, tp, rank), restore)


def prepare_row(layer: torch.nn.Module, k: int, tp: int, rank: int) -> None:
    """Store a row-parallel layer's weight shard-major: local shard j's input columns as one contiguous
    [out, in/K] block."""
    count = tp_shards.local_shards(k, tp)
    if count > 1:
        out, width = layer.weight.shape
        tp_shards.row_blocks(width, count)  # raises where the columns do not split
        with torch.no_grad():
            blocks = layer.weight.data.view(out, count, width // count).transpose(0, 1).contiguous()
            layer.weight.data.copy_(blocks.view(out, width))
    _LAYOUTS[layer] = Shards("row", tp_shards.shards_of_rank(k, tp, rank))


def prepare_head(layer: torch.nn.Module, k: int, tp: int, rank: int) -> None:
    """An LM head's vocabulary rows already lie shard by shard: record the count."""
    count = tp_shards.local_shards(k, tp)
    if layer.weight.shape[0] % count:
        raise ValueError(f"{layer.weight.shape[0]} vocabulary rows do not split into {count} shards")
    _LAYOUTS[layer] = Shards("head", tp_shards.shards_of_rank(k, tp, rank))


def _column_weights(layer: torch.nn.Module, shards: Shards) -> list[torch.Tensor]:
    rows = layer.weight.shape[0] // shards.count
    return [layer.weight[j * rows:(j + 1) * rows] for j in range(shards.count)]


def column_forward(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A prepared column-parallel layer's local output: one GEMM per local shard, in SGLang's layout."""
    shards = _LAYOUTS[layer]
    bias = None if layer.skip_bias_add else layer.bias
    weights = _column_weights(layer, shards)
    rows = weights[0].shape[0]
    outs = [layer.quant_method.apply(_Shard(w, layer), x,
                                     None if bias is None else bias[j * rows:(j + 1) * rows])
            for j, w in enumerate(weights)]
    if shards.count == 1:
        return outs[0]
    return torch.cat(outs, dim=-1).index_select(-1, shards.restore)


def row_partials(layer: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """A prepared row-parallel layer's local partials, one GEMM per local shard; the bias joins global
    shard 0's GEMM only (as SGLang adds it on rank 0 only)."""
    shards = _LAYOUTS[layer]
    out, width = layer.weight.shape
    block = width // shards.count
    weights = layer.weight.view(shards.count, out, block) if shards.count > 1 else layer.weight.view(1, out, width)
    bias = None if layer.skip_bias_add else layer.bias
    partials = []
    for j, (start, stop) in enumerate(tp_shards.row_blocks(width, shards.count)):
        chunk = x[..., start:stop].contiguous() if shards.count > 1 else x
        partials.append(layer.quant_method.apply(_Shard(weights[j], layer), chunk,
                                                 bias if shards.held[j] == 0 else None))
    return partials


def row_reduce(partials: Sequence[torch.Tensor], gather: Callable[[torch.Tensor], torch.Tensor] | None
               ) -> torch.Tensor:
    """The K partials summed in shard order: ``gather`` (None at TP 1) takes this rank's [K/t, ...] stack
    and returns every rank's, [K, ...], in rank order."""
    stacked = torch.stack(list(partials))
    if gather is not None:
        stacked = gather(stacked)
    return ordered_sum(list(stacked.unbind(0)))


def head_logits(layer: torch.nn.Module, hidden: torch.Tensor,
                compute: Callable[[torch.Tensor, object], torch.Tensor]) -> torch.Tensor:
    """A prepared LM head's local logits: ``compute(hidden, head)`` (SGLang's own LM-head GEMM) once per
    local vocabulary shard, concatenated in shard order."""
    shards = _LAYOUTS[layer]
    if shards.count == 1:
        return compute(hidden, layer)
    rows = layer.weight.shape[0] // shards.count
    return torch.cat([compute(hidden, _Shard(layer.weight[j * rows:(j + 1) * rows], layer))
                      for j in range(shards.count)], dim=-1)
