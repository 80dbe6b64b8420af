"""``packing``: which prompts share a prefill, and at which token count."""

import pytest

from corun_sglang.core import packing


@pytest.mark.parametrize("heads,kv_heads,least", [(32, 8, 17), (32, 4, 9), (16, 16, 65), (4, 2, 33)])
def test_the_shortest_packable_prompt_keeps_flashinfers_widest_query_tile(heads, kv_heads, least):
    group = heads // kv_heads
    assert packing.shortest(heads, kv_heads) == least
    assert least * group > packing.QUERY_TILE_ROWS >= (least - 1) * group


def test_packable_prompts_are_fresh_and_between_the_shortest_and_the_pack():
    assert packing.packable(17, 0, 1024, 17) and packing.packable(1024, 0, 1024, 17)
    assert not packing.packable(16, 0, 1024, 17)
    assert not packing.packable(1025, 0, 1024, 17)
    assert not packing.packable(100, 512, 1024, 17)  # a later chunk of a longer prompt


def test_a_prompt_joins_only_a_batch_of_packable_prompts_it_fits():
    assert packing.joins([(500, 0), (300, 0)], (224, 0), 1024, 17)
    assert not packing.joins([(500, 0), (300, 0)], (225, 0), 1024, 17)  # 1025 tokens
    assert not packing.joins([], (100, 0), 1024, 17)  # an empty batch takes any request, by SGLang's rules
    assert not packing.joins([(2000, 0)], (100, 0), 1024, 17)  # a long prompt runs alone
    assert not packing.joins([(100, 900)], (100, 0), 1024, 17)  # so does a later chunk
    assert not packing.joins([(100, 0)], (10, 0), 1024, 17)  # and a prompt shorter than the shortest


def _queue(*prompts, new=100):
    """Waiting prompts of these lengths, fresh, each reserving its prompt and ``new`` tokens."""
    return [(n, 0, n + new) for n in prompts]


def test_the_next_prefill_takes_the_queue_in_order_up_to_the_first_refusal():
    args = dict(pool_tokens=1000, max_running=256, pack=1024, least=17)
    assert packing.next_prefill(_queue(300, 200, 100), [], **dict(args, pool_tokens=800)) == (2, True)  # 900 > 800
    assert packing.next_prefill(_queue(300, 900, 10), [], **dict(args, pool_tokens=10_000)) == (1, False)
    assert packing.next_prefill(_queue(2000), [], **dict(args, pool_tokens=10_000)) == (1, False)
    assert packing.next_prefill([], [], **args) == (0, False)


def test_a_pack_is_cut_short_only_where_kv_refuses_a_prompt_that_would_join_it():
    full = dict(pool_tokens=100_000, max_running=256, pack=1024, least=17)
    assert not packing.cut_short(_queue(500, 300, 200), [], **full)  # the queue ends first
    assert not packing.cut_short(_queue(500, 300, 300), [], **full)  # the pack is full at 800 of 1024
    assert not packing.cut_short(_queue(2000, 40), [], **full)  # a long prompt runs alone
    assert not packing.cut_short(_queue(10, 40), [], **full)  # so does one below the shortest
    # a pool of 1,000 tokens with 300 held: 500 + 100 fits, then 300 + 100 does not
    tight = dict(full, pool_tokens=1000)
    assert packing.cut_short(_queue(500, 300), [300], **tight)
    assert not packing.cut_short(_queue(500, 300), [401], **tight)  # nothing is admitted at all
    assert not packing.cut_short(_queue(500, 600), [300], **tight)  # 1,100 tokens would not be one pack anyway
    # N taken: 3 running and the first prompt fill N = 4
    assert packing.cut_short(_queue(100, 100), [10, 10, 10], **dict(full, max_running=4))
    assert not packing.cut_short(_queue(100, 100), [10, 10], **dict(full, max_running=4))
    # a prompt with a prefix (a later chunk) neither packs nor joins
    assert not packing.cut_short([(100, 0, 200), (100, 50, 200)], [500], **dict(full, pool_tokens=600))
    assert not packing.cut_short([(100, 50, 200)], [], **full)


def test_a_pack_is_underfilled_where_the_queue_ends_below_the_fill_on_a_loaded_server():
    loaded = dict(pool_tokens=100_000, max_running=8, pack=1024, least=17)
    half = [10] * 4  # N/2 running
    assert packing.underfilled(_queue(300, 400), half, **loaded)  # 700 < 768: the queue ends first
    assert not packing.underfilled(_queue(300, 500), half, **loaded)  # 800 >= 768: filled enough
    assert not packing.underfilled(_queue(300, 400), [10] * 3, **loaded)  # fewer than N/2 run
    assert not packing.underfilled(_queue(2000), half, **loaded)  # a long prompt runs alone
    assert not packing.underfilled(_queue(10), half, **loaded)  # so does one below the shortest
    assert not packing.underfilled(_queue(300, 900), half, **loaded)  # a prompt that does not join waits
    assert not packing.underfilled([(100, 50, 200)], half, **loaded)  # a later chunk
    assert not packing.underfilled([], half, **loaded)
    # cut short is not underfilled: N is taken after the first prompt
    assert not packing.underfilled(_queue(100, 100), [10] * 7, **loaded)
    assert packing.waits(_queue(100, 100), [10] * 7, **loaded)  # but it waits all the same
    assert packing.waits(_queue(300, 400), half, **loaded)
    assert not packing.waits(_queue(300, 500), half, **loaded)
    assert packing.FILL * 1024 == 768


def test_the_pack_is_the_smallest_prefill_graph_and_the_count_every_packable_prefill_replays():
    assert packing.graph_counts([4, 64, 1024, 1280, 2048, 1280], 1024) == [1024, 1280, 2048]
    assert packing.graph_counts([4, 64], 512) == [512]
    assert [packing.replay_tokens(n, 1024, 17) for n in (16, 17, 500, 1024, 1025)] == [16, 1024, 1024, 1024, 1025]
    assert [packing.at_pack(n, 1024, 17) for n in (16, 17, 1024, 1025)] == [False, True, True, False]


def test_a_prefills_lm_head_runs_on_at_least_the_pack_rows():
    assert [packing.head_rows(n, 1024) for n in (1, 17, 1024, 3000)] == [1024, 1024, 1024, 3000]


def test_pack_sizes_that_cannot_be_served():
    assert packing.pack_problems(1024, 8192) == []
    assert packing.pack_problems(1024, None) == []
    assert "below 128" in packing.pack_problems(64, 8192)[0]
    assert "exceeds --chunked-prefill-size 512" in packing.pack_problems(1024, 512)[0]
