"""``bench/prefill_shapes.py``: packings at fixed token counts and what a prefill's bits depend on."""

from pathlib import Path

import pytest

from bench import prefill_shapes
from corun_sglang.probes import harness


@pytest.mark.parametrize("total", [256, 1024, 2048])
def test_prefill_shape_packings_fill_the_total_with_the_needle_once_in_each_place(total):
    plans = prefill_shapes.packings(64, total, seed=total)
    for name, lengths in plans:
        assert lengths.count(-1) == 1 and all(n > 0 for n in lengths if n != -1)
        assert 64 + sum(n for n in lengths if n != -1) == total, name
    places = {name.split("-")[1] for name, _ in plans}
    assert {"front", "back"} <= places
    assert plans == prefill_shapes.packings(64, total, seed=total)


@pytest.mark.parametrize("needle_len,total", [(8, 256), (8, 1024), (8, 4096), (64, 4096)])
def test_prefill_shape_packings_stay_one_batch_and_let_a_short_needle_vary_the_mean_prompt(needle_len, total):
    plans = dict(prefill_shapes.packings(needle_len, total, seed=total))
    assert max(len(lengths) for lengths in plans.values()) <= prefill_shapes.MAX_REQUESTS
    equal, long = plans["equal-front"], plans["long-front"]
    assert len(long) == 2 and total / len(equal) < total / len(long)
    if total // needle_len < prefill_shapes.MAX_REQUESTS:  # the needle's length, repeated
        assert set(equal) == {-1, needle_len}


@pytest.mark.parametrize("needle_len,total", [(100, 1024), (300, 1024), (700, 2048), (8, 256)])
def test_tiny_packings_lower_the_mean_prompt_below_any_needles_and_leave_the_others_alone(needle_len, total):
    plain = prefill_shapes.packings(needle_len, total, seed=total)
    plans = prefill_shapes.packings(needle_len, total, seed=total, tiny=4)
    assert plans[:len(plain)] == plain
    tiny = dict(plans[len(plain):])
    assert set(tiny) == {"tiny-front", "tiny-back"}
    for lengths in tiny.values():
        others = [n for n in lengths if n != -1]
        assert lengths.count(-1) == 1 and needle_len + sum(others) == total
        assert len(lengths) <= prefill_shapes.TINY_REQUESTS and others.count(4) >= len(others) - 1
        assert total / len(lengths) < min(total / len(p) for _, p in plain)
    assert tiny["tiny-front"][0] == -1 and tiny["tiny-back"][-1] == -1


def test_two_results_are_the_same_only_with_the_same_token_and_logprob_bits():
    alone = {"prompt_logprobs": [None, -1.5, -0.25], "token": 7, "token_logprob": -0.5}
    assert prefill_shapes.same(alone, dict(alone, prompt_logprobs=[None, -1.5, -0.25]))
    assert not prefill_shapes.same(alone, dict(alone, prompt_logprobs=[None, -1.5, -0.25 - 2.0 ** -40]))
    assert not prefill_shapes.same(dict(alone, token_logprob=0.0), dict(alone, token_logprob=-0.0))  # equal values
    assert not prefill_shapes.same(alone, dict(alone, token=8))


def _prefill(log: Path, bits):
    """A ``/generate`` answer (for ``json_server``) that logs one prefill batch per call and gives each prompt
    the logprobs ``bits(prompt, total tokens of the call, place in the call)``."""

    def answer(path, body):
        prompts = body["input_ids"]
        total = sum(len(p) for p in prompts)
        with open(log, "a") as f:
            f.write(f"Prefill batch, #new-seq: {len(prompts)}, #new-token: {total}, #cached-token: 0, \n")
        return 200, [{"meta_info": {
            "input_token_logprobs": [[None, p[0], None]] + [[bits(p, total, i), t, None] for t in p[1:]],
            "output_token_logprobs": [[bits(p, total, i), 7, None]]}} for i, p in enumerate(prompts)]

    return answer


@pytest.mark.parametrize("case", ["blind", "by-total", "by-place"])
def test_prefill_shapes_tells_a_prefill_blind_to_its_packing_from_one_that_is_not(tmp_path, case, monkeypatch,
                                                                                  json_server):
    monkeypatch.setattr(harness.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("")
    bits = {"blind": lambda p, total, i: -1.0,
            "by-total": lambda p, total, i: -1.0 - (total >= 256),
            "by-place": lambda p, total, i: -1.0 - (i > 0)}[case]
    out = prefill_shapes.study(json_server(_prefill(log, bits)).url, log, 64, [256, 1024], seed=0)
    assert out["alone_batches"] == [(1, 64)] and out["alone_seconds"] > 0
    for total in ("256", "1024"):
        t = out["totals"][total]
        assert t["counted"] == len(t["packings"]) == 6
        assert all(p["one_batch"] for p in t["packings"])
        assert t["distinct"] == (1 if case != "by-place" else 2)
        assert t["equal_to_alone"] == (case == "blind")
    digests = {p["digest"] for t in out["totals"].values() for p in t["packings"]}
    assert (out["alone_digest"] in digests) == (case != "by-total")



def test_an_arm_outside_the_known_ones_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        prefill_shapes.main(["--arms", "STD,Fast"])
    assert stop.value.code == 2 and "unknown arms ['Fast']" in capsys.readouterr().err
