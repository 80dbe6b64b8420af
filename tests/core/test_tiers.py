"""``tiers``: decode tier sizes parse, capture below N, and a record is served only at its N."""

import pytest

from corun_sglang.core import tiers
from corun_sglang.records.record import TiersRecord

ENV = {"gpu": "NVIDIA H200"}


def test_sizes_parse_sorted_and_unique_or_refuse():
    assert tiers.parse_sizes("128,72, 72") == [72, 128]
    for bad in ("", "0,8", "a,8", "-4"):
        with pytest.raises(tiers.TiersError):
            tiers.parse_sizes(bad)


def test_capture_sizes_are_the_tiers_below_n_then_n():
    assert tiers.capture_sizes([128, 72], 256) == [72, 128, 256]
    assert tiers.capture_sizes([], 256) == [256]
    assert tiers.capture_sizes([256, 300, 8], 256) == [8, 256]


def test_problems_name_a_different_n_and_tiers_out_of_range():
    assert tiers.problems(TiersRecord(n=256, tiers=(72,), environment=ENV), 256) == []
    (other_n,) = tiers.problems(TiersRecord(n=128, tiers=(72,), environment=ENV), 256)
    assert "128-slot" in other_n and "is 256" in other_n
    (wide,) = tiers.problems(TiersRecord(n=256, tiers=(72, 256), environment=ENV), 256)
    assert "[256]" in wide
