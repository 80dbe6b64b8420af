"""Cross-TP invariance (``--corun-tp-invariant K``): the shard layout and the reduction order.

A dense transformer at tensor-parallel size t splits each column-parallel GEMM (QKV, gate-up, the LM head)
by output rows and each row-parallel GEMM (attention output, MLP down) by input columns; the row-parallel
partials are then summed across ranks. A rank's GEMM shapes and the order of that sum change with t, so
the bits do. With K fixed shards, every server with t dividing K computes the same K shard GEMMs, each of
the shape a rank of a TP-K server computes, and sums the K row-parallel partials in one fixed order:

- shard ``g`` (0 <= g < K) of a projection holds, of every fused sub-projection (Q, K, V; gate, up), the
  ``g``-th of K equal row blocks; rank ``r`` of a TP-t server holds shards ``r * K/t`` to
  ``(r + 1) * K/t - 1``, which is exactly the contiguous slice SGLang's loader gives it;
- a column-parallel layer computes one GEMM per local shard (``column_order``: the weight rows
  regrouped shard by shard, the output put back in SGLang's local layout), so each shard's GEMM has
  the shape of a TP-K rank's;
- a row-parallel layer computes one GEMM partial per local shard (input columns in K equal blocks), the
  ranks gather all K partials in shard order, and every rank sums them in float32 in shard order,
  ``((p0 + p1) + p2) + ...``, rounding once to the activation dtype: no collective's
  own summation order is used;
- what no GEMM splits (embeddings, norms, rotary, per-head attention, activations) is computed per row
  and per head, and is taken as invariant to how many heads a rank holds; the GPU suite checks that
  claim at TP 1 and 2 with the attention kernels planned without split-KV.

Pure functions of integers; nothing here imports torch or SGLang.
"""

from __future__ import annotations

from typing import Sequence

def local_shards(k: int, tp: int) -> int:
    """How many of the K shards one rank of a TP-``tp`` server computes."""
    if k < 1 or tp < 1 or k % tp:
        raise ValueError(f"--corun-tp-invariant {k} needs a TP size that divides it, not {tp}")
    return k // tp


def shards_of_rank(k: int, tp: int, rank: int) -> range:
    """The global shard numbers rank ``rank`` of a TP-``tp`` server holds, in order."""
    s = local_shards(k, tp)
    return range(rank * s, (rank + 1) * s)


def column_order(sizes: Sequence[int], shards: int) -> list[int]:
    """The rows of a rank's fused column-parallel weight (sub-projections of ``sizes`` rows, in order),
    regrouped shard by shard: shard ``j``'s rows are the ``j``-th of ``shards`` equal blocks of each
    sub-projection, sub-projections in order. Identity for one shard."""
    for size in sizes:
        if size % shards:
            raise ValueError(f"a sub-projection of {size} rows does not split into {shards} shards")
    order, offsets = [], [sum(sizes[:i]) for i in range(len(sizes))]
    for j in range(shards):
        for size, offset in zip(sizes, offsets):
            block = size // shards
            order.extend(range(offset + j * block, offset + (j + 1) * block))
    return order


def inverse(order: Sequence[int]) -> list[int]:
    """The permutation that undoes ``order``: ``[x[i] for i in order]`` indexed by it gives ``x`` back."""
    back = [0] * len(order)
    for position, row in enumerate(order):
        back[row] = position
    return back


def row_blocks(width: int, shards: int) -> list[tuple[int, int]]:
    """The [start, stop) input columns of each local shard of a row-parallel layer ``width`` columns wide."""
    if width % shards:
        raise ValueError(f"{width} input columns do not split into {shards} shards")
    block = width // shards
    return [(j * block, (j + 1) * block) for j in range(shards)]


def padded_vocab(vocab: int, padding: int = 64) -> int:
    """The vocabulary rounded up to ``padding`` (SGLang's ``pad_vocab_size`` at its default padding)."""
    return -(-vocab // padding) * padding


def problems(k: int, tp: int, heads: int, kv_heads: int, intermediate: int, vocab: int) -> list[str]:
    """Why a dense model of these sizes cannot compute K shards at TP ``tp`` (empty when it can)."""
    out = []
    if k < 2:
        out.append(f"--corun-tp-invariant {k}: K counts shards, at least 2")
    elif k % tp:
        out.append(f"--corun-tp-invariant {k} with --tp-size {tp}: the TP size must divide K")
    if k >= 1:
        for name, size in (("attention heads", heads), ("KV heads", kv_heads),
                           ("MLP intermediate size", intermediate), ("padded vocabulary", padded_vocab(vocab))):
            if size % k:
                out.append(f"--corun-tp-invariant {k}: the model's {size} {name} do not split into {k} shards")
    return out


def extra_launches(k: int, tp: int, layers: int) -> int:
    """GEMM launches per forward beyond what plain TP-``tp`` SGLang runs on a dense model of ``layers``
    layers (QKV, O, gate-up and down per layer, then the LM head): each GEMM a rank computes becomes
    K/t of them."""
    return (local_shards(k, tp) - 1) * (4 * layers + 1)
