"""What every serving benchmark shares: the checkpoint, server options, outputs and logs."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_options(parser: argparse.ArgumentParser, out: str, server_args: str) -> None:
    parser.add_argument("--shape", default="qwen3-8b", help="synthetic checkpoint shape")
    parser.add_argument("--checkpoint", help="existing checkpoint folder (default: /tmp/ckpt-SHAPE, written if absent)")
    parser.add_argument("--server-args", default=server_args, help="options for every server")
    parser.add_argument("--out", default=out, help="JSON lines, appended")
    parser.add_argument("--logs", default="/tmp/bench-logs", help="server logs")


def prepare(args: argparse.Namespace) -> Path:
    """Create the output and log folders; return the checkpoint folder, written if absent."""
    from corun_sglang import synthetic

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    ckpt = Path(args.checkpoint or f"/tmp/ckpt-{args.shape}")
    if not (ckpt / "config.json").exists():
        synthetic.write_checkpoint(ckpt, args.shape, seed=0)
    return ckpt
