"""``prefix_cache``: chunk boundaries that do not depend on a hit, the hits that keep them, the tail store."""

import pytest

from corun_sglang.core import prefix_cache as pc

G = 8  # a small grid: the rules are the same at 1,024


@pytest.mark.parametrize("prompt_len, ends", [
    (1, [1]),
    (2, [1, 2]),
    (8, [7, 8]),
    (9, [8, 9]),
    (10, [8, 9, 10]),
    (17, [8, 16, 17]),
    (20, [8, 16, 19, 20]),
])
def test_a_prompt_prefills_on_the_grid_then_to_its_second_to_last_token_then_its_last(prompt_len, ends):
    assert pc.boundaries(prompt_len, G) == ends
    assert pc.frontier(prompt_len, G) == max((e for e in ends if e % G == 0 and e < prompt_len), default=0)


def _chunks(prompt_len, start):
    """The chunks a prompt computes from a hit of ``start`` tokens: (begin, end) each."""
    out, done = [], start
    while (n := pc.next_chunk(prompt_len, done, G)) > 0:
        out.append((done, done + n))
        done += n
    return out


@pytest.mark.parametrize("prompt_len", [1, 2, 7, 8, 9, 15, 16, 17, 25, 40])
def test_a_hit_the_rules_allow_leaves_exactly_the_cold_runs_remaining_chunks(prompt_len):
    cold = _chunks(prompt_len, 0)
    assert cold[-1][1] == prompt_len and all(a < b for a, b in cold)
    allowed = {pc.grid_hit(m, prompt_len, None, G) for m in range(prompt_len + 1)}
    if prompt_len >= 2:
        allowed.add(prompt_len - 1)  # a stored tail
    for hit in allowed:
        assert _chunks(prompt_len, hit) == [c for c in cold if c[0] >= hit], hit


def test_grid_hits_round_down_and_respect_the_frontier_and_the_logprob_cap():
    assert pc.grid_hit(13, 40, None, G) == 8
    assert pc.grid_hit(39, 40, None, G) == 32  # never past the frontier (the tail chunk is not the tree's)
    assert pc.grid_hit(40, 41, None, G) == 40
    assert pc.grid_hit(39, 40, 17, G) == 16  # prompt logprobs asked from 17: nothing past it
    assert pc.grid_hit(39, 40, 0, G) == 0
    assert pc.grid_hit(5, 40, None, G) == 0


def test_a_tail_serves_a_hit_that_reaches_the_frontier_when_the_cap_allows_it():
    assert pc.tail_usable(20, 16, None, G) and pc.tail_usable(20, 16, 19, G)
    assert not pc.tail_usable(20, 8, None, G)  # the tree hit falls short of the frontier
    assert not pc.tail_usable(20, 16, 18, G)  # prompt logprobs asked for inside the tail
    assert not pc.tail_usable(17, 16, None, G)  # the tail is empty: 17 tokens end on the grid plus one
    assert pc.tail_usable(5, 0, None, G)


def test_the_tail_key_is_the_first_tokens_but_the_last_and_the_cache_namespace():
    a = pc.tail_key([1, 2, 3, 4], 4)
    assert a == pc.tail_key([1, 2, 3, 9], 4)  # the last token is computed by each request
    assert a != pc.tail_key([1, 2, 4, 4], 4) and a != pc.tail_key([1, 2, 3, 4, 5], 5)
    assert a != pc.tail_key([1, 2, 3, 4], 4, extra_key="lora-a")


def test_the_store_counts_users_and_evicts_unused_tails_least_recently_used_first():
    store = pc.TailStore()
    assert store.add(pc.Tail("a", "slots-a", 0, 5)) and store.add(pc.Tail("b", "slots-b", 8, 11))
    assert not store.add(pc.Tail("a", "other", 0, 5))  # one tail a key: the second keeps its own slots
    assert store.used_tokens() == 8 and store.evictable_tokens() == 0 and store.evict(100) == []
    store.release("b")
    store.release("a")
    store.acquire("a")
    store.release("a")  # a used more recently than b
    assert store.evictable_tokens() == 8
    assert [t.key for t in store.evict(2)] == ["b"] and len(store) == 1
    store.acquire("a")
    assert store.evict(100) == [] and store.used_tokens() == 5
    store.release("a")
    with pytest.raises(ValueError, match="released more often"):
        store.release("a")
    assert [t.key for t in store.clear()] == ["a"]
    assert len(store) == 0 and store.get("a") is None and store.evictable_tokens() == 0
    assert store.add(pc.Tail("a", "new-slots", 0, 5))  # a key stored again after the clear


def test_admission_newly_holds_only_what_no_running_request_holds():
    path = [(8, 0), (8, 2), (8, 0)]  # (tokens, locks) of the nodes from the hit back to the root
    assert pc.newly_shared(path, None) == 16
    assert pc.newly_shared(path, pc.Tail("t", None, 24, 30, users=0)) == 22
    assert pc.newly_shared(path, pc.Tail("t", None, 24, 30, users=1)) == 16
