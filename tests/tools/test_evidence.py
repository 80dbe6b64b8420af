"""``tools.evidence``: a scenario's sends become recountable rows, and every failure of proof is named."""

import pytest

from corun_sglang.core.compare import Generation, digest
from corun_sglang.tools.evidence import Sent, greedy, judge, whole
from corun_sglang.tools.loads import Overlap

P = {"max_new_tokens": 3, "ignore_eos": True, "temperature": 0.7}


def gen(tokens=(1, 2, 3), logprobs=(-0.5, -0.25, -0.125), finish="length", cached=0):
    return Generation.of(tokens, logprobs, finish=finish, cached_tokens=cached)


def sent(key, run, role, generation=None, params=P, intended=0, **kw):
    return Sent(key, run, role, params, gen() if generation is None else generation, 0.0, 1.0, intended, **kw)


def test_an_output_is_whole_only_at_its_length_or_ended_by_a_stop():
    assert whole(gen(), P) is None
    assert whole(None, P) == "empty output"
    assert whole(Generation.of([], []), P) == "empty output"
    assert "2 of 3 tokens" in whole(gen((1, 2), (-1.0, -1.0)), P)
    open_ended = {"max_new_tokens": 3, "ignore_eos": False}
    assert whole(gen((1, 2), (-1.0, -1.0), finish="stop"), open_ended) is None
    assert "ended by 'abort'" in whole(gen((1, 2), (-1.0, -1.0), finish="abort"), open_ended)
    assert "more than" in whole(gen((1, 2, 3, 4), (-1.0,) * 4), open_ended)
    assert "logprobs" in whole(Generation((1, 2, 3), (-1.0,)), P)


def test_counts_divergences_and_records_digests():
    other = gen((1, 2, 9))
    got = judge("s", "corun", "b", [sent("n0", "alone", "reference"), sent("n0", "again", "null"),
                                    sent("n0", "crowd-0", "compared"), sent("n0", "crowd-1", "compared", other),
                                    sent("f0", "crowd-0", "corunner")], None)
    assert got.row["comparisons"] == 2 and got.row["divergent"] == 1 and got.row["first_steps"] == [2]
    assert got.row["null_comparisons"] == 1 and got.row["null_divergent"] == 0
    assert [r["role"] for r in got.requests] == ["reference", "null", "compared", "compared"]
    assert got.requests[3]["digest"] == digest(other) != got.requests[0]["digest"]
    assert got.requests[3]["first_divergence"] == 2 and got.requests[0]["first_divergence"] is None
    assert got.problems == []  # a divergence is a count, not a harness problem


def test_a_row_counts_the_sampled_tokens_whose_logprob_was_not_finite():
    served_null = gen(logprobs=(-0.5, None, None))  # the server wrote -inf or NaN as null
    got = judge("s", "corun", "n", [sent("n0", "alone", "reference", served_null),
                                    sent("n0", "crowd", "compared", served_null), sent("n1", "alone", "reference")], None)
    assert [r.get("nonfinite_logprobs") for r in got.requests] == [2, 2, None]
    assert got.row["divergent"] == 0 and not got.problems


def test_a_null_control_that_differs_an_unwhole_output_and_a_missing_reference_are_problems():
    got = judge("s", "default", "a", [sent("k", "alone", "reference"), sent("k", "again", "null", gen((1, 2, 4))),
                                      sent("j", "crowd", "compared"), sent("k", "crowd", "compared", gen((1,), (-1.0,)))],
                None)
    text = "\n".join(got.problems)
    assert "null control: 1 of 1" in text and "j crowd: no reference" in text and "1 of 3 tokens" in text


def test_cache_hits_are_summed_so_a_prefix_cache_cannot_hide():
    got = judge("s", "default", "a", [sent("k", "alone", "reference"), sent("k", "crowd", "compared", gen(cached=5))],
                None)
    assert got.row["cached_tokens"] == 5


def test_each_request_row_carries_its_hit_and_the_row_counts_hits_per_role():
    sends = [sent("k", "alone", "reference", prompt_tokens=2600),
             sent("k", "again", "null", prompt_tokens=2600),
             sent("k", "warm", "compared", gen(cached=2048), prompt_tokens=2600, logprob_start_len=2500),
             sent("k", "whole", "compared", gen(cached=2599), prompt_tokens=2600),
             sent("f", "warm", "corunner", gen(cached=1024), prompt_tokens=1500),
             sent("x", "warm", "aborted", None)]
    got = judge("shape", "corun-prefix", "s", sends, None)
    rows = {r["run"]: r for r in got.requests}
    assert [rows[r]["cached_tokens"] for r in ("alone", "again", "warm", "whole")] == [0, 0, 2048, 2599]
    assert rows["warm"]["prompt_tokens"] == 2600 and rows["warm"]["logprob_start_len"] == 2500
    assert "logprob_start_len" not in rows["whole"]  # asked for no prompt logprobs
    assert got.row["cached_by_role"] == {"reference": 0, "null": 0, "compared": 4647, "corunner": 1024, "aborted": 0}
    assert got.row["cached_tokens"] == 4647 + 1024


def test_overlap_keeps_the_worst_margin_and_fails_below_the_intended_count():
    seen = {"a": Overlap(10, 40, 1), "b": Overlap(10, 70, 1)}
    sends = [sent("k", "alone", "reference"), sent("k", "a", "compared", intended=32),
             sent("k", "b", "compared", intended=64)]
    got = judge("s", "corun", "d", sends, lambda s: seen[s.run])
    assert got.row["overlap"] == {"intended": 64, "samples": 10, "observed_max": 70, "observed_min": 1}
    assert got.problems == []
    seen["a"] = Overlap(10, 20, 1)
    got = judge("s", "corun", "d", sends, lambda s: seen[s.run])
    assert got.row["overlap"]["observed_max"] == 20 and "overlap not proven" in got.problems[0]


def test_a_cross_arm_comparison_reads_the_other_arms_reference():
    ref = sent("k", "alone", "reference")
    got = judge("s", "corun-moe-compute", "j", [sent("k", "alone", "compared", gen((1, 2, 5)), reference_arm="corun")],
                None, references={"k": ref})
    assert got.row["divergent"] == 1 and got.requests[0]["reference_arm"] == "corun"


def test_aborted_corunners_are_neither_checked_nor_compared():
    got = judge("s", "corun", "h", [sent("k", "alone", "reference"), sent("x", "crowd", "aborted", gen((1,), (-1.0,)))],
                None)
    assert got.problems == [] and got.row["comparisons"] == 0


def test_greedy_keeps_everything_but_the_temperature():
    body = {"input_ids": [1], "sampling_params": {"temperature": 0.8, "top_p": 0.9, "sampling_seed": 3}}
    assert greedy(body)["sampling_params"] == {"temperature": 0.0, "top_p": 0.9, "sampling_seed": 3}
    assert body["sampling_params"]["temperature"] == 0.8


def test_an_unknown_role_is_refused():
    with pytest.raises(ValueError):
        judge("s", "corun", "a", [sent("k", "alone", "solo")], None)


def test_each_compared_row_carries_its_own_overlap_and_the_row_says_whether_it_claims_one():
    sends = [sent("k", "alone", "reference"), sent("k", "a", "compared", intended=4)]
    got = judge("s", "corun", "d", sends, lambda s: Overlap(3, 9, 1))
    assert got.requests[1]["running_max"] == 9 and got.requests[1]["intended"] == 4
    assert got.row["claims_overlap"] is True
    assert judge("s", "corun", "g", sends[:1] + [sent("k", "again", "compared")], None).row["claims_overlap"] is False
