"""Where a decode step's time goes: GPU kernel time per step, by kind, per arm and load.

For each arm and each load L, a server decodes L requests at once (token-id
prompts of --input-len tokens, --output-len new tokens, ``ignore_eos``). Once
every one of them streams, or once no more start for --settle seconds (a
server may run fewer than its --max-running-requests: default SGLang at
times runs 255 of 256), SGLang's profiler records --steps decode steps (``POST
/start_profile`` with GPU activity) and the row records how many ran; then
the requests are dropped;
a trace without GPU kernels stops the tool. The trace's kernels
are summed by kind (GEMM, attention, sampler, MoE, communication,
norm/activation, other) and by name, and divided by the steps. The GPU span
per step (first kernel start to last kernel end, over the steps) less the
kernel time is the time the GPU waited on the host. One row per (arm, load)
goes to --out; arms already there for every load are skipped (a slice cut
short resumes); ``bench/report.py --step-profile`` tables them.

    python -m bench.step_profile --shape qwen3-8b --arms STD,CoRun --loads 16,256 \\
        --out docs/results/bench/step_profile.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gzip
import json
import re
import sys
import time
from pathlib import Path

import httpx

from bench import client, common, run, serverlog, workloads

#: Kernel kinds, tried in order (case-insensitive): the first pattern that matches a kernel's name names
#: its kind. Norms and rotary embeddings come before attention: FlashInfer names its own ones too.
KINDS = (
    ("moe", r"fused_moe|moe_align|moe_sum|topk_softmax|grouped_topk|expert"),
    ("sampler", r"_gumbel|_cand_|_reduce_chunks|_nucleus|sampling|softmax|sort|topk"),
    ("communication", r"nccl|all_?reduce|cross_device_reduce|custom_ar"),
    ("norm/activation", r"norm|rotary|rope|silu|act_and_mul|gelu"),
    ("attention", r"batchprefill|batchdecode|mergestate|fmha|flash_fwd|attn|attention"),
    ("gemm", r"gemm|nvjet|xmma|cutlass|cublas|splitkreduce|matmul|wgmma"),
)
_KIND_RES = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in KINDS)


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in _KIND_RES if pattern.search(name)), "other")


def graph_slots(sizes: list[int], running: int) -> int:
    """The decode graph a ``--corun`` server replays for ``running`` requests: the smallest of its
    capture sizes (tiers, then N) that holds them."""
    return min(n for n in sizes if n >= running)


def summarize_trace(path: Path, steps: int, top: int = 12) -> dict:
    """ms per step of a chrome trace's GPU kernels: in all, by kind, the ``top`` kernels by name, and the span.

    A step is one decode graph replay: the trace's ``cudaGraphLaunch`` calls count them where it
    records them (SGLang's profiler stops within a step of the ``steps`` it was asked for);
    otherwise ``steps`` does.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    if not kernels:
        raise ValueError(f"{path}: no GPU kernels in the trace")
    steps = sum(e.get("name") == "cudaGraphLaunch" for e in events) or steps
    by_name = collections.Counter()
    for e in kernels:
        by_name[e["name"]] += e["dur"]
    by_kind = collections.Counter()
    for name, us in by_name.items():
        by_kind[kind_of(name)] += us
    span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    per_step = 1e-3 / steps  # microseconds in the trace to milliseconds per step
    return {
        "steps_seen": steps,
        "kernel_ms_per_step": sum(by_name.values()) * per_step,
        "span_ms_per_step": span * per_step,
        "by_kind_ms": {kind: by_kind[kind] * per_step for kind, _ in (*KINDS, ("other", ""))},
        "top_kernels_ms": [[name, us * per_step] for name, us in by_name.most_common(top)],
    }


async def profile_load(url: str, prompts: list[list[int]], output_len: int, steps: int, out_dir: Path,
                       timeout: float = 600, settle: float = 5) -> tuple[Path, int]:
    """Decode ``prompts`` together; once all stream (or none more starts for ``settle`` seconds),
    profile ``steps`` steps; return the trace written and how many requests were streaming."""
    first = asyncio.Semaphore(0)
    limits = httpx.Limits(max_connections=len(prompts) + 8, max_keepalive_connections=len(prompts) + 8)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:

        async def stream(body: dict) -> None:
            async with http.stream("POST", url + "/generate", json=body) as reply:
                reply.raise_for_status()
                started = False
                async for line in reply.aiter_lines():
                    if not started and line.startswith("data:") and line[5:].strip() != "[DONE]":
                        started = True
                        first.release()

        tasks = [asyncio.create_task(stream(client.request(p, output_len, seed=i))) for i, p in enumerate(prompts)]
        try:
            running = 0
            while running < len(prompts):
                waiter = asyncio.create_task(first.acquire())
                await asyncio.wait([waiter, *tasks], timeout=settle if running else timeout,
                                   return_when=asyncio.FIRST_COMPLETED)
                if waiter.done():
                    running += 1
                    continue
                waiter.cancel()
                ended = [t for t in tasks if t.done()]
                if ended:
                    raise RuntimeError(f"a request ended before all {len(prompts)} streamed "
                                       f"({ended[0].exception() or 'finished'}): raise --output-len "
                                       f"or lower --settle")
                if not running:
                    raise RuntimeError(f"no request streamed within {timeout:.0f} s")
                break  # the server runs no more at once: profile the ones running
            out_dir.mkdir(parents=True, exist_ok=True)
            before = set(out_dir.glob("*.trace.json*"))
            reply = await http.post(url + "/start_profile", json={
                "output_dir": str(out_dir), "num_steps": steps, "activities": ["GPU"],
                "with_stack": False, "record_shapes": False, "profile_id": f"steps-{time.time():.0f}"})
            reply.raise_for_status()
            deadline = time.monotonic() + timeout
            sizes: dict[Path, int] = {}
            while time.monotonic() < deadline:
                written = {p: p.stat().st_size for p in set(out_dir.glob("*.trace.json*")) - before}
                if written and written == sizes:  # complete: its size held for a whole poll
                    return max(written, key=lambda p: p.stat().st_mtime), running
                sizes = written
                if not written and any(t.done() for t in tasks):
                    raise RuntimeError("a request ended while profiling: raise --output-len")
                await asyncio.sleep(1.0)
            raise RuntimeError(f"no trace in {out_dir} after {timeout:.0f} s")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def profiled(out: Path, shape: str, loads: list[int]) -> set[str]:
    """The arms whose rows in ``out`` cover every load of ``loads`` for ``shape``. An arm cut short is
    profiled again whole, on one server (the report keeps the latest row of each shape, arm and load)."""
    if not out.exists():
        return set()
    have = collections.defaultdict(set)
    for line in out.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if r["shape"] == shape:
                have[r["arm"]].add(r["load"])
    return {arm for arm, got in have.items() if set(loads) <= got}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_options(parser, out="docs/results/bench/step_profile.jsonl",
                       server_args="--attention-backend flashinfer --incremental-streaming-output")
    parser.add_argument("--arms", default="STD,CoRun", help=f"of {', '.join(run.ARMS)}")
    parser.add_argument("--loads", default="16,256", help="running requests while the steps are profiled")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=1536,
                        help="long enough that no request ends before the ramp, the settle and the steps are over")
    parser.add_argument("--traces", help="where the profiler's traces go (default: LOGS/traces); a trace is "
                        "megabytes, so a GPU queue chunk keeps them out of its results folder")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds without a new request streaming after which the load is what runs")
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--static-gb", type=float, default=None, help="static GPU memory per server, GiB")
    run.add_tier_options(parser)
    parser.add_argument("--arm-args", action="append", default=[], metavar="ARM=ARGS",
                        help="extra server options for one arm (repeatable), as in bench/run.py")
    parser.add_argument("--arm-env", action="append", default=[], metavar="ARM=NAME=VALUE",
                        help="an environment variable for one arm's server (repeatable), as in bench/run.py")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    from corun_sglang.records.record import TiersRecord
    from corun_sglang.core import tiers
    from corun_sglang.probes.launch import Server

    arms = run.arms_of(parser, args.arms)
    extra = run.arm_args(args.arm_args, arms)
    env = run.arm_env(args.arm_env, arms)
    loads = sorted({int(n) for n in args.loads.split(",")})
    if loads[-1] > args.max_running_requests:
        parser.error(f"a load above --max-running-requests {args.max_running_requests}")
    done = profiled(Path(args.out), args.shape, loads)
    arms = [a for a in arms if a not in done]
    if not arms:
        print("nothing to do: every arm's loads are in", args.out)
        return 0
    ckpt = common.prepare(args)
    traces = Path(args.traces) if args.traces else Path(args.logs) / "traces"
    shared = ["--max-running-requests", str(args.max_running_requests), *args.server_args.split()]
    record = None
    if "CoRun-tiers" in arms:
        record = run.tiers_record(args, args.shape, ckpt, shared, env["CoRun-tiers"]).source
    for arm in arms:
        tiered = ["--corun-decode-tiers", record] if arm == "CoRun-tiers" else []
        graphs = (tiers.capture_sizes(TiersRecord.load(record).tiers if tiered else (), args.max_running_requests)
                  if "--corun" in run.ARMS[arm] else None)
        server = Server(str(ckpt), run.ARMS[arm] + extra[arm] + tiered + shared, Path(args.logs) / f"profile-{arm}.log",
                        timeout=900, static_gb=args.static_gb, env=env[arm])
        try:
            contract = run.corun_contract(server.url) if graphs else {}
            served = contract.get("configuration") or {}
            if "decode tiers" in served:  # what the server captured, calibrated tiers included
                graphs = tiers.capture_sizes(served["decode tiers"], served["N"])
            for load in loads:
                prompts = workloads.prompts([(args.input_len, args.output_len)] * load, seed=load)
                out_dir = traces / f"{arm}-{load}"
                trace, running = asyncio.run(profile_load(server.url, prompts, args.output_len, args.steps,
                                                          out_dir, settle=args.settle))
                kv = serverlog.kv_at_profiles(server.log_text()).get(str(out_dir))
                row = {"shape": args.shape, "arm": arm, "load": load, "running": running, "steps": args.steps,
                       "input_len": args.input_len, "kv_tokens": kv, "trace": str(trace),
                       "graph_slots": graph_slots(graphs, running) if graphs else None,
                       **({"server_env": env[arm]} if env[arm] else {}),
                       **({"calibration": contract["calibration"]} if contract.get("calibration") else {}),
                       **summarize_trace(trace, args.steps), "server_command": server.command}
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                kinds = ", ".join(f"{k} {v:.2f}" for k, v in row["by_kind_ms"].items() if v)
                print(f"{arm} load {load} ({running} running): span {row['span_ms_per_step']:.2f} ms/step, "
                      f"kernels {row['kernel_ms_per_step']:.2f} ({kinds})", flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
