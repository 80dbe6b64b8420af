"""Decode tiers as rules: decode CUDA graphs smaller than N that give a request the bits of the size-N graph.

A ``--corun`` server captures exactly ``capture_sizes(tiers, N)``: every tier below N, then N; SGLang pads a
decode batch to the smallest captured size that holds it, so a lighter load replays a smaller graph. A record of
verified tiers (``records.record``) is served only by a server of its N (``problems``).

Invariants: pure functions; every failure is a ``TiersError``.
"""

from __future__ import annotations

from typing import Any, Iterable

from corun_sglang.core import errors


class TiersError(errors.RecordError):
    """A decode tiers record that cannot be served; the message names the cause and the fix."""


def parse_sizes(text: str) -> list[int]:
    """``"72,128"`` -> ``[72, 128]``; ``TiersError`` for anything but positive integers."""
    try:
        sizes = [int(s) for s in str(text).replace(" ", ",").split(",") if s]
    except ValueError:
        raise TiersError(f"decode tier sizes '{text}': not a comma-separated list of integers") from None
    if not sizes or min(sizes) < 1:
        raise TiersError(f"decode tier sizes '{text}': give one or more positive integers")
    return sorted(set(sizes))


def capture_sizes(tiers: Iterable[int], n: int) -> list[int]:
    """The decode graph sizes to capture: each tier below ``n``, ascending, then ``n``."""
    return sorted({int(t) for t in tiers if int(t) < n}) + [n]


def problems(record: Any, n: int) -> list[str]:
    """What keeps ``record`` from being served by a server of ``n`` slots (empty: nothing)."""
    out = []
    if record.n != n:
        out.append(f"it was verified against a {record.n}-slot decode graph; this server's N "
                   f"(--max-running-requests) is {n}")
    bad = [t for t in record.tiers if not 0 < t < n]
    if bad:
        out.append(f"tiers {bad} are not between 1 and N - 1 = {n - 1}")
    return out
