"""``compare``: the first step where two generations differ, bit for bit."""

from corun_sglang.compare import Generation, first_divergence


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
