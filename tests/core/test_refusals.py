"""``refusals``: what --corun refuses, on SGLang's own option set, each named with its fix."""

import types

import pytest

from corun_sglang.core import config, refusals
from option_sets import user_args


def test_sglang_defaults_are_accepted():
    assert refusals.refusals(user_args()) == []


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
    found = refusals.refusals(user_args(**given))
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
    assert refusals.refusals(user_args(**given)) == []


def test_error_lists_every_problem():
    err = config.CorunConfigError(refusals.refusals(user_args(enable_mixed_chunk=True, tp_size=4)))
    assert "--enable-mixed-chunk" in str(err) and "--tp-size" in str(err)
    assert len(err.problems) == 2


@pytest.mark.parametrize("given", [{"cuda_graph_backend_prefill": "full"},
                                   {"cuda_graph_config": {"prefill": {"backend": "tc_piecewise"}}}])
def test_only_verified_prefill_graph_backends_are_served(given):
    assert any("--cuda-graph-backend-prefill" in p for p in refusals.refusals(user_args(**given)))
    for backend in sorted(config.PREFILL_GRAPH_BACKENDS):
        assert refusals.refusals(user_args(cuda_graph_backend_prefill=backend)) == []


def test_verified_tiers_and_candidates_are_exclusive():
    args = user_args()
    args.corun_decode_tiers, args.corun_decode_tier_candidates = "tiers.json", "72"
    assert any("--corun-decode-tiers" in p and "only one" in p for p in refusals.refusals(args))


def test_decode_graph_sizes_given_must_be_those_a_tiered_server_captures():
    args = user_args()
    tiered = config.Records(tier_candidates=(72, 128))
    args.cuda_graph_bs_decode = [72, 128, 256]
    assert refusals.refusals(args, tiered) == []
    assert any("--cuda-graph-bs-decode" in p for p in refusals.refusals(args))  # plain N captures [256]
    args.cuda_graph_bs_decode = [64, 256]
    assert any("--cuda-graph-bs-decode" in p for p in refusals.refusals(args, tiered))


@pytest.mark.parametrize("given, flag", [
    ({"corun_calibrate": "off"}, "--corun-calibrate"),
    ({"corun_moe_padding": "skip"}, "--corun-moe-padding"),
    ({"corun_gemm_library": "cublas"}, "--corun-gemm-library"),
    ({"corun_prefill_pack_wait": 4}, "--corun-prefill-pack-wait"),
    ({"corun_prefix_cache": True}, "--corun-prefix-cache"),
    ({"corun_decode_tier_candidates": "64"}, "--corun-decode-tier-candidates"),
    ({"corun_default_max_new_tokens": 512}, "--corun-default-max-new-tokens"),
])
def test_corun_options_without_corun_are_named(given, flag):
    args = types.SimpleNamespace(corun=False, **given)
    (message,) = refusals.without_corun(args)
    assert flag in message and "add --corun" in message
    assert refusals.without_corun(types.SimpleNamespace(corun=True, **given)) == []
    assert refusals.without_corun(types.SimpleNamespace(corun=False)) == []


def test_tp_sizes_follow_the_verified_set(monkeypatch):
    monkeypatch.setattr(config, "TP_SIZES_VERIFIED", frozenset({1, 2}))
    assert refusals.refusals(user_args(tp_size=2)) == []
    assert any("--tp-size" in p for p in refusals.refusals(user_args(tp_size=4)))
