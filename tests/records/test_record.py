"""``tiers``: decode tier records, their file schema, and what refuses them."""

import json
from pathlib import Path

import pytest

from corun_sglang.records import record as tier_record
from corun_sglang.core import tiers

ENV = {"model": "abc", "gpu": "NVIDIA H200", "version sglang": "0.5.17", "tp_size": 1}


def test_sizes_parse_sorted_and_unique_or_refuse():
    assert tiers.parse_sizes("128,72, 72") == [72, 128]
    for bad in ("", "0,8", "a,8", "-4"):
        with pytest.raises(tiers.TiersError):
            tiers.parse_sizes(bad)


def test_capture_sizes_are_the_tiers_below_n_then_n():
    assert tiers.capture_sizes([128, 72], 256) == [72, 128, 256]
    assert tiers.capture_sizes([], 256) == [256]
    assert tiers.capture_sizes([256, 300, 8], 256) == [8, 256]


def test_a_record_round_trips_and_keeps_its_source(tmp_path):
    path = tmp_path / "t.json"
    record = tier_record.Record(n=256, tiers=(128, 72), environment=ENV, rejected={16: 3})
    path.write_text(json.dumps(record.to_json()))
    loaded = tier_record.load(path)
    assert (loaded.n, loaded.tiers, dict(loaded.environment), dict(loaded.rejected)) == (256, (72, 128), ENV, {16: 3})
    assert loaded.source == str(path)
    assert tier_record.load(path).to_json() == record.to_json()


def test_a_record_that_would_not_load_is_not_written():
    with pytest.raises(tiers.TiersError, match=r"tiers \[72, 256\]: every tier must be below n = 256"):
        tier_record.Record(n=256, tiers=(72, 256), environment=ENV).to_json()
    with pytest.raises(tiers.TiersError, match=r"environment.gpu \[\]: an environment field holds"):
        tier_record.Record(n=256, tiers=(72,), environment={"gpu": []}).to_json()


def test_unreadable_or_malformed_records_name_the_fix(tmp_path):
    with pytest.raises(tiers.TiersError, match="cannot read it.*verify-tiers"):
        tier_record.load(tmp_path / "none.json")
    for text in ("not json", "{}", '{"n": 256, "tiers": ["x"], "environment": {}}'):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(tiers.TiersError, match="not a decode tiers record.*verify-tiers"):
            tier_record.load(tmp_path / "bad.json")


GOOD = {"n": 256, "tiers": [72, 128], "environment": ENV, "rejected": {"16": 3}}


@pytest.mark.parametrize("change, refused", [
    ({"tiers": "72,128"}, 'tiers "72,128": input should be a valid array'),
    ({"n": "256"}, 'n "256": input should be a valid integer'),
    ({"n": 256.0}, "n 256.0: input should be a valid integer"),
    ({"n": True}, "n true: input should be a valid integer"),
    ({"n": 0}, "n 0: input should be greater than or equal to 1"),
    ({"n": 1 << 20}, "n 1048576: input should be less than or equal to 65536"),
    ({"tiers": [72.0]}, "tiers.0 72.0: input should be a valid integer"),
    ({"tiers": [-8, 72]}, "tiers.0 -8: input should be greater than or equal to 1"),
    ({"tiers": [72, 256]}, "tiers [72, 256]: every tier must be below n = 256"),
    ({"tiers": [72, 72]}, "tiers [72, 72]: each tier must be listed once"),
    ({"environment": {"gpu": {"name": "H200"}}}, "environment.gpu {\"name\": \"H200\"}: an environment field holds"),
    ({"environment": "H200"}, 'environment "H200": input should be an object'),
    ({"rejected": {"16": "3"}}, 'rejected.16 "3": input should be a valid integer'),
    ({"rejected": {"300": 3}}, "rejected {\"300\": 3}: every rejected size must be below n = 256"),
    ({"tier": [72]}, "tier: not a field of this record"),
])
def test_a_record_with_a_wrong_field_is_refused_naming_the_file_and_the_field(tmp_path, change, refused):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(tiers.TiersError) as caught:
        tier_record.load(path)
    assert str(caught.value).startswith(f"--corun-decode-tiers {path}: not a decode tiers record (")
    assert refused in str(caught.value) and str(caught.value).endswith(
        "Fix: write it with `corun-sglang verify-tiers` on this machine, or drop --corun-decode-tiers")


def test_a_number_json_reads_as_infinite_is_refused_not_raised(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"n": 1e400, "tiers": [72], "environment": {"gpu": 1e400}}')
    with pytest.raises(tiers.TiersError, match=r"n Infinity: input should be a valid integer; environment.gpu "
                                               r"Infinity: an environment field holds a string, a finite number"):
        tier_record.load(path)


def test_the_committed_records_still_load():
    found = [p for p in Path(__file__).parents[2].glob("docs/results/tiers/tiers-*.json") if "summary" not in p.name]
    assert found and all(tier_record.load(p).tiers for p in found)


def test_problems_name_a_different_n_and_tiers_out_of_range():
    assert tiers.problems(tier_record.Record(n=256, tiers=(72,), environment=ENV), 256) == []
    (other_n,) = tiers.problems(tier_record.Record(n=128, tiers=(72,), environment=ENV), 256)
    assert "128-slot" in other_n and "is 256" in other_n
    (wide,) = tiers.problems(tier_record.Record(n=256, tiers=(72, 256), environment=ENV), 256)
    assert "[256]" in wide
