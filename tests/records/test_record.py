"""``record``: both kinds of record (decode tiers, prefill pack) round-trip through their strict schemas, refuse
what would not load, and hold where they were verified; a pack candidate logs what it packs."""

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from corun_sglang.core import config, packing, tiers
from corun_sglang.records import environment
from corun_sglang.records.record import PackRecord, TiersRecord, pack_candidate_from_log, pack_candidate_line

ROOT = Path(__file__).parents[2]
ENV = {"model": "abc", "gpu": "NVIDIA H200", "version sglang": "0.5.17", "tp_size": 1}


@dataclasses.dataclass(frozen=True)
class Case:
    """A kind of record as these tests use it: a record of it, the file that record writes and what a record read
    from that file holds, the field that names its size, a record field that would not load with its refusal,
    where its committed records are and what each of them verified."""

    record: type
    fields: dict
    file: dict
    held: dict
    size: str
    wrong: tuple[dict, str]
    committed: tuple[str, ...]
    verified: Callable[[Any], bool]

    @property
    def kind(self):
        return self.record.kind

    def make(self, **changes):
        return self.record(**{**self.fields, **changes})


CASES = {
    "tiers": Case(
        record=TiersRecord,
        fields=dict(n=256, tiers=(128, 72), environment=ENV, rejected={16: 3}),
        file={"n": 256, "tiers": [72, 128], "environment": ENV, "rejected": {"16": 3}},
        held=dict(n=256, tiers=(72, 128), environment=ENV, rejected={16: 3}),
        size="n",
        wrong=(dict(tiers=(72, 256)), r"tiers \[72, 256\]: every tier must be below n = 256"),
        committed=("docs/results/tiers/tiers-*.json", "docs/results/calibration/*/tiers.json"),
        verified=lambda record: len(record.tiers) > 0),
    "pack": Case(
        record=PackRecord,
        fields=dict(pack=1024, shortest=17, environment=ENV, needles={1007: 3, 17: 4}),
        file={"pack": 1024, "shortest": 17, "environment": ENV, "needles": {"17": 4, "1007": 3}},
        held=dict(pack=1024, shortest=17, environment=ENV, needles={17: 4, 1007: 3}),
        size="pack",
        wrong=(dict(pack=64), "pack 64: input should be greater than or equal to 128"),
        committed=("docs/results/pack/pack-*.json", "docs/results/calibration/*/pack.json"),
        verified=lambda record: record.pack >= packing.MIN_PACK and len(record.needles) > 0),
}


@pytest.fixture(params=sorted(CASES))
def case(request):
    return CASES[request.param]


def test_a_record_round_trips_through_its_file_and_keeps_its_source(case, tmp_path):
    path = tmp_path / "r.json"
    record = case.make()
    record.write(path)
    assert json.loads(path.read_text()) == case.file == record.to_json()
    loaded = case.record.load(path)
    assert loaded == case.record(**case.held, source=str(path))
    assert loaded.source == str(path) and loaded.to_json() == record.to_json()


def test_a_record_that_would_not_load_is_not_written(case, tmp_path):
    change, refused = case.wrong
    path = tmp_path / "r.json"
    with pytest.raises(case.kind.error, match=f"a {case.kind.what} that would not load .*{refused}"):
        case.make(**change).write(path)
    with pytest.raises(case.kind.error, match=r"environment.gpu \[\]: an environment field holds"):
        case.make(environment={"gpu": []}).to_json()
    assert not path.exists()


def test_unreadable_or_malformed_records_name_the_fix(case, tmp_path):
    command = case.kind.command
    with pytest.raises(case.kind.error, match=f"cannot read it.*{command}"):
        case.record.load(tmp_path / "none.json")
    for text in ("not json", "{}", json.dumps({**case.file, case.size: "x"}), json.dumps({case.size: 1024})):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(case.kind.error, match=f"not a {case.kind.what}.*{command}"):
            case.record.load(tmp_path / "bad.json")


TIERS, PACK = CASES["tiers"], CASES["pack"]


@pytest.mark.parametrize("case, change, refused", [
    (TIERS, {"tiers": "72,128"}, 'tiers "72,128": input should be a valid array'),
    (TIERS, {"n": "256"}, 'n "256": input should be a valid integer'),
    (TIERS, {"n": 256.0}, "n 256.0: input should be a valid integer"),
    (TIERS, {"n": True}, "n true: input should be a valid integer"),
    (TIERS, {"n": 0}, "n 0: input should be greater than or equal to 1"),
    (TIERS, {"n": 1 << 20}, "n 1048576: input should be less than or equal to 65536"),
    (TIERS, {"tiers": [72.0]}, "tiers.0 72.0: input should be a valid integer"),
    (TIERS, {"tiers": [-8, 72]}, "tiers.0 -8: input should be greater than or equal to 1"),
    (TIERS, {"tiers": [72, 256]}, "tiers [72, 256]: every tier must be below n = 256"),
    (TIERS, {"tiers": [72, 72]}, "tiers [72, 72]: each tier must be listed once"),
    (TIERS, {"environment": {"gpu": {"name": "H200"}}}, 'environment.gpu {"name": "H200"}: an environment field holds'),
    (TIERS, {"environment": "H200"}, 'environment "H200": input should be an object'),
    (TIERS, {"rejected": {"16": "3"}}, 'rejected.16 "3": input should be a valid integer'),
    (TIERS, {"rejected": {"300": 3}}, 'rejected {"300": 3}: every rejected size must be below n = 256'),
    (TIERS, {"tier": [72]}, "tier: not a field of this record"),
    (PACK, {"pack": "1024"}, 'pack "1024": input should be a valid integer'),
    (PACK, {"pack": 1024.0}, "pack 1024.0: input should be a valid integer"),
    (PACK, {"pack": False}, "pack false: input should be a valid integer"),
    (PACK, {"pack": 64}, "pack 64: input should be greater than or equal to 128"),
    (PACK, {"pack": 1 << 20}, "pack 1048576: input should be less than or equal to 65536"),
    (PACK, {"shortest": 0}, "shortest 0: input should be greater than or equal to 1"),
    (PACK, {"shortest": 2048}, "shortest 2048: the shortest packable prompt must fit the pack of 1024 tokens"),
    (PACK, {"needles": {"17": 0}}, "needles.17 0: input should be greater than 0"),
    (PACK, {"needles": {"2000": 4}}, 'needles {"2000": 4}: every needle must fit the pack of 1024 tokens'),
    (PACK, {"needles": [17, 4]}, "needles [17, 4]: input should be an object"),
    (PACK, {"environment": {"gpu": ["H200"]}}, 'environment.gpu ["H200"]: an environment field holds'),
    (PACK, {"kernel": "fa2"}, "kernel: not a field of this record"),
], ids=lambda value: value.size if isinstance(value, Case) else None)
def test_a_record_with_a_wrong_field_is_refused_naming_the_file_and_the_field(tmp_path, case, change, refused):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**case.file, **change}))
    with pytest.raises(case.kind.error) as caught:
        case.record.load(path)
    kind = case.kind
    assert str(caught.value).startswith(f"{kind.option} {path}: not a {kind.what} (")
    assert refused in str(caught.value) and str(caught.value).endswith(
        f"Fix: write it with `corun-sglang {kind.command}` on this machine, or drop {kind.option}")


def test_a_number_json_reads_as_infinite_is_refused_not_raised(case, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**case.file, case.size: "inf", "environment": {"gpu": "inf"}}).replace('"inf"', "1e400"))
    with pytest.raises(case.kind.error, match=f"{case.size} Infinity: input should be a valid integer; "
                                                r"environment.gpu Infinity: an environment field holds a string, "
                                                r"a finite number"):
        case.record.load(path)


def test_a_record_made_of_what_a_candidate_logged_holds_there_and_is_refused_elsewhere(case, tmp_path):
    log = ("INFO x\n[2026-11-30 TP0] " + environment.environment_line(ENV) + "\n[TP1] "
           + environment.environment_line({"gpu": "another"}))
    path = tmp_path / "r.json"
    case.make(environment=environment.environment_from_log(log)).write(path)
    record = case.record.load(path)
    kind = case.kind
    served = [config.Served(record, kind.option, kind.command)]
    assert record.environment == ENV and environment.foreign(served, dict(ENV)) is None
    problem = environment.foreign(served, {**ENV, "gpu": "NVIDIA H100"})
    assert problem == (f"{kind.option} {path} was verified in another environment (gpu: verified with "
                       f"'NVIDIA H200', this server has 'NVIDIA H100'). Fix: run `corun-sglang {kind.command}` "
                       f"here, or drop {kind.option}")


def test_the_committed_records_still_load_and_write_back_byte_for_byte(case, tmp_path):
    found = [p for pattern in case.committed for p in sorted(ROOT.glob(pattern)) if "summary" not in p.name]
    assert len(found) >= 2
    for path in found:
        record = case.record.load(path)
        assert case.verified(record) and record.environment["gpu"], path
        record.write(tmp_path / "r.json")
        assert (tmp_path / "r.json").read_text() == path.read_text(), path


def test_a_calibration_entry_serves_the_records_it_verified_in_one_environment():
    """``calibration.serve`` serves an entry's ``tiers.json`` and ``pack.json`` for the verdicts of its
    ``calibration.json``: the committed entry's records say what the entry does, verified where it says."""
    folder = ROOT / "docs/results/calibration/4d26bef8bcd88ba4"
    entry = json.loads((folder / "calibration.json").read_text())
    tiers_record, pack_record = TiersRecord.load(folder / "tiers.json"), PackRecord.load(folder / "pack.json")
    assert list(tiers_record.tiers) == entry["tiers"] and tiers_record.n == entry["parts"]["n"]
    assert pack_record.pack == entry["pack"] and pack_record.needles
    assert tiers_record.environment == pack_record.environment
    assert tiers_record.environment["gpu"] == entry["parts"]["gpu"]
    assert {f"version {name}": v for name, v in entry["parts"]["versions"].items()} == {
        k: v for k, v in tiers_record.environment.items() if k.startswith("version ")}


def test_a_pack_candidate_server_logs_what_it_packs_for_the_verifier():
    text = "noise\n[2026-12-03] WARNING " + pack_candidate_line(1024, 1, packing.FA3) + "\nmore"
    assert pack_candidate_from_log(text) == {"pack": 1024, "shortest": 1, "kernel": "fa3"}
    with pytest.raises(packing.PackingError, match="--corun-prefill-pack-candidate"):
        pack_candidate_from_log("no such line")


def test_a_tiers_record_holds_its_tiers_sorted_and_a_pack_record_its_needles_by_length(tmp_path):
    TiersRecord(n=256, tiers=(192, 64, 128), environment=ENV).write(tmp_path / "t.json")
    assert TiersRecord.load(tmp_path / "t.json").tiers == (64, 128, 192)
    assert tiers.capture_sizes(TiersRecord.load(tmp_path / "t.json").tiers, 256) == [64, 128, 192, 256]
    PackRecord(pack=1024, shortest=1, environment=ENV, needles={1023: 4, 1: 4, 102: 4}).write(tmp_path / "p.json")
    assert list(PackRecord.load(tmp_path / "p.json").needles) == [1, 102, 1023]
