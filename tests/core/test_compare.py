"""``compare``: the first step where two generations differ, bit for bit."""

import math

from corun_sglang.core.compare import PROMPT, Generation, digest, first_difference, first_divergence


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


def test_logprob_sequences_differ_at_their_first_unequal_bits_or_their_shorter_length():
    nan = float("nan")
    assert first_difference([-0.5, nan, -1.0], [-0.5, nan, -1.0]) is None  # the same NaN is the same bits
    assert first_difference([-0.5, 0.0, -1.0], [-0.5, -0.0, -1.0]) == 1  # equal values, other bits
    assert first_difference([-0.5, -1.0], [-0.5, -1.0 + 2.0 ** -40]) == 1
    assert first_difference([-0.5, -1.0], [-0.5]) == 1 and first_difference([], []) is None


def test_a_generate_reply_reads_as_its_tokens_and_logprobs():
    reply = {"meta_info": {"output_token_logprobs": [[-0.5, 11, None], [-0.0, 12, None]]}}
    got = Generation.of_reply(reply)
    assert got.tokens == (11, 12) and got.logprobs == (-0.5, -0.0)


def test_a_logprob_the_server_wrote_as_null_reads_as_nan_and_compares():
    import orjson  # what SGLang's /generate replies are written with: -inf and NaN become null

    def served(chosen: float, top: float) -> Generation:
        meta = {"output_token_logprobs": [[-0.5, 11, None], [chosen, 12, None]],
                "output_top_logprobs": [[[-0.5, 11, None], [top, 3, None]], [[chosen, 12, None]]]}
        return Generation.of_reply(orjson.loads(orjson.dumps({"meta_info": meta})))

    got = served(float("-inf"), float("-inf"))
    assert math.isnan(got.logprobs[1]) and math.isnan(got.top_logprobs[0][1][0])
    assert got.nonfinite_logprobs == 1 and served(-30.0, float("-inf")).nonfinite_logprobs == 0  # top-k not counted
    assert first_divergence(got, served(float("nan"), float("-inf"))) is None  # the same null, the same bits
    assert digest(got) == digest(served(float("-inf"), float("nan")))
    assert first_divergence(got, served(-30.0, float("-inf"))) == 1
    assert first_divergence(got, served(float("-inf"), -30.0)) == 0


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


def test_top_k_and_chosen_token_logprobs_are_compared_in_order_and_bits():
    top = [[[-0.5, 11, "a"], [-0.5, 12, "b"], [-1.0, 3, "c"]], [[-0.25, 4, None]]]
    a = Generation.of([11, 4], [-0.5, -0.25], top_logprobs=top)
    assert first_divergence(a, Generation.of([11, 4], [-0.5, -0.25], top_logprobs=top)) is None
    ties_swapped = [[[-0.5, 12, "b"], [-0.5, 11, "a"], [-1.0, 3, "c"]], top[1]]
    assert first_divergence(a, Generation.of([11, 4], [-0.5, -0.25], top_logprobs=ties_swapped)) == 0
    assert first_divergence(a, Generation.of([11, 4], [-0.5, -0.25], top_logprobs=[top[0], [[-0.0 - 0.25, 4, None]]])) is None
    assert first_divergence(a, Generation.of([11, 4], [-0.5, -0.25], top_logprobs=[top[0], [[-0.2500001, 4, None]]])) == 1
    assert first_divergence(a, Generation.of([11, 4], [-0.5, -0.25], top_logprobs=top[:1])) == 1
    chosen = Generation.of([11, 4], [-0.5, -0.25], token_ids_logprobs=[[[-2.0, 7, None]], [[-3.0, 7, None]]])
    other = Generation.of([11, 4], [-0.5, -0.25], token_ids_logprobs=[[[-2.0, 7, None]], [[-3.5, 7, None]]])
    assert first_divergence(chosen, other) == 1 and digest(chosen) != digest(other)
    for x, y in ((a, Generation.of([11, 4], [-0.5, -0.25], top_logprobs=ties_swapped)), (a, g([11, 4], [-0.5, -0.25]))):
        assert digest(x) != digest(y)


def test_prompt_top_k_logprobs_diverge_at_the_prompt():
    prompt_top = [None, [[-1.0, 5, None], [-1.0, 6, None]]]
    a = Generation.of([1], [-1.0], [None, -1.0], prompt_top_logprobs=prompt_top)
    b = Generation.of([1], [-1.0], [None, -1.0], prompt_top_logprobs=[None, [[-1.0, 6, None], [-1.0, 5, None]]])
    assert first_divergence(a, b) == PROMPT and a.prompt_top_logprobs[0] == ()


def test_a_reply_reads_its_top_k_and_chosen_token_logprobs():
    reply = {"meta_info": {"output_token_logprobs": [[-0.5, 11, None]],
                           "output_top_logprobs": [[[-0.5, 11, None], [-0.75, 2, None]]],
                           "input_top_logprobs": [None, [[-1.5, 9, None]]],
                           "output_token_ids_logprobs": [[[-4.0, 3, None]]]}}
    got = Generation.of_reply(reply)
    assert got.top_logprobs == (((-0.5, 11), (-0.75, 2)),) and got.prompt_top_logprobs == ((), ((-1.5, 9),))
    assert got.token_ids_logprobs == (((-4.0, 3),),)


def _digest_before_top_k(g):
    """``digest`` as it was before generations carried top-k logprobs (committed digests use it)."""
    import hashlib
    import struct

    h = hashlib.sha256()
    for part, fmt in ((g.tokens, "<q"), (g.logprobs, "<d"), (g.prompt_logprobs, "<d")):
        h.update(struct.pack("<q", len(part)))
        for x in part:
            h.update(struct.pack(fmt, x))
    return h.hexdigest()[:16]


def test_a_digest_without_top_k_is_the_one_from_before_top_k_existed():
    for gen in (Generation.of([1, 2], [-1.0, -2.0], [None, -0.5]), g([7], [-0.0])):
        assert digest(gen) == _digest_before_top_k(gen)
