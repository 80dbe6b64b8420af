"""``policy``: chunk budget and full-sequence admission arithmetic."""

import pytest

from corun_sglang.core import policy


def test_chunk_budget_is_the_chunk_size_whatever_else():
    assert policy.chunk_budget(4096) == 4096
    assert policy.chunk_budget(1) == 1


@pytest.mark.parametrize(
    "prompt,new,page,expected",
    [(100, 50, 1, 151), (100, 50, 16, 112 + 50 + 16), (16, 0, 16, 32), (1, 1, 64, 64 + 1 + 64)],
)
def test_reserved_tokens_cover_the_whole_sequence_in_pages(prompt, new, page, expected):
    assert policy.reserved_tokens(prompt, new, page) == expected
    assert policy.reserved_tokens(prompt, new, page) >= prompt + new


def test_admits_exactly_when_every_whole_sequence_fits():
    running = [300, 200]
    assert policy.admits(500, running, pool_tokens=1000, max_running=8)
    assert not policy.admits(501, running, pool_tokens=1000, max_running=8)
    assert policy.admits(1000, [], pool_tokens=1000, max_running=8)


def test_admits_at_most_n_running_requests():
    assert policy.admits(1, [1] * 7, pool_tokens=10**6, max_running=8)
    assert not policy.admits(1, [1] * 8, pool_tokens=10**6, max_running=8)


def test_admission_never_overcommits_over_any_arrival_sequence():
    """Whatever arrives and finishes, admitted reservations never exceed the pool."""
    import random

    rnd = random.Random(0)
    pool, running = 5000, []
    for _ in range(2000):
        if running and rnd.random() < 0.4:
            running.pop(rnd.randrange(len(running)))
        cand = policy.reserved_tokens(rnd.randint(1, 2000), rnd.randint(1, 500), 16)
        if policy.admits(cand, running, pool, max_running=16):
            running.append(cand)
        assert sum(running) <= pool and len(running) <= 16
