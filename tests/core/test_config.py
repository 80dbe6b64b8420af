"""``config``: what --corun sets for the records it serves, and what it accepts of SGLang's resolution."""

import dataclasses

import pytest

from corun_sglang.core import config
from option_sets import user_args

NONE = config.Records()


def test_defaults_fix_one_decode_shape_and_isolated_prefill():
    chosen = config.defaults(user_args(), NONE)
    assert chosen["max_running_requests"] == config.DEFAULT_MAX_RUNNING_REQUESTS == 256
    assert chosen["cuda_graph_bs_decode"] == [256]
    assert chosen["cuda_graph_max_bs_decode"] == 256
    assert chosen["prefill_max_requests"] == 1
    assert chosen["disable_radix_cache"] is True
    assert chosen["attention_backend"] == "flashinfer"
    assert chosen["sampling_backend"] == "corun"
    assert chosen["random_seed"] == config.DEFAULT_RANDOM_SEED
    assert "disable_prefill_cuda_graph" not in chosen  # SGLang's breakable prefill graphs stay on


def test_defaults_take_n_and_seed_from_the_user():
    chosen = config.defaults(user_args(max_running_requests=48, random_seed=7), NONE)
    assert chosen["max_running_requests"] == 48
    assert chosen["cuda_graph_bs_decode"] == [48]
    assert chosen["random_seed"] == 7


def test_resolution_problems_catch_a_resolution_that_breaks_the_contract(make_args):
    resolved = make_args(random_seed=1)  # default SGLang resolution
    found = config.resolution_problems(resolved, NONE, resolved.get_attention_backends())
    text = "\n".join(found)
    assert "decode CUDA graph sizes" in text
    assert "radix cache" in text
    assert "prefill_max_requests" in text
    assert "attention resolved" in text
    assert "prefill CUDA graph" not in text  # SGLang's default prefill graph is a verified backend
    with pytest.raises(config.CorunConfigError):
        config.freeze(resolved, NONE, resolved.get_attention_backends())


def test_resolution_problems_catch_an_unverified_prefill_graph(make_args):
    resolved = make_args(random_seed=1, cuda_graph_backend_prefill="full")
    assert resolved.cuda_graph_config.prefill.backend == "full"
    found = config.resolution_problems(resolved, NONE, resolved.get_attention_backends())
    assert any("prefill CUDA graph resolved to backend 'full'" in p for p in found)


def test_resolution_problems_catch_a_resolution_that_breaks_a_prefill_pack(make_args):
    resolved = make_args(corun=True, corun_prefill_pack_candidate=1024)
    packed = config.Records(pack_candidate=1024)
    assert config.resolution_problems(resolved, packed, resolved.get_attention_backends()) == []
    object.__setattr__(resolved, "chunked_prefill_size", 512)  # a resolution that leaves the chunk below the pack
    resolved.cuda_graph_config.prefill.bs = [64, 1024]
    text = "\n".join(config.resolution_problems(resolved, packed, resolved.get_attention_backends()))
    assert "prefill pack: a pack of 1024 tokens exceeds --chunked-prefill-size 512" in text
    assert "prefill CUDA graph token counts resolved to [64, 1024], not [1024]" in text


def test_summary_is_one_line():
    cfg = config.CorunConfig(
        decode_batch_size=256,
        decode_tiers=(),
        decode_tiers_verified=False,
        prefill_requests_per_batch=1,
        prefill_graph="breakable",
        chunked_prefill_size=8192,
        page_size=1,
        attention_backend="flashinfer",
        sampling_backend="pytorch",
        random_seed=0,
    )
    line = cfg.summary()
    assert "\n" not in line and "bs=[256]" in line and "prefill 1 request/batch (graph: breakable)" in line
    tiered = dataclasses.replace(cfg, decode_tiers=(72, 128), decode_tiers_verified=True).summary()
    assert "bs=[72, 128, 256]" in tiered and "verified" in tiered and "UNVERIFIED" not in tiered
    assert "UNVERIFIED" in dataclasses.replace(cfg, decode_tiers=(72,)).summary()
    assert "moe_padding=compute" in line and "moe_padding=skip" in dataclasses.replace(cfg, moe_padding="skip").summary()


def test_decode_tier_candidates_are_captured_below_n():
    tiered = config.Records(tier_candidates=(72, 128))
    assert tiered.decode_tiers == (72, 128)
    assert config.defaults(user_args(), tiered)["cuda_graph_bs_decode"] == [72, 128, 256]
    assert config.decode_sizes(user_args(max_running_requests=64), NONE) == [64]


def test_n_is_computed_in_one_place():
    assert config.batch_size(user_args()) == config.DEFAULT_MAX_RUNNING_REQUESTS == 256
    assert config.batch_size(user_args(max_running_requests=48)) == 48


def test_a_calibrated_pack_or_tiers_are_served_only_where_the_options_allow_them():
    assert config.unservable_pack(user_args()) is None and config.unservable_tiers(user_args()) is None
    for given in ({"disable_prefill_cuda_graph": True}, {"cuda_graph_bs_prefill": [1024, 2048]},
                  {"cuda_graph_backend_prefill": "disabled"}):
        assert config.unservable_pack(user_args(**given)) is not None
    args = user_args()
    args.corun_prefix_cache = True
    assert "--corun-prefix-cache" in config.unservable_pack(args)
    assert config.unservable_tiers(user_args(cuda_graph_bs_decode=[256])) is not None


def test_tp_above_one_pins_nccl_tree_and_drops_custom_all_reduce(monkeypatch):
    args = user_args(tp_size=2)
    assert config.defaults(args, NONE)["disable_custom_all_reduce"] is True
    env, conflicts = config.collective_env(args, {})
    assert env == {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple", "NCCL_NVLS_ENABLE": "0"}
    assert conflicts == []
    _, conflicts = config.collective_env(args, {"NCCL_ALGO": "ring", "NCCL_PROTO": "Simple"})
    assert len(conflicts) == 1 and "NCCL_ALGO=ring" in conflicts[0]
    assert config.collective_env(user_args(), {"NCCL_ALGO": "ring"}) == ({}, [])
    assert "disable_custom_all_reduce" not in config.defaults(user_args(), NONE)


def _padding(mode=None, **given):
    args = user_args(**given)
    args.corun = True
    if mode is not None:
        args.corun_moe_padding = mode
    return args


@pytest.mark.parametrize("mode, given, resolved", [
    (None, {}, "skip"),  # auto: SGLang runs an unquantized MoE layer on its Triton kernels
    ("auto", {"moe_runner_backend": "triton"}, "skip"),
    ("auto", {"moe_runner_backend": "flashinfer_cutlass"}, "compute"),
    ("auto", {"quantization": "fp8"}, "compute"),
    ("compute", {}, "compute"),
    ("skip", {"moe_runner_backend": "flashinfer_cutlass"}, "skip"),  # refused by violations()
])
def test_moe_padding_auto_skips_only_on_the_unquantized_triton_runner(mode, given, resolved):
    args = _padding(mode, **given)
    assert config.moe_padding(args) == resolved
    assert config.skips_moe_padding(args) is (resolved == "skip")
    assert not {"moe_runner_backend", "corun_moe_padding"} & set(config.defaults(args, NONE))  # SGLang's choice stands
    args.corun = False
    assert not config.skips_moe_padding(args)
