"""Prefill pack records: what ``corun-sglang verify-prefill-pack`` verified, and the candidate server's log line.

Invariants:
- a record names a pack (``packing.MIN_PACK`` tokens or more), its shortest packable prompt (1 to the
  pack) and the environment they were verified in (``environment.environment``);
- a record file is read only through ``RecordFile``, a strict schema (``environment.read``); a record that
  would not load is never written (``Record.to_json``);
- a pack candidate server logs what it packs, on which kernel, on one line (``candidate_line``), which
  ``candidate_from_log`` reads back; every failure is a ``packing.PackingError``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any, Mapping

import pydantic

from corun_sglang.records import environment
from corun_sglang.core.packing import MIN_PACK, PackingError


#: The log line a pack candidate server writes for ``verify-prefill-pack``: what it packs, on which kernel.
CANDIDATE_LOG = "corun prefill pack candidate: "


def candidate_line(pack: int, least: int, kernel: str) -> str:
    return CANDIDATE_LOG + json.dumps({"pack": pack, "shortest": least, "kernel": kernel}, sort_keys=True)


def candidate_from_log(text: str) -> dict[str, Any]:
    """What a candidate server logged it packs (``candidate_line``); ``PackingError`` if it logged nothing."""
    found = environment.logged(text, CANDIDATE_LOG)
    if found is None:
        raise PackingError("the server logged no prefill pack candidate: was it started with --corun and "
                           "--corun-prefill-pack-candidate?")
    return found


@dataclasses.dataclass(frozen=True)
class Record:
    """A ``verify-prefill-pack`` result: ``pack`` and ``shortest`` verified in ``environment``.

    ``needles`` maps each needle's prompt length to the packings it was checked in; every one gave
    the needle the bits it has alone.
    """

    pack: int
    shortest: int
    environment: Mapping[str, Any]
    needles: Mapping[int, int] = dataclasses.field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict:
        """The record file's content; ``PackingError`` where ``load`` would refuse it."""
        data = {"pack": self.pack, "shortest": self.shortest, "environment": dict(self.environment),
                "needles": dict(sorted(self.needles.items()))}
        try:
            return RecordFile.model_validate(data).model_dump(mode="json")
        except pydantic.ValidationError as exc:
            raise PackingError(f"a prefill pack record that would not load ({environment.refusals(exc)})") from None


class RecordFile(pydantic.BaseModel):
    """A prefill pack record file: ``pack`` (``MIN_PACK`` tokens or more) and ``shortest`` (1 to ``pack``); the
    environment they were verified in; ``needles``, each needle's prompt length (1 to ``pack``) with the
    packings it was checked in (one or more)."""

    model_config = environment.STRICT

    pack: Annotated[int, pydantic.Field(ge=MIN_PACK, le=environment.MAX_SIZE)]
    shortest: environment.Size
    environment: environment.Environment
    needles: dict[environment.Size, pydantic.PositiveInt] = {}

    @pydantic.field_validator("shortest")
    @classmethod
    def _shortest_fits(cls, shortest: int, info: pydantic.ValidationInfo) -> int:
        pack = info.data.get("pack")
        if pack is not None and shortest > pack:
            raise ValueError(f"the shortest packable prompt must fit the pack of {pack} tokens")
        return shortest

    @pydantic.field_validator("needles")
    @classmethod
    def _needles_fit(cls, needles: dict[int, int], info: pydantic.ValidationInfo) -> dict[int, int]:
        pack = info.data.get("pack")
        if pack is not None and any(n > pack for n in needles):
            raise ValueError(f"every needle must fit the pack of {pack} tokens")
        return needles


def load(path: str | Path) -> Record:
    """The record in ``path`` (``RecordFile``); ``PackingError`` naming the file, each refused field, the cause
    and the fix."""
    fix = "write it with `corun-sglang verify-prefill-pack` on this machine, or drop --corun-prefill-pack"
    found = environment.read(path, RecordFile, "--corun-prefill-pack", "prefill pack record", fix, PackingError)
    return Record(pack=found.pack, shortest=found.shortest, environment=dict(found.environment),
                  needles=dict(found.needles), source=str(path))
