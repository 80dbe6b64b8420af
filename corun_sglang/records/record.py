"""Verified records: what ``corun-sglang verify-tiers`` and ``verify-prefill-pack`` verified, and where.

A record is of one kind. A decode tiers record (``TiersRecord``, served by ``--corun-decode-tiers FILE``) lists
decode CUDA graph sizes M below N in which a request gets, bit for bit, the tokens and logprobs it gets in the
N-slot graph; without it a ``--corun`` server replays one decode graph of N slots, however few requests run, and
with it SGLang pads a decode batch to the smallest captured size that holds it, so a lighter load replays a
smaller graph. A prefill pack record (``PackRecord``, served by ``--corun-prefill-pack FILE``) names a pack of
tokens in which every prompt from its shortest packable length up gets the bits it gets alone. Each was verified
on one model, GPU and software stack: the environment the record holds (``environment.environment``).

Invariants:
- a record holds what its probe verified, the environment it verified it in, and the file it was read from
  (``source``, empty for one not read); its ``Kind`` names its file's schema, what the record is, the option that
  serves it, the command that writes it and the one error every failure of it raises (``TiersError``,
  ``PackingError``);
- a record file is read only through its kind's schema (``Record.load``, ``environment.read``): a strict
  pydantic model that refuses unknown keys, wrong types and values out of range, naming the option, the file,
  each refused field, the cause and the fix;
- a record's fields are its file's (``source`` aside): a sequence is written as a sorted list and held as a
  sorted tuple, a mapping is written with its keys sorted; a record that would not load is never written
  (``Record.to_json``, ``Record.write``);
- a server serves a record only in the environment it was verified in (``environment.foreign``), a decode tiers
  record only at its N (``tiers.problems``; it captures exactly ``tiers.capture_sizes(record.tiers, N)``), a
  pack only where its prefill kernel packs from the record's shortest prompt or fewer tokens;
- a server with ``--corun-decode-tier-candidates`` or ``--corun-prefill-pack-candidate`` serves unverified sizes
  for the probes alone and logs that it makes no determinism promise; it logs its environment
  (``environment.environment_line``) and, with a pack, what it packs on which kernel on one line
  (``pack_candidate_line``), which ``pack_candidate_from_log`` reads back.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping, TypeVar

import pydantic

from corun_sglang.core.errors import RecordError
from corun_sglang.core.packing import MIN_PACK, PackingError
from corun_sglang.core.tiers import TiersError
from corun_sglang.records import environment

R = TypeVar("R", bound="Record")


@dataclasses.dataclass(frozen=True)
class Kind:
    """A kind of record: its file's ``schema``, ``what`` it is, the ``option`` that serves it, the ``command`` that
    writes it and the ``error`` every failure of it raises."""

    schema: type[pydantic.BaseModel]
    what: str
    option: str
    command: str
    error: type[RecordError]

    @property
    def fix(self) -> str:
        return f"write it with `corun-sglang {self.command}` on this machine, or drop {self.option}"


@dataclasses.dataclass(frozen=True)
class Record:
    """What a probe verified and the ``environment`` it verified it in, read from ``source``. A subclass is a
    kind: it declares what its probe verified, as fields, and its ``kind``."""

    kind: ClassVar[Kind]

    environment: Mapping[str, Any] = dataclasses.field(kw_only=True)
    source: str = dataclasses.field(default="", kw_only=True)

    def to_json(self) -> dict:
        """The record file's content; the kind's ``error`` where ``load`` would refuse it."""
        data = {field.name: _written(getattr(self, field.name)) for field in dataclasses.fields(self)
                if field.name != "source"}
        try:
            return self.kind.schema.model_validate(data).model_dump(mode="json")
        except pydantic.ValidationError as exc:
            raise self.kind.error(f"a {self.kind.what} that would not load ({environment.refusals(exc)})") from None

    def write(self, path: str | Path) -> None:
        """The record file (``to_json``) at ``path``; nothing is written where ``to_json`` refuses."""
        text = json.dumps(self.to_json(), indent=1) + "\n"
        Path(path).write_text(text)

    @classmethod
    def load(cls: type[R], path: str | Path) -> R:
        """The record in ``path``, read through the kind's ``schema``; the kind's ``error`` naming the option, the
        file, each refused field, the cause and the fix."""
        kind = cls.kind
        found = environment.read(path, kind.schema, kind.option, kind.what, kind.fix, kind.error)
        return cls(**{name: _held(getattr(found, name)) for name in kind.schema.model_fields}, source=str(path))


def _written(value: Any) -> Any:
    """A record field as its file holds it: a sequence sorted, a mapping with its keys sorted."""
    if isinstance(value, (tuple, list)):
        return sorted(value)
    if isinstance(value, Mapping):
        return dict(sorted(value.items()))
    return value


def _held(value: Any) -> Any:
    """A file field as its record holds it: a list as a sorted tuple, a mapping as a dict."""
    if isinstance(value, list):
        return tuple(sorted(value))
    return dict(value) if isinstance(value, Mapping) else value


class TiersFile(pydantic.BaseModel):
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


@dataclasses.dataclass(frozen=True)
class TiersRecord(Record):
    """A ``verify-tiers`` result: the verified ``tiers`` below ``n``, and the sizes ``rejected``, each with the
    earliest decode step a needle differed at."""

    kind = Kind(TiersFile, "decode tiers record", "--corun-decode-tiers", "verify-tiers", TiersError)

    n: int
    tiers: tuple[int, ...]
    rejected: Mapping[int, int] = dataclasses.field(default_factory=dict)


class PackFile(pydantic.BaseModel):
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


@dataclasses.dataclass(frozen=True)
class PackRecord(Record):
    """A ``verify-prefill-pack`` result: ``pack`` and ``shortest``; ``needles`` maps each needle's prompt length to
    the packings it was checked in, every one of which gave the needle the bits it has alone."""

    kind = Kind(PackFile, "prefill pack record", "--corun-prefill-pack", "verify-prefill-pack", PackingError)

    pack: int
    shortest: int
    needles: Mapping[int, int] = dataclasses.field(default_factory=dict)


#: The log line a pack candidate server writes for ``verify-prefill-pack``: what it packs, on which kernel.
PACK_CANDIDATE_LOG = "corun prefill pack candidate: "


def pack_candidate_line(pack: int, least: int, kernel: str) -> str:
    return PACK_CANDIDATE_LOG + json.dumps({"pack": pack, "shortest": least, "kernel": kernel}, sort_keys=True)


def pack_candidate_from_log(text: str) -> dict[str, Any]:
    """What a candidate server logged it packs (``pack_candidate_line``); ``PackingError`` if it logged nothing."""
    found = environment.logged(text, PACK_CANDIDATE_LOG)
    if found is None:
        raise PackingError("the server logged no prefill pack candidate: was it started with --corun and "
                           "--corun-prefill-pack-candidate?")
    return found
