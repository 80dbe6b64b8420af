"""Packed prefill: short fresh prompts share one prefill of exactly ``pack`` tokens.

Isolated prefill gives a request's prefill a shape that depends on the request alone. Packed prefill
(``--corun-prefill-pack``) keeps that for short prompts by giving every one of them the same shape: a
*packable* prompt (no prefix, that is its first and only chunk, of ``shortest`` to ``pack`` tokens)
always runs in a prefill of exactly ``pack`` tokens, alone or with other packable prompts. SGLang's
breakable prefill CUDA graph pads the prefill to ``pack`` tokens; FlashInfer plans its attention
without split-KV. docs/prefill_packing.md gives the measurements this rests on.

Invariants:
- a prefill batch of two or more requests holds packable prompts only, ``pack`` tokens at most in all
  (``joins``); every other prefill holds one request, as under isolated prefill;
- every prefill of ``shortest`` to ``pack`` tokens replays the prefill graph of ``pack`` tokens
  (``replay_tokens``; ``graph_counts`` captures no count below ``pack``);
- a prefill's LM head (the logits of its sampled and logprob positions) runs on ``head_rows``, at least
  ``pack`` rows, padded;
- a packable prompt's attention runs on the same query tile alone and packed: on FlashInfer's FA3
  kernel (``corun_sglang.serving.kernel_probe``) every tile has a fixed row count, so any prompt packs (``shortest`` 1);
  on another, ``shortest`` keeps a packed batch's mean packed query length (prompt tokens times the
  GQA group) above ``QUERY_TILE_ROWS``, where FA2's plan picks its widest query tile;
- with ``--corun-prefill-pack-wait W``, a pack waits up to W decode steps (``waits``) where full-sequence
  admission would cut it short (``cut_short``: finishing requests free KV and slots) or where, with at least
  half of N running, the queue leaves it under ``FILL`` of its tokens (``underfilled``: finishing requests
  send more prompts): which prompts share a prefill changes, never the shape any of them runs at;
- a server packs only with a record (``corun_sglang.records.record.PackRecord``) that ``corun-sglang verify-prefill-pack``
  wrote in an environment equal to its own (``corun_sglang.records.environment.environment``), or, unverified and
  making no determinism promise, for that verification (``--corun-prefill-pack-candidate``).
"""

from __future__ import annotations

from typing import Iterable

from corun_sglang.core import policy
from corun_sglang.core import errors

#: FlashInfer's ``FA2DetermineCtaTileQ``: above this mean packed query length a prefill plan takes
#: its 128-row query tile (head dims below 256), at or below it a narrower one.
QUERY_TILE_ROWS = 64

#: Pack sizes below this would leave too little room to pack (and ``shortest`` can reach 65 tokens).
MIN_PACK = 128

#: The share of a pack's tokens below which a pack on a loaded server waits for more prompts (``underfilled``).
FILL = 0.75


class PackingError(errors.RecordError):
    """A pack size or record that cannot be served; the message names the cause and the fix."""


#: FlashInfer's Hopper prefill kernel. Its plan (``PrefillSM90Plan``) gives every query tile 128 rows (192 at
#: head dim 64) and splits no KV, whatever the batch, so a row's attention does not follow its co-runners.
FA3 = "fa3"
#: FlashInfer's other prefill kernel, whose plan picks the query tile from the batch (``FA2DetermineCtaTileQ``).
FA2 = "fa2"


def shortest(num_attention_heads: int, num_key_value_heads: int, kernel: str = FA2) -> int:
    """The fewest prompt tokens a packable prompt has: 1 on ``FA3``; on any other kernel, so many that its
    packed query length exceeds ``QUERY_TILE_ROWS``."""
    if kernel == FA3:
        return 1
    group = max(1, num_attention_heads // max(1, num_key_value_heads))
    return QUERY_TILE_ROWS // group + 1


def packable(prompt_len: int, prefix_len: int, pack: int, least: int) -> bool:
    """Whether a prompt runs at ``pack`` tokens and may share its prefill: fresh, ``least`` to ``pack`` tokens."""
    return prefix_len == 0 and least <= prompt_len <= pack


def joins(batch: Iterable[tuple[int, int]], candidate: tuple[int, int], pack: int, least: int) -> bool:
    """Whether ``candidate`` may join a non-empty prefill ``batch``; each is ``(prompt_len, prefix_len)``.

    Only when it and every request already there are packable and their prompts fit ``pack`` tokens.
    """
    batch = list(batch)
    every = [*batch, candidate]
    return bool(batch) and all(packable(n, p, pack, least) for n, p in every) and sum(n for n, _ in every) <= pack


#: Why a prefill stops taking waiting prompts (``_scan``): the queue ended, a prompt does not join the pack
#: (``joins``; a prompt that is not packable runs alone), or full-sequence admission refuses one (KV or N).
END, JOIN, ADMISSION = "end", "join", "admission"


def _scan(waiting: Iterable[tuple[int, int, int]], running: list[int], pool_tokens: int, max_running: int,
          pack: int, least: int) -> tuple[list[tuple[int, int]], str]:
    """The next prefill's prompts ``(prompt_len, prefix_len)`` and why it stops (``END``, ``JOIN``,
    ``ADMISSION``). As SGLang's scheduler does, it takes waiting prompts in order up to the first it refuses,
    and reads the queue no further."""
    batch: list[tuple[int, int]] = []
    held = list(running)
    for prompt_len, prefix_len, reserved in waiting:
        if batch and not joins(batch, (prompt_len, prefix_len), pack, least):
            return batch, JOIN
        if not policy.admits(reserved, held, pool_tokens, max_running):
            return batch, ADMISSION
        batch.append((prompt_len, prefix_len))
        held.append(reserved)
    return batch, END


def next_prefill(waiting: Iterable[tuple[int, int, int]], running: list[int], pool_tokens: int,
                 max_running: int, pack: int, least: int) -> tuple[int, bool]:
    """How many of the queue's first prompts the next prefill admits, and whether admission stopped it.

    ``waiting`` is the queue in order, each ``(prompt_len, prefix_len, reserved_tokens)``; ``running`` the
    reserved tokens of every admitted, unfinished request (``policy.reserved_tokens``). The prefill takes
    waiting prompts in order and stops at the first it refuses: one that does not join the pack, or one
    that ``policy.admits`` refuses, the KV pool or N being taken. The flag is True for the latter.
    """
    batch, stop = _scan(waiting, running, pool_tokens, max_running, pack, least)
    return len(batch), stop == ADMISSION


def _cut_short(batch: list[tuple[int, int]], stop: str) -> bool:
    return bool(batch) and stop == ADMISSION


def _underfilled(batch: list[tuple[int, int]], stop: str, running: list[int], max_running: int, pack: int,
                 least: int) -> bool:
    return (stop == END and bool(batch) and 2 * len(running) >= max_running and packable(*batch[0], pack, least)
            and sum(n for n, _ in batch) < FILL * pack)


def cut_short(waiting: Iterable[tuple[int, int, int]], running: list[int], pool_tokens: int, max_running: int,
              pack: int, least: int) -> bool:
    """Whether full-sequence admission ends the next prefill pack before the pack does (``next_prefill``):
    it admits a packable prompt, and a later one that would join it is refused for KV or N, which the
    decode steps free. False when the pack is full, the next prompt is not packable, the queue ends, or
    nothing is admitted."""
    return _cut_short(*_scan(waiting, running, pool_tokens, max_running, pack, least))


def underfilled(waiting: Iterable[tuple[int, int, int]], running: list[int], pool_tokens: int, max_running: int,
                pack: int, least: int) -> bool:
    """Whether the queue leaves the next prefill pack under ``FILL`` of its tokens on a loaded server: it admits
    every waiting prompt, the first packable, in fewer than ``FILL * pack`` tokens, while at least half of N run.

    There each request that finishes sends the next prompt (a client holding N requests in flight sends one
    as each ends), so packs would hold one prompt each, every one padded to the pack and stalling every
    running request's decode for as long as a full pack. False when nothing is admitted, a waiting prompt is
    left out (refused, or it does not join), or fewer than N/2 run, where a prefill stalls little."""
    batch, stop = _scan(waiting, running, pool_tokens, max_running, pack, least)
    return _underfilled(batch, stop, running, max_running, pack, least)


def waits(waiting: Iterable[tuple[int, int, int]], running: list[int], pool_tokens: int, max_running: int,
          pack: int, least: int) -> bool:
    """Whether the next prefill pack waits a decode step for more prompts (``--corun-prefill-pack-wait``):
    admission cuts it short (``cut_short``) or the queue leaves it underfilled (``underfilled``); one read
    of the queue, up to where the prefill stops."""
    batch, stop = _scan(waiting, running, pool_tokens, max_running, pack, least)
    return _cut_short(batch, stop) or _underfilled(batch, stop, running, max_running, pack, least)


def graph_counts(counts: Iterable[int], pack: int) -> list[int]:
    """The prefill graph token counts to capture: ``pack``, then SGLang's counts above it (none below it)."""
    return [pack] + sorted({int(c) for c in counts if int(c) > pack})


def at_pack(num_tokens: int, pack: int, least: int) -> bool:
    """Whether a prefill of ``num_tokens`` runs at ``pack`` tokens: from ``least`` up to ``pack``."""
    return least <= num_tokens <= pack


def replay_tokens(num_tokens: int, pack: int, least: int) -> int:
    """The token count a prefill of ``num_tokens`` replays at (``pack`` where ``at_pack``)."""
    return pack if at_pack(num_tokens, pack, least) else num_tokens


def head_rows(rows: int, pack: int) -> int:
    """The rows a prefill's LM head computes: at least ``pack``, so the GEMM's row count, and with it its
    kernel, is the same for a packable prompt alone and packed (its rows are its last position, or every
    prompt position asking for a logprob, and its co-runners' the same)."""
    return max(rows, pack)


def pack_problems(pack: int, chunked_prefill_size: int | None) -> list[str]:
    """What keeps ``pack`` from being served with this chunk size (empty: nothing)."""
    out = []
    if pack < MIN_PACK:
        out.append(f"a pack of {pack} tokens is below {MIN_PACK}")
    if chunked_prefill_size is not None and 0 < chunked_prefill_size < pack:
        out.append(f"a pack of {pack} tokens exceeds --chunked-prefill-size {chunked_prefill_size}, "
                   "so a packable prompt could be chunked")
    return out
