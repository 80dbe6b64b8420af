"""The shape each forward step of a ``--corun`` scheduler runs at, as labels an operator can read.

A decode step of ``b`` requests replays the smallest captured decode graph that holds it (SGLang pads a
decode batch to it; ``tiers.capture_sizes`` lists the sizes), so ``graph size - b`` of its slots are
padding. A prefill batch is one of three kinds: a ``chunk`` of a prompt longer than the chunk size, a
``packed`` prefill (several fresh prompts, or one padded to the prefill pack, ``packing.at_pack``), or an
``isolated`` one (one fresh whole prompt at its own size). Pure functions over sizes and counts;
``adapters.operations`` reads SGLang's batches and ``metrics`` exports the counts.

Invariants:
- ``graph_size`` is what SGLang's decode graph runner replays for the batch, or None where no captured
  graph holds it (a ``--corun`` scheduler stops before such a step runs);
- every prefill batch has exactly one kind; a batch holding any chunk is a ``chunk``;
- a ``Tally`` only grows until ``drain`` hands its counts over and starts again from zero.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Iterable, Sequence

from corun_sglang.core import packing

ISOLATED = "isolated"
PACKED = "packed"
CHUNK = "chunk"
PREFILL_KINDS = (ISOLATED, PACKED, CHUNK)


def graph_size(batch_size: int, sizes: Sequence[int]) -> int | None:
    """The decode graph a step of ``batch_size`` requests replays: the smallest of the ascending ``sizes``
    that holds it; None if none does."""
    index = bisect.bisect_left(sizes, batch_size)
    return sizes[index] if index < len(sizes) else None


def prefill_kind(requests: Iterable[tuple[int, int, int]], pack: tuple[int, int] | None = None) -> str:
    """The kind of a prefill batch; each request is ``(prompt_len, prefix_len, extend_len)``, ``pack`` the
    server's prefill pack and shortest packable prompt (None: isolated prefill).

    ``CHUNK`` when a request continues a prompt (a prefix; the radix cache is off under ``--corun``, so only
    its own earlier chunks make one) or does not reach its end; else ``PACKED`` when several prompts share
    it or its tokens replay the pack's graph; else ``ISOLATED``."""
    requests = list(requests)
    if any(prefix > 0 or prefix + extend < prompt for prompt, prefix, extend in requests):
        return CHUNK
    tokens = sum(extend for _, _, extend in requests)
    if len(requests) > 1 or (pack is not None and packing.at_pack(tokens, *pack)):
        return PACKED
    return ISOLATED


@dataclasses.dataclass
class Tally:
    """Steps counted since the last ``drain``: decode steps by graph size, their padding slots, prefills
    by kind."""

    decode_steps: dict[int, int] = dataclasses.field(default_factory=dict)
    padded_slots: int = 0
    prefills: dict[str, int] = dataclasses.field(default_factory=dict)

    def decode(self, batch_size: int, sizes: Sequence[int]) -> None:
        """Count a decode step of ``batch_size`` requests over the captured ``sizes`` (none counted where no
        graph holds it)."""
        graph = graph_size(batch_size, sizes)
        if graph is None:
            return
        self.decode_steps[graph] = self.decode_steps.get(graph, 0) + 1
        self.padded_slots += graph - batch_size

    def prefill(self, kind: str) -> None:
        self.prefills[kind] = self.prefills.get(kind, 0) + 1

    def drain(self) -> "Tally":
        """The counts so far, this tally starting again from zero."""
        out = Tally(self.decode_steps, self.padded_slots, self.prefills)
        self.decode_steps, self.padded_slots, self.prefills = {}, 0, {}
        return out
