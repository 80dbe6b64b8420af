"""Padding worst case: one active request while the decode graph has N slots (N = --max-running-requests).

For each N, a ``--corun`` server replays the size-N graph for a single
request (calibration off: calibrated decode tiers would replay a smaller
graph); its decode time per token (TPOT) against N shows what padding costs
when the server is nearly idle. A default SGLang server (which pads only to
its nearest captured size) gives the reference. Rows go to ``--out``.

    python -m bench.padding --shape qwen3-8b --n 1,8,32,64,128,256 --out docs/results/bench/padding.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from bench import client, common, workloads


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_options(parser, out="docs/results/bench/padding.jsonl",
                       server_args="--attention-backend flashinfer --disable-prefill-cuda-graph "
                       "--incremental-streaming-output")
    parser.add_argument("--n", default="1,8,32,64,128,256")
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)

    from corun_sglang.probes.launch import Server

    ckpt = common.prepare(args)
    arms = [("STD", None)] + [("CoRun", int(n)) for n in args.n.split(",")]
    for arm, n in arms:
        extra = (["--corun", "--corun-calibrate", "off", "--max-running-requests", str(n)] if n else [])
        extra += args.server_args.split()
        server = Server(str(ckpt), extra, Path(args.logs) / f"padding-{arm}-{n}.log", timeout=900)
        try:
            tpots = []
            for rep in range(args.reps):
                prompt = workloads.prompts([(args.input_len, args.output_len)], seed=rep)[0]
                records, duration = asyncio.run(
                    client.run(server.url, [client.request(prompt, args.output_len, seed=rep)], 1)
                )
                tpots.append(client.summarize(records, duration)["median_tpot_ms"])
        finally:
            server.stop()
        row = {"shape": args.shape, "arm": arm, "n": n, "tpot_ms": tpots,
               "median_tpot_ms": statistics.median(tpots), "server_command": server.command}
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{arm} N={n}: median TPOT {row['median_tpot_ms']:.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
