"""``tp_shards``: which rows and columns each of the K shards holds, and when a model cannot be split."""

import pytest

from corun_sglang.core import tp_shards


def test_a_rank_holds_the_contiguous_run_of_shards_sglang_loads_into_it():
    assert [list(tp_shards.shards_of_rank(4, 2, r)) for r in range(2)] == [[0, 1], [2, 3]]
    assert list(tp_shards.shards_of_rank(4, 1, 0)) == [0, 1, 2, 3]
    assert [list(tp_shards.shards_of_rank(2, 2, r)) for r in range(2)] == [[0], [1]]
    with pytest.raises(ValueError, match="divides"):
        tp_shards.local_shards(3, 2)


def test_column_order_groups_each_sub_projection_shard_by_shard():
    # a fused QKV of 4 q rows, 2 k rows, 2 v rows, as 2 shards: [q0 q1 k0 v0] then [q2 q3 k1 v1]
    order = tp_shards.column_order([4, 2, 2], 2)
    assert order == [0, 1, 4, 6, 2, 3, 5, 7]
    rows = [f"r{i}" for i in range(8)]
    regrouped = [rows[i] for i in order]
    assert [regrouped[i] for i in tp_shards.inverse(order)] == rows
    assert tp_shards.column_order([6], 1) == list(range(6))
    with pytest.raises(ValueError, match="does not split"):
        tp_shards.column_order([4, 3], 2)


def test_a_shard_of_a_fused_projection_is_what_a_tp_k_rank_of_it_holds():
    """Shard g of the regrouped TP-1 weight is rank g's weight at TP K: each sub-projection's g-th block."""
    sizes, k = [8, 4, 4], 4
    order = tp_shards.column_order(sizes, k)
    block = len(order) // k
    for g in range(k):
        rank_rows = [o + g * (s // k) + i for s, o in zip(sizes, (0, 8, 12)) for i in range(s // k)]
        assert order[g * block:(g + 1) * block] == rank_rows


def test_row_blocks_split_the_input_columns_evenly():
    assert tp_shards.row_blocks(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    with pytest.raises(ValueError):
        tp_shards.row_blocks(6, 4)


@pytest.mark.parametrize("k, tp, heads, kv, inter, vocab, found", [
    (2, 1, 16, 8, 1536, 49152, []),
    (2, 2, 32, 8, 12288, 151936, []),  # Qwen3-8B
    (4, 2, 32, 8, 12288, 151936, []),
    (2, 1, 9, 3, 1536, 49152, ["9 attention heads", "3 KV heads"]),  # SmolLM2-135M: no split
    (3, 2, 33, 9, 12288, 151872, ["must divide K"]),
    (1, 1, 32, 8, 12288, 151936, ["at least 2"]),
    (3, 1, 33, 9, 12288, 1001, ["padded vocabulary"]),
])
def test_problems_name_what_does_not_split(k, tp, heads, kv, inter, vocab, found):
    problems = tp_shards.problems(k, tp, heads, kv, inter, vocab)
    assert len(problems) == len(found) and all(f in p for f, p in zip(found, problems))


def test_padded_vocab_follows_sglangs_default_padding():
    from sglang.srt.layers.vocab_parallel_embedding import DEFAULT_VOCAB_PADDING_SIZE, pad_vocab_size

    for vocab in (1000, 49152, 151936, 151643):
        assert tp_shards.padded_vocab(vocab) == pad_vocab_size(vocab, DEFAULT_VOCAB_PADDING_SIZE)


def test_each_rank_runs_k_over_t_gemms_where_sglang_runs_one():
    assert tp_shards.extra_launches(2, 2, 36) == 0
    assert tp_shards.extra_launches(2, 1, 36) == 4 * 36 + 1
    assert tp_shards.extra_launches(4, 1, 36) == 3 * (4 * 36 + 1)
