"""Top-k of logprob rows in one total order that each row fixes alone: value descending, then token id ascending.

SGLang takes a batch's top-k logprobs with one ``torch.topk`` at the batch's largest k. Which of several
equal values comes first then depends on the kernel ``topk`` runs for that k and that batch shape, so a
request's top-k token ids could follow its co-runners (the values themselves cannot: the k largest values
of a row are one multiset). Ties are common where it matters: bf16 logits repeat, and SGLang clamps the
-inf of a grammar-masked vocabulary to one finite minimum. Here each (value, id) pair of a row becomes a
distinct 64-bit key whose order is that total order, so the k largest keys, and their order, are fixed by
the row alone: every correct top-k returns them, at every k, beside any other rows.

Invariants (pure; CPU or GPU tensors):
- row r of ``top(x, k)`` is row r's first k entries in (value descending, token id ascending) order, a
  value ordered as its IEEE-754 float32 bits order it (+0.0 before -0.0; a NaN with the sign bit clear
  above +inf, one with it set below -inf);
- so ``top(x, k)`` restricted to its first j columns is ``top(x, j)``, and row r's result is the same
  whichever rows share the call;
- the values are gathered from ``x``: the same bits, in ``x``'s dtype; the ids are int64;
- at most ``BLOCK_ELEMENTS`` keys exist at a time (rows are ranked in blocks; a row never spans two).
"""

from __future__ import annotations

import torch

#: Keys materialized at once (64 MiB of int64): rows are ranked in blocks of at most this many entries.
BLOCK_ELEMENTS = 1 << 23

_LOW = 1 << 32


def keys(x: torch.Tensor) -> torch.Tensor:
    """One distinct int64 key per entry of the rows ``x`` (last dimension the vocabulary, fewer than 2**32
    entries), larger for a larger value and, among equal values, for a smaller token id."""
    bits = x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # integer order == float order
    ids = torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return ordered * _LOW + (_LOW - 1 - ids)


def top(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, ids)`` of the ``k`` first entries of each row of the 2-D ``x`` in (value descending, id
    ascending) order; ``k`` may not exceed the row length (as for ``torch.topk``)."""
    if x.dim() != 2:
        raise ValueError(f"ranking.top ranks the rows of a 2-D tensor, not a {x.dim()}-D one")
    rows, width = x.shape
    if not 0 <= k <= width:
        raise ValueError(f"ranking.top: k = {k} outside [0, {width}]")
    values = x.new_empty((rows, k))
    ids = torch.empty((rows, k), dtype=torch.int64, device=x.device)
    step = max(1, BLOCK_ELEMENTS // max(width, 1))
    for start in range(0, rows, step):
        block = x[start:start + step]
        found = torch.topk(keys(block), k, dim=-1, largest=True, sorted=True).indices
        ids[start:start + step] = found
        values[start:start + step] = block.gather(-1, found)
    return values, ids
