"""``tiers``: decode tier records, the environment they hold for, and what refuses them."""

import json

import pytest

from corun_sglang import tiers

ENV = {"model": "abc", "gpu": "NVIDIA H200", "version sglang": "0.5.17", "tp_size": 1}


def test_sizes_parse_sorted_and_unique_or_refuse():
    assert tiers.parse_sizes("128,72, 72") == [72, 128]
    for bad in ("", "0,8", "a,8", "-4"):
        with pytest.raises(tiers.TiersError):
            tiers.parse_sizes(bad)


def test_capture_sizes_are_the_tiers_below_n_then_n():
    assert tiers.capture_sizes([128, 72], 256) == [72, 128, 256]
    assert tiers.capture_sizes([], 256) == [256]
    assert tiers.capture_sizes([256, 300, 8], 256) == [8, 256]


def test_a_record_round_trips_and_keeps_its_source(tmp_path):
    path = tmp_path / "t.json"
    record = tiers.Record(n=256, tiers=(72, 128), environment=ENV, rejected={16: 3})
    path.write_text(json.dumps(record.to_json()))
    loaded = tiers.load(path)
    assert (loaded.n, loaded.tiers, dict(loaded.environment), dict(loaded.rejected)) == (256, (72, 128), ENV, {16: 3})
    assert loaded.source == str(path)


def test_unreadable_or_malformed_records_name_the_fix(tmp_path):
    with pytest.raises(tiers.TiersError, match="cannot read it.*verify-tiers"):
        tiers.load(tmp_path / "none.json")
    for text in ("not json", "{}", '{"n": 256, "tiers": ["x"], "environment": {}}'):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(tiers.TiersError, match="not a decode tiers record.*verify-tiers"):
            tiers.load(tmp_path / "bad.json")


def test_problems_name_a_different_n_and_tiers_out_of_range():
    assert tiers.problems(tiers.Record(n=256, tiers=(72,), environment=ENV), 256) == []
    (other_n,) = tiers.problems(tiers.Record(n=128, tiers=(72,), environment=ENV), 256)
    assert "128-slot" in other_n and "is 256" in other_n
    (wide,) = tiers.problems(tiers.Record(n=256, tiers=(72, 256), environment=ENV), 256)
    assert "[256]" in wide


def test_model_digest_ignores_names_but_not_shapes():
    config = {"hidden_size": 4096, "_name_or_path": "/a", "transformers_version": "4.57"}
    same = {"hidden_size": 4096, "_name_or_path": "/b", "transformers_version": "4.58"}
    assert tiers.model_digest(config) == tiers.model_digest(same)
    assert tiers.model_digest(config) != tiers.model_digest({**config, "hidden_size": 2048})


def test_environment_holds_what_kernels_depend_on(make_args):
    args = make_args()
    env = tiers.environment({"hidden_size": 64}, "torch.bfloat16", args, gpu="NVIDIA H200", cuda="13.0",
                            installed={"sglang": "0.5.17", "torch": "2.11.0"}, blas=tiers.blas_setup({}))
    assert env["gpu"] == "NVIDIA H200" and env["dtype"] == "torch.bfloat16" and env["version sglang"] == "0.5.17"
    assert env["tp_size"] == args.tp_size and env["attention_backend"] == args.attention_backend
    assert env["blas library"] == "cublas" and env["blas CUBLAS_WORKSPACE_CONFIG"] is None
    json.dumps(env)  # a record stores it as JSON
    assert "sglang" in tiers.versions()


def test_a_record_verified_through_one_blas_setup_is_not_served_through_another(make_args):
    """cuBLAS and cuBLASLt give a GEMM row other bits at other sizes (docs/results/gemm_tiers.md)."""
    import torch

    def env(**blas):
        return tiers.environment({}, "torch.bfloat16", make_args(), gpu="g", cuda="13.0", installed={},
                                 blas=blas)

    cublas = env(**tiers.blas_setup({}))
    workspace = env(**tiers.blas_setup({"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}))
    assert tiers.mismatches(cublas, workspace) == [
        "blas CUBLAS_WORKSPACE_CONFIG: verified with None, this server has ':4096:8'"]
    before = torch.backends.cuda.preferred_blas_library()
    try:  # what TORCH_BLAS_PREFER_CUBLASLT=1 sets
        torch.backends.cuda.preferred_blas_library("cublaslt")
        assert tiers.mismatches(cublas, env(**tiers.blas_setup({}))) == [
            "blas library: verified with 'cublas', this server has 'cublaslt'"]
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def test_mismatches_name_each_differing_field():
    assert tiers.mismatches(ENV, dict(ENV)) == []
    lines = tiers.mismatches(ENV, {**ENV, "gpu": "NVIDIA H100", "version torch": "2.11.0"})
    assert lines == [
        "gpu: verified with 'NVIDIA H200', this server has 'NVIDIA H100'",
        "version torch: verified with None, this server has '2.11.0'",
    ]


def test_the_environment_travels_through_the_server_log():
    log = "INFO x\n[2026-11-30 TP0] " + tiers.environment_line(ENV) + "\n[TP1] " + tiers.environment_line({"a": 1})
    assert tiers.environment_from_log(log) == ENV
    with pytest.raises(tiers.TiersError, match="--corun-decode-tier-candidates"):
        tiers.environment_from_log("INFO nothing here")
