"""Request-bound sampling: a Triton sampler whose variates depend only on (seed, position, token).

Invariants:
- ``sample`` picks, for each row independently, the token
  ``argmax_j (logits_j / T + G(seed, position, j))`` over the tokens allowed by
  top-k / top-p / min-p, where ``G`` is a Gumbel variate made by Philox from the
  row's seed, its position and the token id ``j`` (Gumbel-max: an exact draw
  from ``softmax(logits / T)`` restricted to the allowed tokens). Greedy rows
  (``top_k == 1``) take the first maximal logit. Every per-row quantity is
  computed either by exact operations (division, max, sorting, comparison) or
  by row-local kernels, so a row's token does not depend on the other rows,
  their number or their order.
- ``seeds_of`` carries each row's seed (``corun_sglang.core.seeds``) as an int64 under ``SEED_MASK``.
"""

from __future__ import annotations

import functools
from typing import Iterable

import torch
import triton
import triton.language as tl

from corun_sglang.core.seeds import SEED_MASK

_BLOCK = 2048


@triton.jit
def _gumbel_argmax_partial(
    logits_ptr, stride_row, temps_ptr, seeds_ptr, pos_ptr, floors_ptr, greedy_ptr,
    best_val_ptr, best_idx_ptr, V, NCHUNK, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
):
    """Best (key, index) of row ``r`` over its chunk ``c``; key = logit/T + Gumbel (greedy: logit/T)."""
    r = tl.program_id(0)
    c = tl.program_id(1)
    temp = tl.load(temps_ptr + r)
    seed = tl.load(seeds_ptr + r).to(tl.uint64)
    pos = tl.load(pos_ptr + r).to(tl.uint32)
    floor = tl.load(floors_ptr + r)
    greedy = tl.load(greedy_ptr + r) != 0
    best_val = tl.full((), -float("inf"), tl.float32)
    best_idx = tl.full((), 0, tl.int32) + c * CHUNK
    for start in tl.range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < V
        x = tl.load(logits_ptr + r * stride_row + offs, mask=inside, other=-float("inf"))
        s = tl.math.div_rn(x.to(tl.float32), temp)
        c0 = offs.to(tl.uint32)
        zero = tl.zeros_like(c0)
        r0, _, _, _ = tl.random.philox(seed, c0, zero + pos, zero, zero)
        u = tl.random.uint_to_uniform_float(r0)
        g = -tl.log(-tl.log(u))
        key = tl.where(greedy, s, s + g)
        key = tl.where(inside & (s >= floor), key, -float("inf"))
        blk_val = tl.max(key, axis=0)
        blk_idx = tl.argmax(key, axis=0, tie_break_left=True) + start
        take = blk_val > best_val
        best_idx = tl.where(take, blk_idx, best_idx)
        best_val = tl.where(take, blk_val, best_val)
    tl.store(best_val_ptr + r * NCHUNK + c, best_val)
    tl.store(best_idx_ptr + r * NCHUNK + c, best_idx)


@triton.jit
def _reduce_chunks(best_val_ptr, best_idx_ptr, out_ptr, NCHUNK, BLOCK: tl.constexpr):
    """Per row: the partial with the largest key; the lowest chunk wins ties."""
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    inside = offs < NCHUNK
    vals = tl.load(best_val_ptr + r * NCHUNK + offs, mask=inside, other=-float("inf"))
    idxs = tl.load(best_idx_ptr + r * NCHUNK + offs, mask=inside, other=0)
    k = tl.argmax(vals, axis=0, tie_break_left=True)
    pick = tl.sum(tl.where(offs == k, idxs, 0), axis=0)
    tl.store(out_ptr + r, pick)


def _chunking(vocab: int) -> tuple[int, int, int]:
    """Block length, chunk length and chunk count for a vocabulary: a function of the vocabulary only."""
    block = min(_BLOCK, triton.next_power_of_2(vocab))
    chunk = max(block, triton.cdiv(triton.cdiv(vocab, 16), block) * block)
    return block, chunk, triton.cdiv(vocab, chunk)


def floors(
    scaled: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor,
    need_top_k: bool = True, need_top_p: bool = True, need_min_p: bool = True,
) -> torch.Tensor:
    """Per row, the smallest scaled logit a token may have to be sampled (-inf: no filter).

    ``scaled`` is ``logits / T``. top-k keeps logits >= the k-th largest; top-p
    keeps the smallest prefix (by descending probability) whose exclusive
    cumulative probability is <= p; min-p keeps p_j >= min_p * p_max. Ties at
    a threshold are all kept. ``need_*`` flags only skip work: a row whose
    parameter is neutral gets -inf from that filter either way.
    """
    rows, vocab = scaled.shape
    out = torch.full((rows,), -float("inf"), device=scaled.device, dtype=torch.float32)
    if rows == 0:
        return out
    ks = top_ks.to(torch.int64).clamp(min=1, max=vocab)
    k_rows = (ks > 1) & (ks < vocab) & need_top_k  # greedy rows (k = 1) take the arg-max without a floor
    ps = top_ps.to(torch.float32)
    p_rows = (ps < 1.0) & need_top_p
    if need_top_k or need_top_p:  # rows with neither filter get -inf from _top_floor
        out = _top_floor(scaled, torch.where(k_rows, ks, 0), torch.where(p_rows, ps, 1.0))
    mp = min_ps.to(torch.float32)
    if need_min_p:
        top1 = scaled.amax(dim=-1)
        mth = top1 + torch.log(mp.clamp(min=torch.finfo(torch.float32).tiny))
        out = torch.where(mp > 0, torch.maximum(out, mth), out)
    return out


#: How many candidates (a row's best tokens) the top-k / top-p floor is looked for among; a row
#: that needs more is sorted whole.
TOP_CANDIDATES = 1024

#: Cuts the candidate kernel tries, in nats below the row's largest scaled logit, nearest first.
_CUTS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 28.0, 40.0)

#: A cut holds a row's top-p nucleus once the probability above it exceeds p by this much (more
#: than the rounding of any float32 sum of the row).
_P_MARGIN = 1e-3

_CAND_BLOCK = 1024


@functools.lru_cache(maxsize=None)
def _cuts_on(device: torch.device) -> torch.Tensor:
    """``_CUTS`` on ``device``, copied there once (not on every sampling step)."""
    return torch.tensor(_CUTS, device=device, dtype=torch.float32)


@triton.jit
def _cand_max_partial(scaled_ptr, stride_row, pmax_ptr, V, NCHUNK, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program (r, c): the largest value of chunk c of row r."""
    r, c = tl.program_id(0), tl.program_id(1)
    row = scaled_ptr + r * stride_row
    m = tl.full((), -float("inf"), tl.float32)
    for start in tl.range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(row + offs, mask=offs < V, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    tl.store(pmax_ptr + r * NCHUNK + c, m)


@triton.jit
def _cand_stats_partial(
    scaled_ptr, stride_row, cuts_ptr, pmax_ptr, ptotal_ptr, pmass_ptr, pcount_ptr, V, NCHUNK,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, NCUT: tl.constexpr, NCH: tl.constexpr,
):
    """Program (r, c): over chunk c of row r, sum(exp(x - m)) and, per cut, the mass exp(x - m) and
    the count of tokens at or above m - cut (m: the row's largest value). Blocks in index order."""
    r, c = tl.program_id(0), tl.program_id(1)
    row = scaled_ptr + r * stride_row
    chunks = tl.arange(0, NCH)
    m = tl.max(tl.load(pmax_ptr + r * NCHUNK + chunks, mask=chunks < NCHUNK, other=-float("inf")), axis=0)
    cut_ids = tl.arange(0, NCUT)
    lim = m - tl.load(cuts_ptr + cut_ids)
    total = tl.full((), 0.0, tl.float32)
    mass = tl.zeros((NCUT,), tl.float32)
    count = tl.zeros((NCUT,), tl.int32)
    for start in tl.range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(row + offs, mask=offs < V, other=-float("inf"))
        e = tl.exp(x - m)
        total += tl.sum(e, axis=0)
        above = (x[None, :] >= lim[:, None]) & (offs < V)[None, :]
        mass += tl.sum(tl.where(above, e[None, :], 0.0), axis=1)
        count += tl.sum(above.to(tl.int32), axis=1)
    at = (r * NCHUNK + c) * NCUT + cut_ids
    tl.store(ptotal_ptr + r * NCHUNK + c, total)
    tl.store(pmass_ptr + at, mass)
    tl.store(pcount_ptr + at, count)


@triton.jit
def _cand_select(
    ks_ptr, ps_ptr, cuts_ptr, pmax_ptr, ptotal_ptr, pmass_ptr, pcount_ptr, stats_ptr, offsets_ptr, V, NCHUNK,
    margin, NCUT: tl.constexpr, NCH: tl.constexpr,
):
    """Row r: its largest value m, its softmax denominator, and the nearest cut above which it holds at
    least k tokens or more than p (+ margin) of its probability; each chunk's first slot among the
    tokens at or above that cut. Chunk partials are added with one fixed tree (NCH wide)."""
    r = tl.program_id(0)
    k = tl.load(ks_ptr + r)
    p = tl.load(ps_ptr + r)
    chunks = tl.arange(0, NCH)
    live = chunks < NCHUNK
    cut_ids = tl.arange(0, NCUT)
    m = tl.max(tl.load(pmax_ptr + r * NCHUNK + chunks, mask=live, other=-float("inf")), axis=0)
    lim = m - tl.load(cuts_ptr + cut_ids)
    total = tl.sum(tl.load(ptotal_ptr + r * NCHUNK + chunks, mask=live, other=0.0), axis=0)
    at = (r * NCHUNK + chunks[:, None]) * NCUT + cut_ids[None, :]
    mass = tl.sum(tl.load(pmass_ptr + at, mask=live[:, None], other=0.0), axis=0)
    counts = tl.load(pcount_ptr + at, mask=live[:, None], other=0)
    count = tl.sum(counts, axis=0)
    holds_p = mass > (p + margin) * total
    serves = holds_p | ((k > 0) & (count >= k))
    first = tl.min(tl.where(serves, cut_ids, NCUT), axis=0)
    found = first < NCUT
    needed = (k > 0) | (p < 1.0)
    t = tl.where(found, tl.sum(tl.where(cut_ids == first, lim, 0.0), axis=0), -float("inf"))
    n = tl.where(found, tl.sum(tl.where(cut_ids == first, count, 0), axis=0), tl.where(needed, V, 0))
    covers = tl.where(found, tl.sum(tl.where((cut_ids == first) & holds_p, 1.0, 0.0), axis=0), 1.0)
    tl.store(stats_ptr + r * 5 + 0, m)
    tl.store(stats_ptr + r * 5 + 1, total)
    tl.store(stats_ptr + r * 5 + 2, n.to(tl.float32))
    tl.store(stats_ptr + r * 5 + 3, covers)
    tl.store(stats_ptr + r * 5 + 4, t)
    per_chunk = tl.sum(tl.where(cut_ids[None, :] == first, counts, 0), axis=1)
    tl.store(offsets_ptr + r * NCHUNK + chunks, tl.cumsum(per_chunk, axis=0) - per_chunk, mask=live)


@triton.jit
def _cand_gather(
    scaled_ptr, stride_row, stats_ptr, offsets_ptr, vals_ptr, V, W, NCHUNK, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
):
    """Program (r, c): row r's tokens at or above its cut within chunk c, written in index order from
    the chunk's first slot (only when the row's n tokens fit in W)."""
    r, c = tl.program_id(0), tl.program_id(1)
    n = tl.load(stats_ptr + r * 5 + 2).to(tl.int32)
    if (n > 0) & (n <= W):
        t = tl.load(stats_ptr + r * 5 + 4)
        row = scaled_ptr + r * stride_row
        base = tl.load(offsets_ptr + r * NCHUNK + c)
        for start in tl.range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(row + offs, mask=offs < V, other=-float("inf"))
            sel = ((x >= t) & (offs < V)).to(tl.int32)
            at = base + tl.cumsum(sel, axis=0) - sel
            tl.store(vals_ptr + r * W + at, x, mask=sel != 0)
            base += tl.sum(sel, axis=0)


#: Elements one step of the nucleus scan adds up (a fixed tree per block, blocks in order).
_SCAN_BLOCK = 1024


@triton.jit
def _nucleus_kernel(probs_ptr, stride_row, ps_ptr, out_ptr, W, BLOCK: tl.constexpr):
    """Row ``r``: how many of its descending ``probs`` have exclusive prefix sum <= p (at least 1).

    The prefix sums run block by block in order, each block by the same fixed tree, so a
    column's sum depends on the columns before it and on BLOCK only: not on ``W`` (the
    columns after it) nor on the other rows.
    """
    r = tl.program_id(0)
    p = tl.load(ps_ptr + r)
    carry = tl.full((), 0.0, tl.float32)
    count = tl.full((), 0, tl.int32)
    for start in tl.range(0, W, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < W
        x = tl.load(probs_ptr + r * stride_row + offs, mask=inside, other=0.0)
        inclusive = tl.cumsum(x, axis=0) + carry
        exclusive = inclusive - x
        count += tl.sum((inside & (exclusive <= p)).to(tl.int32), axis=0)
        carry = tl.sum(tl.where(offs == start + BLOCK - 1, inclusive, 0.0), axis=0)  # the block's last
    tl.store(out_ptr + r, tl.maximum(count, 1))


def _nucleus(probs_sorted: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """How many of each row's descending ``probs_sorted`` the top-p nucleus keeps (at least 1), int64.

    Not ``torch.cumsum``: PyTorch sizes its scan's blocks by the number of rows, so a row's
    prefix sums (and hence its nucleus at a boundary) would follow the batch.
    """
    rows, width = probs_sorted.shape
    out = torch.empty(rows, dtype=torch.int32, device=probs_sorted.device)
    if rows:
        probs_sorted = probs_sorted.to(torch.float32).contiguous()
        _nucleus_kernel[(rows,)](
            probs_sorted, probs_sorted.stride(0), ps.to(torch.float32).contiguous(), out, width,
            BLOCK=_SCAN_BLOCK, num_warps=4,
        )
    return out.to(torch.int64)


#: Row alignment (bytes) under which PyTorch's softmax kernels treat every row alike.
_ROW_ALIGN = 16


def softmax_rows(x: torch.Tensor, log: bool = False) -> torch.Tensor:
    """float32 ``softmax`` (``log_softmax`` with ``log``) of each row of ``x`` [rows, vocab], row-local.

    PyTorch computes a row in one block, but its vectorized loads start at the
    row's alignment: with a row length that is not a multiple of 16 bytes, rows
    at different slots would be added up in different orders. Such rows are
    padded with -inf (adding exp(-inf) = 0 changes no sum) so that every row
    starts aligned; the result has the input's shape.
    """
    x = x.to(torch.float32)
    vocab = x.shape[-1]
    pad = (-vocab) % (_ROW_ALIGN // x.element_size())
    if pad:
        x = torch.nn.functional.pad(x, (0, pad), value=-float("inf"))
    out = torch.log_softmax(x, dim=-1) if log else torch.softmax(x, dim=-1)
    return out[:, :vocab].contiguous() if pad else out


def _top_floor(scaled: torch.Tensor, ks: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """Per row, the larger of its top-k floor (``ks`` 0: none) and top-p floor (``ps`` 1: none).

    Both are read off the row's candidates sorted by value: the k-th value, and the value of
    the last token whose exclusive prefix of probabilities exp(x - m) / sum is <= p (summed by
    ``_nucleus``). A cut serves a row when the candidates hold its k best tokens or its whole
    nucleus; the floor the other filter would give then lies below the cut, so the larger
    one is exact. Rows no cut serves within ``TOP_CANDIDATES`` tokens are sorted whole. Which
    tokens are candidates, and which path a row takes, depend on that row alone; so do the
    sorted values (ties are equal values), hence the floor.
    """
    rows, vocab = scaled.shape
    scaled = scaled.to(torch.float32).contiguous()
    width = min(vocab, TOP_CANDIDATES)
    vals = torch.full((rows, width), -float("inf"), device=scaled.device, dtype=torch.float32)
    stats = torch.empty((rows, 5), device=scaled.device, dtype=torch.float32)
    cuts = _cuts_on(scaled.device)
    _, chunk, nchunk = _chunking(vocab)
    block, ncut, nch = min(_CAND_BLOCK, chunk), len(_CUTS), triton.next_power_of_2(max(nchunk, 2))
    f32 = dict(device=scaled.device, dtype=torch.float32)
    pmax, ptotal = torch.empty((rows, nchunk), **f32), torch.empty((rows, nchunk), **f32)
    pmass = torch.empty((rows, nchunk, ncut), **f32)
    pcount = torch.empty((rows, nchunk, ncut), device=scaled.device, dtype=torch.int32)
    offsets = torch.empty((rows, nchunk), device=scaled.device, dtype=torch.int32)
    grid = (rows, nchunk)
    _cand_max_partial[grid](scaled, scaled.stride(0), pmax, vocab, nchunk, CHUNK=chunk, BLOCK=block)
    _cand_stats_partial[grid](
        scaled, scaled.stride(0), cuts, pmax, ptotal, pmass, pcount, vocab, nchunk,
        CHUNK=chunk, BLOCK=block, NCUT=ncut, NCH=nch, num_warps=8,
    )
    _cand_select[(rows,)](
        ks.to(torch.int32).contiguous(), ps.to(torch.float32).contiguous(), cuts, pmax, ptotal, pmass, pcount,
        stats, offsets, vocab, nchunk, _P_MARGIN, NCUT=ncut, NCH=nch,
    )
    _cand_gather[grid](scaled, scaled.stride(0), stats, offsets, vals, vocab, width, nchunk, CHUNK=chunk, BLOCK=block)
    m, total, n, covers, _ = stats.unbind(1)
    floor = _floor_among(vals.sort(dim=-1, descending=True).values, m, total, n, covers > 0, ks, ps)
    wide = (n > width).nonzero().squeeze(1)
    if wide.numel():  # every token is a candidate: both floors are exact
        ordered = scaled[wide].sort(dim=-1, descending=True).values
        every = torch.full_like(n[wide], float(vocab))
        floor[wide] = _floor_among(ordered, m[wide], total[wide], every, every > 0, ks[wide], ps[wide])
    return floor


def _floor_among(
    ordered: torch.Tensor, m: torch.Tensor, total: torch.Tensor, n: torch.Tensor, covers: torch.Tensor,
    ks: torch.Tensor, ps: torch.Tensor,
) -> torch.Tensor:
    """The top-k / top-p floor of rows whose ``n`` best values lead ``ordered`` (descending)."""
    width = ordered.shape[1]
    kth = ordered.gather(1, (ks.clamp(min=1, max=width) - 1).view(-1, 1)).squeeze(1)
    kth = torch.where((ks > 0) & (ks <= n), kth, -float("inf"))
    probs = torch.exp(ordered - m.view(-1, 1)) / total.view(-1, 1)
    kept = _nucleus(probs, ps)
    last = ordered.gather(1, (kept - 1).view(-1, 1)).squeeze(1)
    last = torch.where((ps < 1.0) & covers, last, -float("inf"))
    return torch.maximum(kth, last)


def sample(
    logits: torch.Tensor, temperatures: torch.Tensor, seeds: torch.Tensor,
    positions: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor,
    need_top_k: bool = True, need_top_p: bool = True, need_min_p: bool = True,
) -> torch.Tensor:
    """One token per row of ``logits`` [rows, vocab]; see the module invariants. Returns int32 [rows]."""
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.int32, device=logits.device)
    if rows == 0:
        return out
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    temps = temperatures.reshape(-1).to(torch.float32).contiguous()
    ks = top_ks.reshape(-1)
    greedy = (ks <= 1).to(torch.int8).contiguous()
    # SGLang's batch flags say a filter may apply (top_p != 1, min_p > 0: exactly the rows that need
    # one); its top-k flag also counts greedy rows (k = 1), which need no floor: only that flag is
    # checked on the device (a wait for the GPU) before a [rows, vocab] pass.
    need_top_k = need_top_k and bool(((ks > 1) & (ks < vocab)).any())
    if need_top_k or need_top_p or need_min_p:
        scaled = torch.div(logits.float(), temps.view(-1, 1))
        fl = floors(scaled, top_ks, top_ps, min_ps, need_top_k, need_top_p, need_min_p)
        del scaled
    else:
        fl = torch.full((rows,), -float("inf"), device=logits.device, dtype=torch.float32)
    block, chunk, nchunk = _chunking(vocab)
    best_val = torch.empty((rows, nchunk), dtype=torch.float32, device=logits.device)
    best_idx = torch.empty((rows, nchunk), dtype=torch.int32, device=logits.device)
    _gumbel_argmax_partial[(rows, nchunk)](
        logits, logits.stride(0), temps, seeds.reshape(-1).to(torch.int64).contiguous(),
        positions.reshape(-1).to(torch.int64).contiguous(), fl.contiguous(), greedy,
        best_val, best_idx, vocab, nchunk, CHUNK=chunk, BLOCK=block, num_warps=8,
    )
    _reduce_chunks[(rows,)](
        best_val, best_idx, out, nchunk, BLOCK=triton.next_power_of_2(max(nchunk, 2)),
    )
    return out


def seeds_of(values: Iterable[int], device) -> torch.Tensor:
    """The seeds as int64 on ``device``, copied from pinned memory without waiting for the device's
    queued work (a batch is built while the previous one runs)."""
    device = torch.device(device)
    seeds = torch.tensor([int(v) & SEED_MASK for v in values], dtype=torch.int64, pin_memory=device.type == "cuda")
    return seeds.to(device, non_blocking=True)
