"""``bench/step_profile.py``: kernels by kind, traces per step, and the loads it profiles."""

import asyncio
import json
import time

import pytest


def test_step_profile_sorts_kernels_into_kinds():
    from bench import step_profile

    names = {
        "nvjet_tst_128x64_64x8_1x2_h_bz_coopA_TNT": "gemm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64": "gemm",
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits>(Params)": "attention",
        "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, ...>(...)": "attention",
        "matmul_kernel_persistent": "gemm",  # the batch-invariant GEMM, not an attention kernel
        "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(...)": "norm/activation",
        "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<...>": "norm/activation",
        "void flashinfer::activation::act_and_mul_kernel<...>": "norm/activation",
        "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<...>": "sampler",
        "_gumbel_argmax_partial": "sampler",
        "fused_moe_kernel": "moe",
        "_moe_sum_reduce_kernel": "moe",
        "void count_and_sort_expert_tokens_kernel<int>(...)": "moe",  # not the sampler's "sort"
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(...)": "communication",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
        "void at::native::elementwise_kernel<128, 2, ...>": "other",
    }
    assert {name: step_profile.kind_of(name) for name in names} == names


def test_step_profile_names_the_graph_a_corun_server_replays():
    from bench import step_profile

    assert step_profile.graph_slots([72, 128, 256], 16) == 72
    assert step_profile.graph_slots([72, 128, 256], 72) == 72
    assert step_profile.graph_slots([72, 128, 256], 73) == 128
    assert step_profile.graph_slots([256], 16) == 256


def test_step_profile_sums_a_trace_per_step(tmp_path):
    import gzip

    from bench import step_profile

    events = [
        {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 0.0, "dur": 600.0},
        {"ph": "X", "cat": "kernel", "name": "BatchPrefillKernel", "ts": 700.0, "dur": 200.0},
        {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 1000.0, "dur": 600.0},
        {"ph": "X", "cat": "kernel", "name": "BatchPrefillKernel", "ts": 1700.0, "dur": 300.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 5000.0},  # host side: not counted
    ]
    path = tmp_path / "x-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    got = step_profile.summarize_trace(path, steps=2)
    # 1700 us of kernels in a 2000 us span, over 2 steps
    assert got["steps_seen"] == 2
    assert got["kernel_ms_per_step"] == pytest.approx(0.85) and got["span_ms_per_step"] == pytest.approx(1.0)
    assert got["by_kind_ms"]["gemm"] == pytest.approx(0.6) and got["by_kind_ms"]["attention"] == pytest.approx(0.25)
    assert got["top_kernels_ms"][0] == ["nvjet_gemm", pytest.approx(0.6)]
    # where the trace records the graph launches, they count the steps
    launches = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t, "dur": 5.0} for t in (0, 1, 2, 3)]
    (tmp_path / "launched.trace.json").write_text(json.dumps({"traceEvents": events + launches}))
    got = step_profile.summarize_trace(tmp_path / "launched.trace.json", steps=2)
    assert got["steps_seen"] == 4 and got["kernel_ms_per_step"] == pytest.approx(0.425)
    (tmp_path / "empty.trace.json").write_text(json.dumps({"traceEvents": events[-1:]}))
    with pytest.raises(ValueError, match="no GPU kernels"):
        step_profile.summarize_trace(tmp_path / "empty.trace.json", steps=2)


def test_step_profile_profiles_once_every_request_streams_then_drops_them(tmp_path, streaming_server):
    from bench import step_profile

    server = streaming_server()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        trace, running = asyncio.run(step_profile.profile_load(url, [[1, 2], [3, 4], [5, 6]], 2000, 7, tmp_path / "t"))
        assert running == 3 and trace.parent == tmp_path / "t" and trace.name.endswith("-TP-0.trace.json")
        assert [(p["num_steps"], p["activities"], p["with_stack"]) for p in server.profiles] == [(7, ["GPU"], False)]
        deadline = time.monotonic() + 5
        while server.dropped < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (server.dropped, server.finished) == (3, 0)
        # requests that end before the profile is written: told to raise --output-len
        with pytest.raises(RuntimeError, match="raise --output-len"):
            asyncio.run(step_profile.profile_load(url, [[1, 2]], 1, 7, tmp_path / "u", timeout=5))
    finally:
        server.shutdown()


def test_step_profile_profiles_the_load_a_server_runs_and_resumes_by_arm(tmp_path, streaming_server):
    from bench import step_profile

    server = streaming_server(capacity=2)  # as default SGLang at times runs 255 of 256
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        trace, running = asyncio.run(step_profile.profile_load(url, [[1], [2], [3]], 2000, 7, tmp_path / "t",
                                                               settle=0.5))
        assert running == 2 and trace.exists() and len(server.profiles) == 1
        # without a cap, the profile waits for all: a short output ends a request first
        with pytest.raises(RuntimeError, match=r"ended before all 3 streamed \(finished\): raise --output-len"):
            asyncio.run(step_profile.profile_load(url, [[1], [2], [3]], 5, 7, tmp_path / "u", settle=2))
    finally:
        server.shutdown()
    out = tmp_path / "profile.jsonl"
    out.write_text("".join(json.dumps({"shape": "s", "arm": a, "load": n}) + "\n"
                           for a, n in (("STD", 16), ("STD", 256), ("CoRun", 16), ("STD", 16))))
    assert step_profile.profiled(out, "s", [16, 256]) == {"STD"}  # CoRun was cut short: profiled again
    assert step_profile.profiled(out, "other", [16]) == set() and step_profile.profiled(tmp_path / "x", "s", [16]) == set()
