"""``bench/gemm_tiers.py``: the row counts whose GEMM rows match the full batch."""

import json

import pytest
import torch


def test_gemm_tiers_keeps_the_sizes_whose_rows_match_the_full_batch(tmp_path):
    from bench import gemm_tiers

    # a GEMM whose rows change below 8 rows (as a library switching kernels would): only 8 and up match
    def switching(x, w):
        return torch.nn.functional.linear(x, w) + (1e-2 if x.shape[0] < 8 else 0.0)

    assert gemm_tiers.equal_sizes(64, 32, 16, [1, 4, 8, 12, 16], 2, "cpu", linear=switching) == [8, 12, 16]
    assert gemm_tiers.layers("qwen3-8b") == {
        "qkv": (4096, 6144), "o": (4096, 4096), "lm_head": (4096, 151936), "gate_up": (4096, 24576),
        "down": (12288, 4096)}
    assert set(gemm_tiers.layers("qwen3-30b-a3b", tp_size=2)) == {"qkv", "o", "lm_head"}  # experts: not GEMMs here
    out = tmp_path / "tiers.json"
    argv = ["--shape", "qwen3-small", "--layers", "o", "--n", "16", "--sizes", "1,4,32", "--trials", "1",
            "--device", "cpu", "--out", str(out)]
    assert gemm_tiers.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["sizes"] == [1, 4, 16] and 16 in result["layers"]["o"]["equal"]  # N itself always matches
    assert result["equal_on_every_layer"] == result["layers"]["o"]["equal"]
    assert "step_gemm_ms" not in result
    assert gemm_tiers.main([*argv, "--time"]) == 0
    timed = json.loads(out.read_text())
    layers = gemm_tiers.synthetic.hf_config("qwen3-small")["num_hidden_layers"]
    assert {int(m) for m in timed["layers"]["o"]["ms"]} == {1, 4, 16}
    assert timed["step_gemm_ms"]["16"] == pytest.approx(timed["layers"]["o"]["ms"]["16"] * layers)
    assert gemm_tiers.step_gemm_ms({"o": {8: 1.0, 16: 2.0}, "lm_head": {8: 5.0, 16: 6.0}}, 3) == {8: 8.0, 16: 12.0}
    before = torch.backends.cuda.preferred_blas_library()
    try:
        assert gemm_tiers.main([*argv, "--blas", "cublaslt"]) == 0
        assert json.loads(out.read_text())["blas"] == "Cublaslt"
    finally:
        torch.backends.cuda.preferred_blas_library(before)
