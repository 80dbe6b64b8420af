"""``config``: what --corun refuses, sets and accepts, on SGLang's own option set."""

import dataclasses
import types

import pytest

from corun_sglang import config


def user_args(**given):
    """Options as a user hands them to SGLang: the ServerArgs defaults plus ``given``."""
    from sglang.srt.server_args import ServerArgs

    base = ServerArgs.__mro__[0]
    while "corun" in {f.name for f in dataclasses.fields(base)}:
        base = base.__mro__[1]
    values = {}
    for f in dataclasses.fields(base):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    unknown = set(given) - set(values)
    assert not unknown, f"not SGLang options: {unknown}"
    values.update(given)
    return types.SimpleNamespace(**values)


def test_sglang_defaults_are_accepted():
    assert config.refusals(user_args()) == []


REFUSED = [
    ({"enable_deterministic_inference": True}, "--enable-deterministic-inference"),
    ({"rl_on_policy_target": "fsdp"}, "--rl-on-policy-target"),
    ({"enable_mixed_chunk": True}, "--enable-mixed-chunk"),
    ({"speculative_algorithm": "EAGLE"}, "--speculative-algorithm"),
    ({"enable_dp_attention": True}, "--enable-dp-attention"),
    ({"dp_size": 2}, "--dp-size"),
    ({"disaggregation_mode": "prefill"}, "--disaggregation-mode"),
    ({"pp_size": 2}, "--pp-size"),
    ({"tp_size": 4}, "--tp-size"),
    ({"enable_two_batch_overlap": True}, "--enable-two-batch-overlap"),
    ({"disable_cuda_graph": True}, "--disable-cuda-graph"),
    ({"disable_decode_cuda_graph": True}, "--disable-decode-cuda-graph"),
    ({"cuda_graph_backend_decode": "breakable"}, "--cuda-graph-backend-decode"),
    ({"cuda_graph_config": {"decode": {"backend": "disabled"}}}, "--cuda-graph-backend-decode"),
    ({"disable_cuda_graph_padding": True}, "--disable-cuda-graph-padding"),
    ({"cuda_graph_bs_decode": [1, 2, 4]}, "--cuda-graph-bs-decode"),
    ({"cuda_graph_max_bs_decode": 64}, "--cuda-graph-max-bs-decode"),
    ({"prefill_max_requests": 4}, "--prefill-max-requests"),
    ({"enable_pdmux": True}, "--enable-pdmux"),
    ({"attention_backend": "fa3"}, "--attention-backend"),
    ({"decode_attention_backend": "triton"}, "--decode-attention-backend"),
    ({"sampling_backend": "flashinfer"}, "--sampling-backend"),
    ({"enable_dynamic_chunking": True}, "--enable-dynamic-chunking"),
    ({"enable_lora": True}, "--enable-lora"),
    ({"enable_symm_mem": True}, "--enable-symm-mem"),
    ({"enable_nccl_nvls": True}, "--enable-nccl-nvls"),
    ({"enable_return_hidden_states": True}, "--enable-return-hidden-states"),
    ({"enable_torch_compile": True}, "--enable-torch-compile"),
    ({"enable_hierarchical_cache": True}, "--enable-hierarchical-cache"),
]


@pytest.mark.parametrize("given,flag", REFUSED, ids=[f for _, f in REFUSED])
def test_each_refused_option_is_named_with_a_fix(given, flag):
    found = config.refusals(user_args(**given))
    assert len(found) == 1, found
    assert flag in found[0] and "Fix:" in found[0]


@pytest.mark.parametrize(
    "given",
    [
        {"attention_backend": "flashinfer"},
        {"max_running_requests": 64, "cuda_graph_bs_decode": [64]},
        {"max_running_requests": 64, "cuda_graph_max_bs_decode": 64},
        {"cuda_graph_bs_decode": [256]},
        {"prefill_max_requests": 1},
        {"cuda_graph_backend_decode": "full"},
        {"sampling_backend": "corun"},
    ],
)
def test_options_that_agree_with_corun_are_accepted(given):
    assert config.refusals(user_args(**given)) == []


def test_error_lists_every_problem():
    err = config.CorunConfigError(config.refusals(user_args(enable_mixed_chunk=True, tp_size=4)))
    assert "--enable-mixed-chunk" in str(err) and "--tp-size" in str(err)
    assert len(err.problems) == 2


def test_defaults_fix_one_decode_shape_and_isolated_prefill():
    chosen = config.defaults(user_args())
    assert chosen["max_running_requests"] == config.DEFAULT_MAX_RUNNING_REQUESTS == 256
    assert chosen["cuda_graph_bs_decode"] == [256]
    assert chosen["cuda_graph_max_bs_decode"] == 256
    assert chosen["prefill_max_requests"] == 1
    assert chosen["disable_radix_cache"] is True
    assert chosen["attention_backend"] == "flashinfer"
    assert chosen["sampling_backend"] == "corun"
    assert chosen["random_seed"] == config.DEFAULT_RANDOM_SEED
    assert "disable_prefill_cuda_graph" not in chosen  # SGLang's breakable prefill graphs stay on


@pytest.mark.parametrize("given", [{"cuda_graph_backend_prefill": "full"},
                                   {"cuda_graph_config": {"prefill": {"backend": "tc_piecewise"}}}])
def test_only_verified_prefill_graph_backends_are_served(given):
    assert any("--cuda-graph-backend-prefill" in p for p in config.refusals(user_args(**given)))
    for backend in sorted(config.PREFILL_GRAPH_BACKENDS):
        assert config.refusals(user_args(cuda_graph_backend_prefill=backend)) == []


def test_defaults_take_n_and_seed_from_the_user():
    chosen = config.defaults(user_args(max_running_requests=48, random_seed=7))
    assert chosen["max_running_requests"] == 48
    assert chosen["cuda_graph_bs_decode"] == [48]
    assert chosen["random_seed"] == 7


def test_violations_catch_a_resolution_that_breaks_the_contract(make_args):
    resolved = make_args(random_seed=1)  # default SGLang resolution
    found = config.violations(resolved, resolved.get_attention_backends())
    text = "\n".join(found)
    assert "decode CUDA graph sizes" in text
    assert "radix cache" in text
    assert "prefill_max_requests" in text
    assert "attention resolved" in text
    assert "prefill CUDA graph" not in text  # SGLang's default prefill graph is a verified backend
    with pytest.raises(config.CorunConfigError):
        config.resolve(resolved, resolved.get_attention_backends())


def test_violations_catch_an_unverified_prefill_graph(make_args):
    resolved = make_args(random_seed=1, cuda_graph_backend_prefill="full")
    assert resolved.cuda_graph_config.prefill.backend == "full"
    found = config.violations(resolved, resolved.get_attention_backends())
    assert any("prefill CUDA graph resolved to backend 'full'" in p for p in found)


def test_violations_catch_a_resolution_that_breaks_a_prefill_pack(make_args):
    resolved = make_args(corun=True, corun_prefill_pack_candidate=1024)
    assert config.violations(resolved, resolved.get_attention_backends()) == []
    object.__setattr__(resolved, "chunked_prefill_size", 512)  # a resolution that leaves the chunk below the pack
    resolved.cuda_graph_config.prefill.bs = [64, 1024]
    text = "\n".join(config.violations(resolved, resolved.get_attention_backends()))
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
    args = user_args()
    args.corun_decode_tier_candidates = "128,72,72"
    assert config.decode_tiers(args) == (72, 128)
    assert config.defaults(args)["cuda_graph_bs_decode"] == [72, 128, 256]
    # the sizes a tiered server captures are not a conflicting --cuda-graph-bs-decode; other sizes are
    args.cuda_graph_bs_decode = [72, 128, 256]
    assert config.refusals(args) == []
    args.cuda_graph_bs_decode = [64, 256]
    assert any("--cuda-graph-bs-decode" in p for p in config.refusals(args))


def test_verified_tiers_and_candidates_are_exclusive():
    args = user_args()
    args.corun_decode_tiers, args.corun_decode_tier_candidates = "tiers.json", "72"
    assert any("--corun-decode-tiers" in p and "only one" in p for p in config.refusals(args))


def test_tp_above_one_pins_nccl_tree_and_drops_custom_all_reduce(monkeypatch):
    args = user_args(tp_size=2)
    assert config.defaults(args)["disable_custom_all_reduce"] is True
    env, conflicts = config.collective_env(args, {})
    assert env == {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple", "NCCL_NVLS_ENABLE": "0"}
    assert conflicts == []
    _, conflicts = config.collective_env(args, {"NCCL_ALGO": "ring", "NCCL_PROTO": "Simple"})
    assert len(conflicts) == 1 and "NCCL_ALGO=ring" in conflicts[0]
    assert config.collective_env(user_args(), {"NCCL_ALGO": "ring"}) == ({}, [])
    assert "disable_custom_all_reduce" not in config.defaults(user_args())


def test_tp_sizes_follow_the_verified_set(monkeypatch):
    monkeypatch.setattr(config, "TP_SIZES_VERIFIED", frozenset({1, 2}))
    assert config.refusals(user_args(tp_size=2)) == []
    assert any("--tp-size" in p for p in config.refusals(user_args(tp_size=4)))


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
    assert not {"moe_runner_backend", "corun_moe_padding"} & set(config.defaults(args))  # SGLang's choice stands
    args.corun = False
    assert not config.skips_moe_padding(args)
