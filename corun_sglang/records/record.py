"""Decode tiers: decode CUDA graphs smaller than N that give a request the bits of the size-N graph.

Without tiers a ``--corun`` server replays one decode graph of N slots, however few requests run.
``--corun-decode-tiers FILE`` adds the sizes a record in FILE lists. ``corun-sglang verify-tiers``
writes such a record after checking, on one model, GPU and software stack, that a request decoding
in an M-slot graph gets, bit for bit, the tokens and logprobs it gets in the N-slot graph. SGLang pads
a decode batch to the smallest captured size that holds it, so a lighter load replays a smaller graph.

Invariants:
- a server captures exactly ``capture_sizes(record.tiers, N)``: every tier below N, then N;
- it serves a record only when the record's N is its N and the record's environment equals its own
  (``environment.environment()``) field by field; otherwise it refuses to start and names each field that
  differs;
- a record file is read only through ``RecordFile``, a strict schema (``environment.read``);
- ``--corun-decode-tier-candidates`` captures unverified sizes for ``verify-tiers`` alone; such a
  server logs that it makes no determinism promise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import pydantic

from corun_sglang.records import environment
from corun_sglang.core.tiers import TiersError


@dataclasses.dataclass(frozen=True)
class Record:
    """A ``verify-tiers`` result: the verified ``tiers`` below ``n``, and where they hold."""

    n: int
    tiers: tuple[int, ...]
    environment: Mapping[str, Any]
    rejected: Mapping[int, int] = dataclasses.field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict:
        """The record file's content; ``TiersError`` where ``load`` would refuse it."""
        data = {"n": self.n, "tiers": sorted(self.tiers), "environment": dict(self.environment),
                "rejected": dict(sorted(self.rejected.items()))}
        try:
            return RecordFile.model_validate(data).model_dump(mode="json")
        except pydantic.ValidationError as exc:
            raise TiersError(f"a decode tiers record that would not load ({environment.refusals(exc)})") from None


class RecordFile(pydantic.BaseModel):
    """A decode tiers record file: ``n`` and its tiers, each unique and between 0 and ``n``; the environment
    they were verified in; the sizes ``rejected``, each with the earliest decode step a needle differed at."""

    model_config = environment.STRICT

    n: environment.Size
    tiers: list[environment.Size]
    environment: environment.Environment
    rejected: dict[environment.Size, pydantic.NonNegativeInt] = {}

    @pydantic.field_validator("tiers")
    @classmethod
    def _tiers_below_n(cls, tiers: list[int], info: pydantic.ValidationInfo) -> list[int]:
        n = info.data.get("n")
        if n is not None and any(t >= n for t in tiers):
            raise ValueError(f"every tier must be below n = {n}")
        if len(set(tiers)) != len(tiers):
            raise ValueError("each tier must be listed once")
        return tiers

    @pydantic.field_validator("rejected")
    @classmethod
    def _rejected_below_n(cls, rejected: dict[int, int], info: pydantic.ValidationInfo) -> dict[int, int]:
        n = info.data.get("n")
        if n is not None and any(m >= n for m in rejected):
            raise ValueError(f"every rejected size must be below n = {n}")
        return rejected


def load(path: str | Path) -> Record:
    """The record in ``path`` (``RecordFile``); ``TiersError`` naming the file, each refused field, the cause
    and the fix."""
    fix = "write it with `corun-sglang verify-tiers` on this machine, or drop --corun-decode-tiers"
    found = environment.read(path, RecordFile, "--corun-decode-tiers", "decode tiers record", fix, TiersError)
    return Record(n=found.n, tiers=tuple(sorted(found.tiers)), environment=dict(found.environment),
                  rejected=dict(found.rejected), source=str(path))
