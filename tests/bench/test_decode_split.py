"""``bench/decode_split.py``: a needle's attention bits among co-runners per KV split, and the split's cost."""

import json

import pytest
import torch


def test_a_fixed_split_keeps_the_needle_s_bits_and_a_batch_sized_one_does_not():
    from bench import decode_split as ds

    batches = [("short", 3, 4, 8), ("mixed", 3, 4, 200)]
    # float32 end to end, so that a moved sum shows (a bf16 output rounds most of them away)
    bits = ds.compare_bits(ds.reference, 4, 2, 16, [ds.OFF, ds.AUTO, 16], [5, 40, 150], batches,
                           dtype=torch.float32)
    assert bits["off"] == {"compared": 6, "divergent": 0, "output_divergent": 0, "cases": []}
    assert bits["16"]["divergent"] == 0  # chunks of 16 tokens, whatever runs beside the needle
    # the negative control: chunks sized by the batch move the needle's sums
    assert bits["auto"]["divergent"] == bits["auto"]["output_divergent"] > 0
    assert all(c["needle_kv"] > 1 for c in bits["auto"]["cases"])
    # an attention that also returns its log-sum-exp: a difference there alone counts as divergent
    def with_lse(q, k, v, slots, split):
        out = ds.reference(q, k, v, slots, split)
        return out, torch.full((len(slots),), float(len(slots) > 1))
    both = ds.compare_bits(with_lse, 4, 2, 16, [ds.OFF], [5], batches, dtype=torch.float32)["off"]
    assert (both["divergent"], both["output_divergent"]) == (2, 0)
    # a batch the library refuses to plan is left out of the count and listed with its error
    def refusing(q, k, v, slots, split):
        if len(slots) > 1 and max(len(s) for s in slots) > 100:
            raise RuntimeError("new batch size should not exceed padded batch size")
        return ds.reference(q, k, v, slots, split)
    refused = ds.compare_bits(refusing, 4, 2, 16, [16], [5], batches, dtype=torch.float32)["16"]
    assert refused["compared"] == 1 and [c["batch"] for c in refused["cases"]] == ["mixed"]


def test_the_reference_is_attention_and_its_chunks_only_move_rounding():
    from bench import decode_split as ds

    k, v = ds.pool(64, 2, 16, "cpu")
    q = torch.randn((1, 4, 16), dtype=torch.bfloat16)
    slots = [torch.arange(0, 64)]
    kk = k[:, 0].float().repeat_interleave(2, dim=1)
    vv = v[:, 0].float().repeat_interleave(2, dim=1)
    p = torch.softmax(torch.einsum("hd,lhd->hl", q[0].float(), kk) / 4.0, dim=1)
    want = torch.einsum("hl,lhd->hd", p, vv)
    for split in (ds.OFF, 7, 32):
        assert torch.allclose(ds.reference(q, k, v, slots, split)[0].float(), want, atol=2e-2)


def test_chunks_graph_grid_and_the_split_options():
    from bench import decode_split as ds

    assert ds.parse_splits("off, auto,256") == [0, -1, 256]
    with pytest.raises(ValueError):
        ds.parse_splits("-5")
    assert [ds.split_name(s) for s in (0, -1, 512)] == ["off", "auto", "512"]
    assert ds.parse_batches("short:7:16:64") == [("short", 7, 16, 64)]
    assert (ds.chunks(544, 0), ds.chunks(544, 256), ds.chunks(512, 256), ds.chunks(1, 256)) == (1, 3, 2, 1)
    # a 256-slot graph of a Qwen3-8B shape (group 4, 8 KV heads) on 132 SMs: 64 query tiles + 255
    assert ds.graph_grid(256, 4, 132, 8) == 319
    assert ds.graph_grid(8, 4, 132, 8) == 33  # two blocks per SM per KV head


def test_main_writes_bits_timing_and_capacity_and_fa3_s_split_counts(tmp_path):
    from bench import decode_split as ds

    def run(*options):
        out = tmp_path / "split.json"
        assert ds.main(["--shape", "qwen3-tiny", "--device", "cpu", "--needles", "5,70", "--batches",
                        "mixed:2:4:100", "--loads", "2", "--kv-lens", "40", "--out", str(out), *options]) == 0
        return json.loads(out.read_text())

    result = run("--splits", "off,auto,32", "--graphs", "4")
    assert set(result["bits"]) == {"off", "auto", "32"} and result["bits"]["32"]["divergent"] == 0
    assert [(r["split"], r["chunks"]) for r in result["timing"]] == [("off", 2), ("auto", 2), ("32", 4)]
    assert all(r["ms"] > 0 and set(r["fits"]) == {"4"} for r in result["timing"])
    # FA3's split is a count per request: no chunk size, no grid to fit
    fa3 = run("--kernel", "fa3", "--splits", "off,4")
    assert fa3["kernel"] == "fa3" and set(fa3["bits"]) == {"off", "4"}
    assert all("chunks" not in r and "fits" not in r for r in fa3["timing"])


def test_a_plan_the_library_refuses_is_recorded_and_the_rest_still_run():
    from bench import decode_split as ds

    class Refusing(ds._Eager):
        def plan(self, slots, split):
            if split == 8:
                raise RuntimeError("new batch size should not exceed padded batch size")
            super().plan(slots, split)

    rows = ds.time_attend(Refusing(), 4, 2, 16, [2], [20], [ds.OFF, 8, 16], "cpu", iters=1, trials=1)
    assert [r["split"] for r in rows] == ["off", "8", "16"]
    assert rows[1]["ms"] is None and "padded batch size" in rows[1]["error"]
    assert rows[0]["ms"] > 0 and rows[2]["ms"] > 0
