"""``packing``: which prompts share a prefill, at which token count, and the record that allows it."""

import json
from pathlib import Path

import pytest

from corun_sglang import packing


@pytest.mark.parametrize("heads,kv_heads,least", [(32, 8, 17), (32, 4, 9), (16, 16, 65), (4, 2, 33)])
def test_the_shortest_packable_prompt_keeps_flashinfers_widest_query_tile(heads, kv_heads, least):
    group = heads // kv_heads
    assert packing.shortest(heads, kv_heads) == least
    assert least * group > packing.QUERY_TILE_ROWS >= (least - 1) * group


def test_on_fa3_every_prompt_packs_and_only_sglangs_ragged_fa3_path_is_fa3():
    assert packing.shortest(32, 8, packing.FA3) == 1 and packing.shortest(32, 8, packing.FA2) == 17
    assert packing.ragged_kernel(fa3_here=True, paged=False, sm100=False) == packing.FA3
    for paged, sm100, here in [(True, False, True), (False, True, True), (False, False, False)]:
        assert packing.ragged_kernel(fa3_here=here, paged=paged, sm100=sm100) == packing.FA2


def test_the_paged_path_and_a_machine_without_cuda_get_the_fa2_rule():
    import torch

    assert packing.prefill_kernel(128, torch.bfloat16, paged=True) == packing.FA2
    if not torch.cuda.is_available():
        assert packing.prefill_kernel(128, torch.bfloat16, paged=False) == packing.FA2


def test_a_candidate_server_logs_what_it_packs_for_the_verifier():
    text = "noise\n[2026-12-03] WARNING " + packing.candidate_line(1024, 1, packing.FA3) + "\nmore"
    assert packing.candidate_from_log(text) == {"pack": 1024, "shortest": 1, "kernel": "fa3"}
    with pytest.raises(packing.PackingError, match="--corun-prefill-pack-candidate"):
        packing.candidate_from_log("no such line")


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


def test_a_record_round_trips_and_a_bad_one_names_the_fix(tmp_path):
    record = packing.Record(pack=1024, shortest=17, environment={"gpu": "NVIDIA H200"}, needles={1007: 3, 17: 4})
    path = tmp_path / "pack.json"
    path.write_text(json.dumps(record.to_json()))
    assert packing.load(path) == packing.Record(1024, 17, {"gpu": "NVIDIA H200"}, {17: 4, 1007: 3}, str(path))
    assert packing.load(path).to_json() == record.to_json()
    with pytest.raises(packing.PackingError, match="cannot read it.*verify-prefill-pack"):
        packing.load(tmp_path / "missing.json")
    path.write_text('{"pack": 1024}')
    with pytest.raises(packing.PackingError, match="not a prefill pack record"):
        packing.load(path)


def test_a_record_that_would_not_load_is_not_written():
    with pytest.raises(packing.PackingError, match="pack 64: input should be greater than or equal to 128"):
        packing.Record(pack=64, shortest=17, environment={}).to_json()


GOOD = {"pack": 1024, "shortest": 17, "environment": {"gpu": "NVIDIA H200", "tp_size": 1}, "needles": {"17": 4}}


@pytest.mark.parametrize("change, refused", [
    ({"pack": "1024"}, 'pack "1024": input should be a valid integer'),
    ({"pack": 1024.0}, "pack 1024.0: input should be a valid integer"),
    ({"pack": False}, "pack false: input should be a valid integer"),
    ({"pack": 64}, "pack 64: input should be greater than or equal to 128"),
    ({"pack": 1 << 20}, "pack 1048576: input should be less than or equal to 65536"),
    ({"shortest": 0}, "shortest 0: input should be greater than or equal to 1"),
    ({"shortest": 2048}, "shortest 2048: the shortest packable prompt must fit the pack of 1024 tokens"),
    ({"needles": {"17": 0}}, "needles.17 0: input should be greater than 0"),
    ({"needles": {"2000": 4}}, 'needles {"2000": 4}: every needle must fit the pack of 1024 tokens'),
    ({"needles": [17, 4]}, "needles [17, 4]: input should be an object"),
    ({"environment": {"gpu": ["H200"]}}, 'environment.gpu ["H200"]: an environment field holds'),
    ({"kernel": "fa2"}, "kernel: not a field of this record"),
])
def test_a_record_with_a_wrong_field_is_refused_naming_the_file_and_the_field(tmp_path, change, refused):
    path = tmp_path / "pack.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(packing.PackingError) as caught:
        packing.load(path)
    assert str(caught.value).startswith(f"--corun-prefill-pack {path}: not a prefill pack record (")
    assert refused in str(caught.value) and str(caught.value).endswith(
        "Fix: write it with `corun-sglang verify-prefill-pack` on this machine, or drop --corun-prefill-pack")


def test_the_committed_records_still_load():
    found = list(Path(__file__).parents[1].glob("docs/results/pack/pack-*.json"))
    assert found and all(packing.load(p).pack >= packing.MIN_PACK for p in found)