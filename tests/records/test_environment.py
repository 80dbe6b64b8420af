"""``records``: the environment a verified record holds for, and reading a record file against its schema."""

import dataclasses
import enum
import json
import types

import pydantic
import pytest

from corun_sglang.core import config
from corun_sglang.records import environment
from corun_sglang.core import errors

ENV = {"model": "abc", "gpu": "NVIDIA H200", "version sglang": "0.5.17", "tp_size": 1}

#: Substrings of SGLang option names that mark a switch of a GEMM, MoE or LM head kernel or of a dtype.
KERNEL_SWITCHES = ("gemm", "moe_runner", "quant", "dtype", "lm_head", "tf32")


def test_model_digest_ignores_names_but_not_shapes():
    config = {"hidden_size": 4096, "_name_or_path": "/a", "transformers_version": "4.57"}
    same = {"hidden_size": 4096, "_name_or_path": "/b", "transformers_version": "4.58"}
    assert environment.model_digest(config) == environment.model_digest(same)
    assert environment.model_digest(config) != environment.model_digest({**config, "hidden_size": 2048})


def test_environment_holds_what_kernels_depend_on(make_args):
    args = make_args()
    env = environment.environment({"hidden_size": 64}, "torch.bfloat16", args, gpu="NVIDIA H200", cuda="13.0",
                              installed={"sglang": "0.5.17", "torch": "2.11.0"}, blas=environment.blas_setup({}))
    assert env["gpu"] == "NVIDIA H200" and env["dtype"] == "torch.bfloat16" and env["version sglang"] == "0.5.17"
    assert env["tp_size"] == args.tp_size and env["attention_backend"] == args.attention_backend
    assert env["blas library"] == "cublas" and env["blas CUBLAS_WORKSPACE_CONFIG"] is None
    json.dumps(env)  # a record stores it as JSON
    assert "sglang" in environment.versions()


def test_a_record_verified_through_one_blas_setup_is_not_served_through_another(make_args):
    """cuBLAS and cuBLASLt give a GEMM row other bits at other sizes (docs/results/gemm_tiers.md)."""
    import torch

    def env(**blas):
        return environment.environment({}, "torch.bfloat16", make_args(), gpu="g", cuda="13.0", installed={},
                                   blas=blas)

    cublas = env(**environment.blas_setup({}))
    workspace = env(**environment.blas_setup({"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}))
    assert environment.mismatches(cublas, workspace) == [
        "blas CUBLAS_WORKSPACE_CONFIG: verified with None, this server has ':4096:8'"]
    before = torch.backends.cuda.preferred_blas_library()
    try:  # what TORCH_BLAS_PREFER_CUBLASLT=1 sets
        torch.backends.cuda.preferred_blas_library("cublaslt")
        assert environment.mismatches(cublas, env(**environment.blas_setup({}))) == [
            "blas library: verified with 'cublas', this server has 'cublaslt'"]
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def test_mismatches_name_each_differing_field():
    assert environment.mismatches(ENV, dict(ENV)) == []
    lines = environment.mismatches(ENV, {**ENV, "gpu": "NVIDIA H100", "version torch": "2.11.0"})
    assert lines == [
        "gpu: verified with 'NVIDIA H200', this server has 'NVIDIA H100'",
        "the record does not hold 1 field(s) this server has: version torch='2.11.0'",
    ]


def test_the_environment_travels_through_the_server_log():
    log = "INFO x\n[2026-11-30 TP0] " + environment.environment_line(ENV) + "\n[TP1] " + environment.environment_line({"a": 1})
    assert environment.environment_from_log(log) == ENV
    with pytest.raises(errors.RecordError, match="--corun-decode-tier-candidates"):
        environment.environment_from_log("INFO nothing here")


def _sglang_options() -> list[str]:
    from sglang.srt.server_args import ServerArgs

    return [f.name for f in dataclasses.fields(ServerArgs) if not f.name.startswith("corun")]


def test_every_numeric_option_is_an_sglang_option_and_the_environment_holds_its_value(make_args):
    assert set(environment.NUMERIC_OPTIONS) <= set(_sglang_options())
    assert len(set(environment.NUMERIC_OPTIONS)) == len(environment.NUMERIC_OPTIONS)
    args = make_args(enable_fp32_lm_head=True, moe_runner_backend="triton", enable_tf32_matmul=True, ep_size=1)
    env = environment.environment({}, "torch.bfloat16", args, gpu="g", cuda="13.0", installed={},
                              blas=environment.blas_setup({}))
    for name in environment.NUMERIC_OPTIONS:
        assert env[name] == ("torch.bfloat16" if name == "dtype" else environment.flat(getattr(args, name))), name
    assert (env["enable_fp32_lm_head"], env["moe_runner_backend"], env["enable_tf32_matmul"]) == (True, "triton", True)
    assert env["moe_a2a_backend"] == args.moe_a2a_backend and env["bf16_gemm_backend"] == args.bf16_gemm_backend
    pydantic.TypeAdapter(environment.Environment).validate_json(json.dumps(env), strict=True)  # what a record holds


def test_every_sglang_option_that_switches_a_kernel_or_a_dtype_is_a_numeric_option():
    """A newer SGLang's new GEMM, MoE runner, quantization, dtype, LM head or TF32 switch fails here until it
    joins ``NUMERIC_OPTIONS``."""
    switches = [name for name in _sglang_options() if any(s in name for s in KERNEL_SWITCHES)]
    assert "moe_runner_backend" in switches and "bf16_gemm_backend" in switches
    assert [name for name in switches if name not in environment.NUMERIC_OPTIONS] == []


def test_a_server_option_change_that_picks_another_kernel_is_a_mismatch(make_args):
    def env(**options):
        return environment.environment({}, "torch.bfloat16", make_args(**options), gpu="g", cuda="13.0", installed={},
                                   blas={})

    assert environment.mismatches(env(), env(enable_fp32_lm_head=True)) == [
        "enable_fp32_lm_head: verified with False, this server has True"]
    assert "moe_runner_backend: verified with 'auto', this server has 'triton'" in environment.mismatches(
        env(), env(moe_runner_backend="triton"))


def test_a_record_written_before_a_field_was_recorded_names_what_it_lacks():
    current = {**ENV, "moe_runner_backend": "auto", "ep_size": 1}
    assert environment.mismatches(ENV, current) == [
        "the record does not hold 2 field(s) this server has: ep_size=1, moe_runner_backend='auto'"]
    assert environment.mismatches(current, ENV) == [
        "ep_size: verified with 1, this server does not have it",
        "moe_runner_backend: verified with 'auto', this server does not have it",
    ]


class _Backend(enum.Enum):
    TRITON = "triton"


def test_an_environment_field_is_one_json_scalar():
    assert [environment.flat(v) for v in ("a", 3, 1.5, True, None)] == ["a", 3, 1.5, True, None]
    assert environment.flat(_Backend.TRITON) == "triton"
    assert environment.flat({"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'
    assert environment.flat(float("inf")) == "inf"


class _Schema(pydantic.BaseModel):
    model_config = environment.STRICT

    size: environment.Size
    environment: environment.Environment


def test_read_refuses_with_the_option_the_file_each_field_and_the_fix(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"size": 8, "environment": {"a": null, "b": true, "c": 1.5, "d": "x", "e": 2}}')
    found = environment.read(path, _Schema, "--opt", "record", "rerun it")
    assert found.size == 8 and found.environment == {"a": None, "b": True, "c": 1.5, "d": "x", "e": 2}
    assert type(found.environment["e"]) is int and type(found.environment["b"]) is bool
    path.write_text('{"size": 8.5, "environment": {"a": [1]}, "other": 0}')
    with pytest.raises(errors.RecordError) as caught:
        environment.read(path, _Schema, "--opt", "record", "rerun it")
    assert str(caught.value) == (
        f"--opt {path}: not a record (size 8.5: input should be a valid integer; environment.a [1]: an "
        "environment field holds a string, a finite number, a boolean or null; other: not a field of this "
        "record). Fix: rerun it")
    for text in (b'{"size": 8,', b"\xff\xfe{"):
        path.write_bytes(text)
        with pytest.raises(errors.RecordError, match=r"not a record \(not JSON: .*\)\. Fix: rerun it"):
            environment.read(path, _Schema, "--opt", "record", "rerun it")
    with pytest.raises(errors.RecordError, match=r"cannot read it \(No such file or directory\)\. Fix: rerun it"):
        environment.read(tmp_path / "none.json", _Schema, "--opt", "record", "rerun it")


def test_a_served_record_from_another_environment_is_named_with_its_fix():
    record = types.SimpleNamespace(environment=dict(ENV), source="tiers.json")
    served = [config.Served(None, "--corun-prefill-pack", "verify-prefill-pack"),
              config.Served(record, "--corun-decode-tiers", "verify-tiers")]
    assert environment.foreign(served, dict(ENV)) is None  # candidates, and a record verified here
    problem = environment.foreign(served, {**ENV, "gpu": "NVIDIA H100"})
    assert problem.startswith("--corun-decode-tiers tiers.json was verified in another environment (gpu: ")
    assert problem.endswith("Fix: run `corun-sglang verify-tiers` here, or drop --corun-decode-tiers")


def test_a_record_verified_through_the_other_gemm_library_names_the_option_that_serves_it():
    record = types.SimpleNamespace(environment={**ENV, "blas library": "cublas"}, source="tiers.json")
    served = [config.Served(record, "--corun-decode-tiers", "verify-tiers")]
    problem = environment.foreign(served, {**ENV, "blas library": "cublaslt"})
    assert "blas library: verified with 'cublas', this server has 'cublaslt'" in problem
    assert problem.endswith("Fix: run `corun-sglang verify-tiers` here, serve it with --corun-gemm-library cublas, "
                            "or drop --corun-decode-tiers")
    problem = environment.foreign(served, {**ENV, "blas library": "cublas", "gpu": "other"})
    assert "--corun-gemm-library" not in problem  # the library is not what differs
