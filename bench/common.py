"""What every serving benchmark shares: the checkpoint, server options, outputs and logs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path


def add_options(parser: argparse.ArgumentParser, out: str, server_args: str) -> None:
    parser.add_argument("--shape", default="qwen3-8b", help="synthetic checkpoint shape")
    parser.add_argument("--checkpoint", help="model folder (default: /tmp/ckpt-SHAPE, made if absent)")
    parser.add_argument("--weights", choices=("in-place", "files"), default="in-place",
                        help="synthetic weights drawn inside the server, or written as files")
    parser.add_argument("--server-args", default=server_args, help="options for every server")
    parser.add_argument("--out", default=out, help="JSON lines, appended")
    parser.add_argument("--logs", default="/tmp/bench-logs", help="server logs")


def prepare(args: argparse.Namespace) -> Path:
    """Create the output and log folders; return the model folder, made if absent."""
    from corun_sglang.tools import synthetic

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    return synthetic.prepare(args.checkpoint or f"/tmp/ckpt-{args.shape}", args.shape, args.weights)


def finish(result: dict, summary: dict, out: str | None) -> int:
    """Print ``summary`` as JSON and write the whole ``result`` to ``out`` (when given); exit status 0."""
    print(json.dumps(summary, indent=1))
    save(result, out)
    return 0


def save(result: dict, out: str | None) -> None:
    """Write ``result`` to ``out`` (when given), as far as it has come: a stage that takes the process down
    leaves what ran before it."""
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


def gpu_uuid() -> str | None:
    """The UUID of the first GPU this process sees (``nvidia-smi``), or None where none can be read."""
    device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", device],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def median_ms(fn, iters: int = 20, trials: int = 5, cuda: bool = True) -> float:
    """Milliseconds of one call of ``fn``: ``iters`` calls back to back over their elapsed time, the median of
    ``trials``. On a GPU two CUDA events frame the calls, so the host's launches overlap the GPU's work, as
    in a replayed graph; elsewhere the wall clock. Warm ``fn`` up first."""
    import statistics
    import time

    took = []
    for _ in range(trials):
        if cuda:
            import torch

            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            took.append(begin.elapsed_time(end) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            took.append((time.perf_counter() - t0) * 1e3 / iters)
    return statistics.median(took)
