"""``tools.prefix_hits``: the hits the prefix-cache rules can give a reply, and the one they give a scenario."""

import pytest

from corun_sglang.core import prefix_cache as pc
from corun_sglang.tools.prefix_hits import allowed, cap, predicted

G = pc.GRID


def test_the_cap_is_all_but_the_last_token_or_where_prompt_logprobs_start():
    assert cap(2600) == 2599 and cap(2600, -1) == 2599 and cap(2600, 2500) == 2500 and cap(2600, 0) == 0
    assert cap(1) == 0 and cap(0) == 0


@pytest.mark.parametrize("prompt_len, start, hits", [
    (700, None, {0, 699}),  # no grid chunk: a stored twin's tail, or nothing
    (1, None, {0}),
    (G + 1, None, {0, G}),  # L - 1 is on the grid: no tail to add
    (2600, None, {0, G, 2 * G, 2599}),
    (2600, 2500, {0, G, 2 * G}),  # prompt logprobs from 2500: grid chunks up to there, no tail
    (2600, 1500, {0, G}),
    (2600, 0, {0}),
])
def test_allowed_hits_are_grid_multiples_up_to_the_frontier_and_cap_or_all_but_the_last(prompt_len, start, hits):
    assert allowed(prompt_len, start) == hits


def test_a_prediction_follows_the_cache_the_prompt_meets():
    system, question = 2500, 150
    needle = system + question
    assert predicted(needle, 0, 0) == 0  # an empty cache
    assert predicted(needle, system, system) == 2 * G  # after the system prompt alone: its grid chunks
    assert predicted(needle, needle, needle) == needle - 1  # after itself: the grid chunks and its stored tail
    assert predicted(needle, needle, needle, logprob_start_len=system) == 2 * G  # the cap keeps the tail out
    assert predicted(needle, 2600, G + 300) == G  # another prompt sharing 1,324 tokens: the first chunk
    assert predicted(needle, needle + 1, needle) == 2 * G  # a longer twin: its tail is another prompt's
    assert predicted(needle, 900, 900) == 0  # a short prompt leaves no grid chunk
    for held, shared, start in [(0, 0, None), (system, system, None), (needle, needle, None), (needle, needle, 0),
                                (2600, G + 300, 1500), (needle, needle - 1, None)]:
        assert predicted(needle, held, shared, start) in allowed(needle, start)
