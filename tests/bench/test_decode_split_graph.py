"""``bench/decode_split_graph.py``: what a CUDA graph needs for a fixed KV split."""

import pytest


def _plan(**fields):
    from corun_sglang.core.decode_grid import PLAN_FIELDS

    base = dict(padded_batch_size=10, total_num_rows=4, total_num_rows_offset=0, cta_tile_q=16,
                request_indices_offset=16, qo_tile_indices_offset=64, kv_tile_indices_offset=112,
                merge_indptr_offset=0, o_indptr_offset=160, kv_chunk_size_ptr_offset=192, v_offset=0, s_offset=0,
                block_valid_mask_offset=0, enable_cuda_graph=1, split_kv=0)
    base.update(fields)
    return [base[f] for f in PLAN_FIELDS]


def test_a_graph_captured_with_split_kv_gets_one_chunk_merges_after_a_plan_that_did_not_split():
    from bench import decode_split_graph as dg

    captured = _plan(split_kv=1, merge_indptr_offset=208, block_valid_mask_offset=240)
    fix = dg.merge_fix(captured, _plan(), rows=4)
    assert fix == {"merge_indptr": (208, "int32", [0, 1, 2, 3, 4]),
                   "block_valid_mask": (240, "bool", [1, 1, 1, 1, 0, 0, 0, 0, 0, 0])}
    # nothing to write where the replay split itself, or the graph merges nothing
    assert dg.merge_fix(captured, _plan(split_kv=1, merge_indptr_offset=208), rows=4) == {}
    assert dg.merge_fix(_plan(), _plan(), rows=4) == {}
    # a replay plan laid out otherwise than the captured one: refused, not patched
    with pytest.raises(ValueError, match="request_indices_offset"):
        dg.merge_fix(captured, _plan(request_indices_offset=32), rows=4)


def test_the_grid_asked_for_holds_every_row_s_chunks():
    from bench import decode_split_graph as dg

    # 128 rows whose longest KV (4,096 tokens) splits into 8 chunks of 512
    assert dg.grid_for(128, 512, [37, 4000], [("mixed", 63, 16, 4096)]) == 1024
    assert dg.grid_for(128, 2048, [37], []) == 512  # at least a full graph of rows four splits long


def test_the_graph_summary_says_each_comparison_the_full_plan_and_failures():
    from bench import decode_split_graph as dg

    trials = [{"slots": 128, "split": "512", "grid": 1024,
               "fixed": {"compared": 10, "divergent": 0}, "fixed_graph_alone": {"compared": 10, "divergent": 0},
               "unfixed": {"compared": 10, "divergent": 4},
               "full_4x_split": {"FlashInfer's grid": "refused: ...", "grid 1024": "planned"}},
              {"slots": 256, "split": "off", "error": "CUDA error"}]
    assert dg.graph_summary(trials) == {
        "128 512": {"fixed": "0 / 10", "fixed_graph_alone": "0 / 10", "unfixed": "4 / 10",
                    "full_4x_split": {"FlashInfer's grid": "refused: ...", "grid 1024": "planned"}},
        "256 off": {"error": "CUDA error"}}
