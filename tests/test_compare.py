"""``compare``: the first step where two generations differ, bit for bit."""

import math

from corun_sglang.compare import PROMPT, Generation, digest, first_divergence


def g(tokens, logprobs):
    return Generation.of(tokens, logprobs)


def test_identical_generations_do_not_diverge():
    assert first_divergence(g([1, 2, 3], [-0.1, -0.2, -0.3]), g([1, 2, 3], [-0.1, -0.2, -0.3])) is None


def test_first_token_or_logprob_difference_is_reported():
    a = g([1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4])
    assert first_divergence(a, g([1, 2, 9, 4], [-0.1, -0.2, -0.3, -0.4])) == 2
    assert first_divergence(a, g([1, 2, 3, 9], [-0.1, -0.2000001, -0.3, -0.4])) == 1


def test_bits_count_not_values():
    assert first_divergence(g([1], [0.0]), g([1], [-0.0])) == 0


def test_length_difference_is_a_divergence():
    assert first_divergence(g([1, 2], [-1.0, -1.0]), g([1], [-1.0])) == 1


def test_a_generate_reply_reads_as_its_tokens_and_logprobs():
    reply = {"meta_info": {"output_token_logprobs": [[-0.5, 11, None], [-0.0, 12, None]]}}
    got = Generation.of_reply(reply)
    assert got.tokens == (11, 12) and got.logprobs == (-0.5, -0.0)


def test_prompt_logprobs_are_compared_before_the_output():
    a = Generation.of([1, 2], [-1.0, -2.0], [None, -0.5, -0.25])
    assert first_divergence(a, Generation.of([1, 2], [-1.0, -2.0], [None, -0.5, -0.25])) is None
    assert first_divergence(a, Generation.of([1, 2], [-1.0, -2.0], [None, -0.5, -0.2500001])) == PROMPT
    assert first_divergence(a, Generation.of([1, 2], [-1.0, -2.0])) == PROMPT  # asked on one side only


def test_a_reply_reads_its_prompt_logprobs_finish_and_cache_hits():
    reply = {"meta_info": {"output_token_logprobs": [[-0.5, 11, None]], "finish_reason": {"type": "stop", "matched": 2},
                           "input_token_logprobs": [[None, 5, None], [-3.5, 6, None]], "cached_tokens": 7}}
    got = Generation.of_reply(reply)
    assert got.tokens == (11,) and got.finish == "stop" and got.cached_tokens == 7
    assert math.isnan(got.prompt_logprobs[0]) and got.prompt_logprobs[1] == -3.5


def test_digests_are_equal_exactly_when_generations_agree():
    base = Generation.of([1, 2], [-1.0, -2.0], [None, -0.5])
    same = Generation.of([1, 2], [-1.0, -2.0], [None, -0.5], finish="length", cached_tokens=3)
    assert first_divergence(base, same) is None and digest(base) == digest(same)
    others = [Generation.of([1, 3], [-1.0, -2.0], [None, -0.5]), Generation.of([1, 2], [-1.0, -0.0 - 2.0000001], [None, -0.5]),
              Generation.of([1, 2], [-1.0, -2.0], [None, 0.5]), Generation.of([1, 2], [-1.0, -2.0]),
              Generation.of([1, 2, 2], [-1.0, -2.0, -2.0], [None, -0.5]), Generation.of([1, 2], [-1.0, -2.0], [-0.5])]
    for other in others:
        assert first_divergence(base, other) is not None
        assert digest(other) != digest(base)
    assert digest(Generation.of([1], [0.0])) != digest(Generation.of([1], [-0.0]))
    assert len(digest(base)) == 16
