"""Sampler microbenchmark: SGLang's default sampler vs its seeded (deterministic) path vs corun's.

One decode step's sampling at ``--rows`` x ``--vocab`` float32 logits, the
real ``Sampler.forward`` of each arm (SGLang 0.5.17 code, built without a
distributed group). Arms are interleaved, ``--reps`` repetitions of
``--iters`` steps each, timed with CUDA events; the report gives medians and
ratios to the default sampler. Writes JSON to ``--out``.

    python -m bench.sampler_cost --out docs/results/sampler.json
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from bench import common


def _bare_sampler(cls, deterministic: bool):
    """A ``Sampler`` of class ``cls`` without ``Sampler.__init__`` (which needs a TP group)."""
    from sglang.srt.layers.logprob_processor import OutputLogprobProcessor

    sampler = cls.__new__(cls)
    torch.nn.Module.__init__(sampler)
    sampler.tp_sync_group = None
    sampler.rl_on_policy_target = None
    sampler.enable_deterministic = deterministic
    sampler.use_log_softmax_logprob = False
    sampler.use_ascend_backend = False
    sampler.output_logprob_processor = OutputLogprobProcessor()
    return sampler


def _batch(rows, vocab, temperature, top_p, top_k, seeded, device):
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    from sglang.srt.sampling.sampling_params import TOP_K_ALL

    k = TOP_K_ALL if top_k <= 0 else top_k
    return SamplingBatchInfo(
        temperatures=torch.full((rows, 1), temperature, device=device),
        top_ps=torch.full((rows,), top_p, device=device),
        top_ks=torch.full((rows,), k, dtype=torch.int32, device=device),
        min_ps=torch.zeros(rows, device=device),
        is_all_greedy=False,
        is_any_greedy=False,
        need_top_p_sampling=top_p < 1.0,
        need_top_k_sampling=k != TOP_K_ALL,
        need_min_p_sampling=False,
        vocab_size=vocab,
        sampling_seed=(torch.arange(rows, device=device, dtype=torch.int64) * 7919 + 1) if seeded else None,
        device=device,
    )


def _kernels(run, iters: int, most: int = 20) -> list[dict]:
    """The GPU kernels ``run()`` launches, by device time: name, launches and ms per step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
    rows = [
        {"kernel": e.key, "launches_per_step": e.count / iters, "ms_per_step": e.device_time_total / 1000 / iters}
        for e in prof.key_averages() if e.device_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["ms_per_step"])[:most]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=-1)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument("--profile", action="store_true",
                        help="also record the corun arm's GPU kernels (torch.profiler), time per step each")
    args = parser.parse_args(argv)

    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.sampler import Sampler
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    from corun_sglang.serving.sampler import CorunSampler

    import tempfile

    from corun_sglang.tools import synthetic

    # SGLang's filtered-sampling path reads the published server arguments.
    config_dir = tempfile.mkdtemp()
    synthetic.write_config(config_dir, "qwen3-tiny")
    publish(ServerArgs(model_path=config_dir, device="cuda"), role="scheduler")
    device = "cuda"
    torch.manual_seed(0)
    logits = torch.randn(args.rows, args.vocab, device=device) * 4
    positions = torch.arange(args.rows, device=device, dtype=torch.int64) + 1000

    arms = {
        "sglang_default": (_bare_sampler(Sampler, False), False),
        "sglang_seeded": (_bare_sampler(Sampler, True), True),
        "corun": (_bare_sampler(CorunSampler, False), True),
    }
    if args.top_p < 1.0 or args.top_k > 0:
        # SGLang's flashinfer sampler refuses seeds with top-k/top-p filtering.
        arms.pop("sglang_seeded")
    infos = {
        name: _batch(args.rows, args.vocab, args.temperature, args.top_p, args.top_k, seeded, device)
        for name, (_, seeded) in arms.items()
    }
    work = [logits.clone() for _ in range(args.iters)]

    def step(name):
        sampler, _ = arms[name]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for buf in work:
            buf.copy_(logits)
        torch.cuda.synchronize()
        start.record()
        for buf in work:
            sampler(LogitsProcessorOutput(next_token_logits=buf), infos[name], False, [], [], positions)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / args.iters

    for name in arms:  # warm-up, compiles kernels
        step(name)
    times = {name: [] for name in arms}
    for _ in range(args.reps):
        for name in arms:
            times[name].append(step(name))
    medians = {name: statistics.median(v) for name, v in times.items()}
    result = {
        "rows": args.rows, "vocab": args.vocab, "temperature": args.temperature,
        "top_p": args.top_p, "top_k": args.top_k, "iters": args.iters, "reps": args.reps,
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "ms_per_step": times, "median_ms": medians,
        "ratio_to_default": {n: medians[n] / medians["sglang_default"] for n in medians},
        "command": " ".join([sys.executable, *sys.argv]),
    }
    if args.profile:
        result["corun_kernels"] = _kernels(lambda: step("corun"), args.iters)
    return common.finish(result, {k: result[k] for k in ("median_ms", "ratio_to_default")}, args.out)


if __name__ == "__main__":
    sys.exit(main())
