"""``--corun`` through every way a user sets SGLang options, on the real ServerArgs."""

import dataclasses
import multiprocessing
import os
import pickle

import pytest

from corun_sglang.core import config
from corun_sglang.serving.server_args import CorunServerArgs


@pytest.fixture
def parse(sglang_plugins, tiny_model):
    from sglang.srt.server_args import prepare_server_args

    def run(*argv):
        return prepare_server_args(["--model-path", tiny_model, "--device", "cuda", *argv])

    return run


def test_sglang_uses_the_corun_server_args(server_args_cls):
    from sglang.srt.entrypoints.engine import Engine

    assert server_args_cls is CorunServerArgs
    assert Engine.server_args_class is CorunServerArgs


def test_cli_flag_resolves_the_corun_configuration(parse):
    args = parse("--corun")
    assert args.corun is True
    cfg = args.corun_config
    assert cfg.decode_batch_size == 256 == args.max_running_requests
    assert args.cuda_graph_config.decode.backend == "full"
    assert args.cuda_graph_config.decode.bs == [256]
    assert args.prefill_max_requests == 1
    assert args.disable_radix_cache is True
    assert args.enable_mixed_chunk is False
    assert args.get_attention_backends() == ("flashinfer", "flashinfer")
    assert args.enable_deterministic_inference is False  # batch-invariant ops stay off
    assert args.random_seed == config.DEFAULT_RANDOM_SEED


def test_prefill_graphs_are_sglangs_default_or_eager(parse):
    assert parse("--corun").cuda_graph_config.prefill.backend == "breakable"
    assert parse().cuda_graph_config.prefill.backend == "breakable"
    eager = parse("--corun", "--disable-prefill-cuda-graph")
    assert eager.cuda_graph_config.prefill.backend == "disabled"
    assert "(graph: disabled)" in eager.corun_config.summary()
    with pytest.raises(config.CorunConfigError, match="--cuda-graph-backend-prefill"):
        parse("--corun", "--cuda-graph-backend-prefill", "full")


def test_n_is_max_running_requests(parse):
    args = parse("--corun", "--max-running-requests", "48")
    assert args.corun_config.decode_batch_size == 48
    assert args.cuda_graph_config.decode.bs == [48]


def _record(tmp_path, n=256, tiers=(72, 128)):
    from corun_sglang.records.record import TiersRecord

    path = tmp_path / "tiers.json"
    TiersRecord(n=n, tiers=tiers, environment={"gpu": "NVIDIA H200"}).write(path)
    return str(path)


def test_verified_tiers_are_captured_below_n(parse, tmp_path):
    args = parse("--corun", "--corun-decode-tiers", _record(tmp_path))
    assert args.cuda_graph_config.decode.bs == [72, 128, 256]
    assert args.corun_config.decode_tiers == (72, 128) and args.corun_config.decode_tiers_verified
    # scheduler processes get the record with the args
    assert pickle.loads(pickle.dumps(args)).corun_config.tier_record.tiers == (72, 128)
    assert parse("--corun").cuda_graph_config.decode.bs == [256]


def test_a_tiers_record_for_another_n_or_unreadable_refuses_to_start(parse, tmp_path):
    with pytest.raises(config.CorunConfigError, match="verified against a 256-slot decode graph.*is 64"):
        parse("--corun", "--max-running-requests", "64", "--corun-decode-tiers", _record(tmp_path))
    with pytest.raises(config.CorunConfigError, match="cannot read it.*verify-tiers"):
        parse("--corun", "--corun-decode-tiers", str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(config.CorunConfigError, match="not a decode tiers record"):
        parse("--corun", "--corun-decode-tiers", str(tmp_path / "bad.json"))
    with pytest.raises(config.CorunConfigError, match="add --corun"):
        parse("--corun-decode-tiers", _record(tmp_path))


def test_tier_candidates_are_captured_unverified(parse):
    args = parse("--corun", "--corun-decode-tier-candidates", "64,200")
    assert args.cuda_graph_config.decode.bs == [64, 200, 256]
    assert not args.corun_config.decode_tiers_verified
    assert "UNVERIFIED" in args.corun_config.summary()
    with pytest.raises(config.CorunConfigError, match="not below N"):
        parse("--corun", "--corun-decode-tier-candidates", "64,256")
    with pytest.raises(config.CorunConfigError, match="not a comma-separated list"):
        parse("--corun", "--corun-decode-tier-candidates", "64,x")


def _pack_record(tmp_path, pack=1024, shortest=33):
    from corun_sglang.records.record import PackRecord

    path = tmp_path / "pack.json"
    PackRecord(pack=pack, shortest=shortest, environment={"gpu": "NVIDIA H200"}).write(path)
    return str(path)


def test_a_prefill_pack_captures_no_prefill_graph_below_it_and_lifts_the_one_request_limit(parse, tmp_path):
    plain = parse("--corun").cuda_graph_config.prefill.bs
    args = parse("--corun", "--corun-prefill-pack", _pack_record(tmp_path))
    assert args.cuda_graph_config.prefill.bs == [1024] + [c for c in plain if c > 1024]
    assert args.cuda_graph_config.prefill.max_bs == args.cuda_graph_config.prefill.bs[-1]
    assert args.prefill_max_requests is None
    cfg = args.corun_config
    # the tiny model's 4 query heads share 2 KV heads: 33 prompt tokens give 66 packed query rows
    assert (cfg.prefill_pack, cfg.prefill_pack_shortest, cfg.prefill_pack_verified) == (1024, 33, True)
    assert "prompts of 33-1024 tokens at 1024 tokens (verified" in cfg.summary()
    assert cfg.prefill_pack_kernel == "fa2"  # no CUDA here: FA2's rule
    assert pickle.loads(pickle.dumps(args)).corun_config.pack_record.pack == 1024
    candidate = parse("--corun", "--corun-prefill-pack-candidate", "512")
    assert candidate.cuda_graph_config.prefill.bs[0] == 512 and "UNVERIFIED pack" in candidate.corun_config.summary()
    assert parse("--corun").corun_config.prefill_pack is None
    waiting = parse("--corun", "--corun-prefill-pack", _pack_record(tmp_path), "--corun-prefill-pack-wait", "32")
    assert waiting.corun_config.prefill_pack_wait == 32 and "cut short or underfilled waits up to 32 decode steps" in (
        waiting.corun_config.summary())
    assert cfg.prefill_pack_wait == 0 and "waits" not in cfg.summary()


@pytest.mark.parametrize("argv,match", [
    (["--corun-prefill-pack-candidate", "1024"], "add --corun"),
    (["--corun", "--corun-prefill-pack-candidate", "1024", "--disable-prefill-cuda-graph"], "breakable prefill graph"),
    (["--corun", "--corun-prefill-pack-candidate", "1024", "--cuda-graph-bs-prefill", "64", "1024"],
     "--cuda-graph-bs-prefill"),
    (["--corun", "--corun-prefill-pack-candidate", "4096", "--chunked-prefill-size", "2048"],
     "exceeds --chunked-prefill-size 2048"),
    (["--corun", "--corun-prefill-pack-candidate", "64"], "below 128"),
    (["--corun", "--corun-prefill-pack-candidate", "1024", "--prefill-max-requests", "8"], "--prefill-max-requests"),
    (["--corun-prefill-pack-wait", "8"], "--corun-prefill-pack-wait: packed prefill is part of --corun.*add --corun"),
    (["--corun", "--corun-prefill-pack-wait", "8"], "a pack waits only with --corun-prefill-pack. Fix: add"),
    (["--corun", "--corun-prefill-pack-candidate", "1024", "--corun-prefill-pack-wait", "-1"],
     "0 or more. Fix: pass 0"),
])
def test_prefill_pack_refusals(parse, argv, match):
    with pytest.raises(config.CorunConfigError, match=match):
        parse(*argv)


def test_a_record_serves_from_its_own_shortest_prompt_never_below_the_kernels(parse, tmp_path, monkeypatch):
    from corun_sglang.core import packing
    from corun_sglang.serving import kernel_probe

    assert parse("--corun", "--corun-prefill-pack", _pack_record(tmp_path, shortest=64)).corun_config \
        .prefill_pack_shortest == 64
    monkeypatch.setattr(kernel_probe, "prefill_kernel", lambda head_dim, dtype, paged: packing.FA3)
    fa3 = parse("--corun", "--corun-prefill-pack-candidate", "1024").corun_config
    assert (fa3.prefill_pack_shortest, fa3.prefill_pack_kernel) == (1, "fa3")
    assert "prompts of 1-1024 tokens at 1024 tokens, on FlashInfer's FA3 prefill only (UNVERIFIED" in fa3.summary()
    served = parse("--corun", "--corun-prefill-pack", _pack_record(tmp_path)).corun_config  # FA2's rule holds
    assert (served.prefill_pack_shortest, served.prefill_pack_kernel) == (33, "fa2")
    assert "FA3" not in served.summary()


def test_a_prefill_pack_record_of_another_model_or_unreadable_refuses_to_start(parse, tmp_path):
    with pytest.raises(config.CorunConfigError, match="verified with prompts from 9 tokens.*fa2 prefill.*from 33"):
        parse("--corun", "--corun-prefill-pack", _pack_record(tmp_path, shortest=9))
    with pytest.raises(config.CorunConfigError, match="cannot read it.*verify-prefill-pack"):
        parse("--corun", "--corun-prefill-pack", str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(config.CorunConfigError, match="not a prefill pack record"):
        parse("--corun", "--corun-prefill-pack", str(tmp_path / "bad.json"))
    with pytest.raises(config.CorunConfigError, match="pass only one"):
        parse("--corun", "--corun-prefill-pack", _pack_record(tmp_path), "--corun-prefill-pack-candidate", "1024")


def test_the_gemm_library_is_cublaslt_unless_named_and_only_under_corun(parse):
    cfg = parse("--corun").corun_config
    assert cfg.gemm_library == "cublaslt" and "gemm=cublaslt" in cfg.summary()
    assert parse("--corun", "--corun-gemm-library", "cublas").corun_config.gemm_library == "cublas"
    with pytest.raises(config.CorunConfigError, match="--corun-gemm-library: part of --corun"):
        parse("--corun-gemm-library", "cublas")
    with pytest.raises(SystemExit):  # argparse names the choices
        parse("--corun", "--corun-gemm-library", "rocblas")


def test_moe_padding_rows_skip_the_experts_only_under_corun(parse):
    args = parse("--corun")  # auto, on the runner SGLang resolves (Triton kernels, unquantized)
    assert args.corun_moe_padding == "auto" and args.moe_runner_backend == "auto"
    assert args.corun_config.moe_padding == "skip" and "moe_padding=skip" in args.corun_config.summary()
    assert parse("--corun", "--moe-runner-backend", "triton").corun_config.moe_padding == "skip"
    assert parse("--corun", "--corun-moe-padding", "compute").corun_config.moe_padding == "compute"
    with pytest.raises(config.CorunConfigError, match="--moe-runner-backend 'flashinfer_cutlass': not verified"):
        parse("--corun", "--moe-runner-backend", "flashinfer_cutlass")  # another runner: not verified
    with pytest.raises(config.CorunConfigError, match="--corun-moe-padding: part of --corun"):
        parse("--corun-moe-padding", "skip")
    with pytest.raises(SystemExit):  # argparse names the choices
        parse("--corun", "--corun-moe-padding", "drop")


def test_tp_2_is_served_on_nccl_tree_without_custom_all_reduce(parse, monkeypatch):
    for name in config.NCCL_ENV:  # absent before, and removed again after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    args = parse("--corun", "--tp-size", "2")
    assert args.tp_size == 2 and args.disable_custom_all_reduce is True
    assert all(os.environ[k] == v for k, v in config.NCCL_ENV.items())  # inherited by the TP ranks
    monkeypatch.setenv("NCCL_ALGO", "ring")
    with pytest.raises(config.CorunConfigError, match="NCCL_ALGO=ring"):
        parse("--corun", "--tp-size", "2")


def test_without_the_flag_corun_is_off(parse):
    args = parse()
    assert args.corun is False
    assert len(args.cuda_graph_config.decode.bs) > 1  # SGLang's own graph sizes


def test_yaml_config(parse, tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("corun: true\nmax-running-requests: 32\n")
    args = parse("--config", str(cfg))
    assert args.corun is True and args.corun_config.decode_batch_size == 32


def test_yaml_config_refusal(parse, tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("corun: true\nenable-mixed-chunk: true\n")
    with pytest.raises(config.CorunConfigError, match="--enable-mixed-chunk"):
        parse("--config", str(cfg))


def test_engine_kwargs(sglang_plugins, tiny_model):
    """``sgl.Engine(corun=True)`` resolves CoRun options and refuses bad ones before any process starts."""
    import sglang as sgl

    with pytest.raises(config.CorunConfigError, match="--enable-mixed-chunk"):
        sgl.Engine(model_path=tiny_model, device="cuda", corun=True, enable_mixed_chunk=True)
    args = sgl.Engine.server_args_class(model_path=tiny_model, device="cuda", corun=True)
    assert args.corun_config.decode_batch_size == 256


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--enable-mixed-chunk"], "--enable-mixed-chunk"),
        (["--speculative-algorithm", "EAGLE"], "--speculative-algorithm"),
        (["--enable-dp-attention", "--dp-size", "2"], "--enable-dp-attention"),
        (["--disaggregation-mode", "prefill"], "--disaggregation-mode"),
        (["--pp-size", "2"], "--pp-size"),
        (["--disable-cuda-graph"], "--disable-cuda-graph"),
        (["--attention-backend", "fa3"], "--attention-backend"),
        (["--enable-deterministic-inference"], "--enable-deterministic-inference"),
        (["--tp-size", "4"], "--tp-size"),
    ],
)
def test_refused_cli_options(parse, argv, flag):
    with pytest.raises(config.CorunConfigError, match=flag):
        parse("--corun", *argv)


def test_server_info_reports_corun(parse):
    # /server_info serialises the server args with dataclasses.asdict
    assert dataclasses.asdict(parse("--corun"))["corun"] is True
    assert dataclasses.asdict(parse())["corun"] is False


def _child_reads(args, queue):
    queue.put((args.corun, args.corun_config))


def test_scheduler_subprocesses_see_the_flag(parse):
    """Scheduler processes are spawned with pickled server args, as SGLang does."""
    args = parse("--corun", "--max-running-requests", "16")
    assert pickle.loads(pickle.dumps(args)).corun_config == args.corun_config
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_reads, args=(args, queue))
    child.start()
    corun, cfg = queue.get(timeout=300)
    child.join(timeout=60)
    assert corun is True and cfg == args.corun_config


FLAG_SETS = [
    [],
    ["--max-running-requests", "64"],
    ["--enable-mixed-chunk", "--chunked-prefill-size", "512"],
    ["--disable-radix-cache", "--attention-backend", "flashinfer", "--cuda-graph-max-bs", "32"],
    ["--enable-deterministic-inference"],
    ["--sampling-backend", "pytorch", "--prefill-max-requests", "4"],
]


@pytest.mark.parametrize("argv", FLAG_SETS, ids=[" ".join(a) or "defaults" for a in FLAG_SETS])
def test_without_corun_resolution_is_sglangs_own(sglang_plugins, tiny_model, argv):
    """The package installed, no --corun: every resolved option equals plain SGLang's."""
    import argparse

    sglang_cls = CorunServerArgs.__mro__[1]
    parser = argparse.ArgumentParser()
    CorunServerArgs.add_cli_args(parser)
    ns = parser.parse_args(
        ["--model-path", tiny_model, "--device", "cuda", "--random-seed", "3", *argv]
    )
    ours = dataclasses.asdict(CorunServerArgs.from_cli_args(ns))
    theirs = dataclasses.asdict(sglang_cls.from_cli_args(ns))
    assert ours.pop("corun") is False
    assert ours.pop("corun_ablation") is None
    assert ours.pop("corun_decode_tiers") is None and ours.pop("corun_decode_tier_candidates") is None
    assert ours.pop("corun_moe_padding") == "auto" and ours.pop("corun_gemm_library") == "cublaslt"
    assert ours.pop("corun_prefill_pack") is None and ours.pop("corun_prefill_pack_candidate") is None
    assert ours.pop("corun_prefill_pack_wait") is None
    assert ours.pop("corun_default_max_new_tokens") is None
    assert ours.pop("corun_calibrate") == "auto" and ours.pop("corun_calibration_dir") is None
    assert ours.pop("corun_prefix_cache") is False and ours.pop("corun_measure") is None
    assert ours.pop("corun_tp_invariant") is None
    assert ours == theirs


def test_ablation_applies_isolated_prefill_without_corun(make_args):
    args = make_args(corun_ablation="splitkv-off+isolated-prefill")
    assert args.corun is False and args.prefill_max_requests == 1


def test_ablation_names_are_checked_and_exclusive_with_corun(make_args):
    from corun_sglang.core.config import CorunConfigError

    with pytest.raises(CorunConfigError, match="unknown"):
        make_args(corun_ablation="everything")
    with pytest.raises(CorunConfigError, match="only one"):
        make_args(corun=True, corun_ablation="splitkv-off")


def test_default_max_new_tokens_is_part_of_corun_and_at_least_one(parse):
    assert parse("--corun").corun_default_max_new_tokens is None  # SGLang's own: the rest of the context
    assert parse("--corun", "--corun-default-max-new-tokens", "512").corun_default_max_new_tokens == 512
    with pytest.raises(config.CorunConfigError, match="--corun-default-max-new-tokens: part of --corun"):
        parse("--corun-default-max-new-tokens", "512")
    for value in ("0", "-4"):
        with pytest.raises(config.CorunConfigError, match="--corun-default-max-new-tokens: .*1 or more"):
            parse("--corun", "--corun-default-max-new-tokens", value)
