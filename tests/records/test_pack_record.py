"""``pack_record``: a prefill pack record round-trips through its strict schema; a candidate logs what it packs."""

import json
from pathlib import Path

import pytest

from corun_sglang.core import packing
from corun_sglang.records import pack_record


def test_a_candidate_server_logs_what_it_packs_for_the_verifier():
    text = "noise\n[2026-12-03] WARNING " + pack_record.candidate_line(1024, 1, packing.FA3) + "\nmore"
    assert pack_record.candidate_from_log(text) == {"pack": 1024, "shortest": 1, "kernel": "fa3"}
    with pytest.raises(packing.PackingError, match="--corun-prefill-pack-candidate"):
        pack_record.candidate_from_log("no such line")


def test_a_record_round_trips_and_a_bad_one_names_the_fix(tmp_path):
    record = pack_record.Record(pack=1024, shortest=17, environment={"gpu": "NVIDIA H200"}, needles={1007: 3, 17: 4})
    path = tmp_path / "pack.json"
    path.write_text(json.dumps(record.to_json()))
    assert pack_record.load(path) == pack_record.Record(1024, 17, {"gpu": "NVIDIA H200"}, {17: 4, 1007: 3}, str(path))
    assert pack_record.load(path).to_json() == record.to_json()
    with pytest.raises(packing.PackingError, match="cannot read it.*verify-prefill-pack"):
        pack_record.load(tmp_path / "missing.json")
    path.write_text('{"pack": 1024}')
    with pytest.raises(packing.PackingError, match="not a prefill pack record"):
        pack_record.load(path)


def test_a_record_that_would_not_load_is_not_written():
    with pytest.raises(packing.PackingError, match="pack 64: input should be greater than or equal to 128"):
        pack_record.Record(pack=64, shortest=17, environment={}).to_json()


GOOD = {"pack": 1024, "shortest": 17, "environment": {"gpu": "NVIDIA H200", "tp_size": 1}, "needles": {"17": 4}}


@pytest.mark.parametrize("change, refused", [
    ({"pack": "1024"}, 'pack "1024": input should be a valid integer'),
    ({"pack": 1024.0}, "pack 1024.0: input should be a valid integer"),
    ({"pack": False}, "pack false: input should be a valid integer"),
    ({"pack": 64}, "pack 64: input should be greater than or equal to 128"),
    ({"pack": 1 << 20}, "pack 1048576: input should be less than or equal to 65536"),
    ({"shortest": 0}, "shortest 0: input should be greater than or equal to 1"),
    ({"shortest": 2048}, "shortest 2048: the shortest packable prompt must fit the pack of 1024 tokens"),
    ({"needles": {"17": 0}}, "needles.17 0: input should be greater than 0"),
    ({"needles": {"2000": 4}}, 'needles {"2000": 4}: every needle must fit the pack of 1024 tokens'),
    ({"needles": [17, 4]}, "needles [17, 4]: input should be an object"),
    ({"environment": {"gpu": ["H200"]}}, 'environment.gpu ["H200"]: an environment field holds'),
    ({"kernel": "fa2"}, "kernel: not a field of this record"),
])
def test_a_record_with_a_wrong_field_is_refused_naming_the_file_and_the_field(tmp_path, change, refused):
    path = tmp_path / "pack.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(packing.PackingError) as caught:
        pack_record.load(path)
    assert str(caught.value).startswith(f"--corun-prefill-pack {path}: not a prefill pack record (")
    assert refused in str(caught.value) and str(caught.value).endswith(
        "Fix: write it with `corun-sglang verify-prefill-pack` on this machine, or drop --corun-prefill-pack")


def test_the_committed_records_still_load():
    found = list(Path(__file__).parents[2].glob("docs/results/pack/pack-*.json"))
    assert found and all(pack_record.load(p).pack >= packing.MIN_PACK for p in found)
