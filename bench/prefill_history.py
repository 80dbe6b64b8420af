"""Does a stock SGLang prefill depend on the prefills that ran before it? And do bursts of mixed prefills take
the server down? The question behind a crash of default SGLang in the determinism suite.

SGLang 0.5.17 runs prefills in its breakable CUDA graph by default (captured token counts 4 to 2048), and
that graph keeps its graph-break inputs (each layer's attention inputs) as weak references, so the allocator
can hand their memory to buckets captured later; replaying a bucket can then read memory another bucket
owns, which shows as wrong outputs or an illegal memory access, depending on the layout (sglang#37606, open;
sglang#37448 restores strong references). The suite's default server, on SmolLM2, died of an illegal memory
access in a burst of about 200 requests of mixed lengths (docs/results/suite/smollm2-default-corun/note.md).

One server per arm, each prompt alone (one request in flight, greedy, the prompt's logprobs and a few new
tokens), so that what a prompt computes is a function of the prompt alone and only the server's history
differs:

1. ``orders``: every prompt (lengths spread over the captured counts) once in its own order, then in
   ``--orders - 1`` shuffled orders: each output compared bit for bit with the first order's;
2. ``bursts``: ``--bursts`` times, ``--burst`` requests of mixed lengths all at once (the suite's scenario b);
3. ``after``: the prompts once more, alone, in the first order, compared with it.

Arms: ``graph`` (SGLang as the suite's default arm serves it: radix cache off, FlashInfer) and ``eager``
(the same with ``--disable-prefill-cuda-graph``): the control, whose prefills run without the graph.
A difference in ``graph`` alone says its history reaches a prefill's bits; a crash in ``graph`` alone says
the graph takes it down. The result names, per arm, the prompts that differed and whether the server lived.

    python -m bench.prefill_history --shape smollm2 --out prefill_history.json

Invariants: the prompts, orders and bursts are a pure function of ``--seed`` (and the model's vocabulary); an output compared is one the server
returned whole (``max_new_tokens`` tokens); a server that died is reported with its log's first error line,
never retried.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from corun_sglang.core.compare import Generation, digest, first_divergence
from corun_sglang.probes import generate, harness

ARMS = {"graph": [], "eager": ["--disable-prefill-cuda-graph"]}
#: What every arm's server gets: the suite's default arm (``tests/gpu/test_suite.py``).
SERVER_ARGS = ["--disable-radix-cache", "--attention-backend", "flashinfer", "--chunked-prefill-size", "2048"]


def lengths(count: int, seed: int, low: int = 4, high: int = 2000) -> list[int]:
    """``count`` prompt lengths, log-uniform in [low, high]: spread over the graph's captured token counts."""
    rnd = random.Random(seed)
    return [generate.log_uniform(rnd, low, high) for _ in range(count)]


def orders(count: int, how_many: int, seed: int) -> list[list[int]]:
    """The first order (0 .. count - 1), then ``how_many - 1`` shuffles of it."""
    rnd = random.Random(seed)
    return [list(range(count))] + [rnd.sample(range(count), count) for _ in range(how_many - 1)]


def crowds(bursts: int, burst: int, seed: int, vocab: int) -> list[list[list[int]]]:
    """``bursts`` crowds of ``burst`` prompts of 16 to 1024 tokens, each token below ``vocab`` (the model's)."""
    prompts = generate.token_prompts(bursts * burst, 16, 1024, seed, vocab)
    return [prompts[b * burst:(b + 1) * burst] for b in range(bursts)]


def body(prompt: list[int], new_tokens: int) -> dict:
    return {"input_ids": prompt, "return_logprob": True, "logprob_start_len": 0,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}}


def compared(reference: dict[int, Generation], run: dict[int, Generation]) -> dict[int, int]:
    """{prompt index: first divergent step} for the prompts of ``run`` that differ from ``reference``."""
    out = {}
    for i, gen in run.items():
        step = first_divergence(reference[i], gen)
        if step is not None:
            out[i] = step
    return out


def run_arm(url: str, prompts: list[list[int]], sequence: list[list[int]], bursts: list[list[list[int]]],
            new_tokens: int, alive) -> dict:
    """The three phases on one server; stops at the first failed request (``alive()`` says whether the server
    still runs)."""
    send = harness.http_sender(url)
    result = {"orders": [], "bursts": 0, "after": None, "error": None}
    first: dict[int, Generation] = {}

    def alone(order: list[int]) -> dict[int, Generation]:
        out = {}
        for i in order:
            gen = Generation.of_reply(send(body(prompts[i], new_tokens)))
            if len(gen.tokens) != new_tokens:
                raise RuntimeError(f"prompt {i}: {len(gen.tokens)} of {new_tokens} tokens")
            out[i] = gen
        return out

    try:
        for k, order in enumerate(sequence):
            run = alone(order)
            if k == 0:
                first = run
                result["digests"] = {i: digest(g) for i, g in sorted(run.items())}
            result["orders"].append({"order": k, "differ": compared(first, run)})
        for crowd in bursts:
            harness.together(send, [body(p, 128) for p in crowd])
            result["bursts"] += 1
        result["after"] = {"differ": compared(first, alone(sequence[0]))}
    except Exception as exc:  # noqa: BLE001 (a failed request ends the arm; what failed is the finding)
        result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    result["alive"] = alive()
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="smollm2", help="smollm2 or a synthetic shape")
    parser.add_argument("--arms", default="graph,eager")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--static-gb", type=float, default=12.0)
    parser.add_argument("--checkpoints", default="/tmp/checkpoints")
    parser.add_argument("--out", default="prefill_history.json")
    parser.add_argument("--logs", default="/tmp/bench-logs")
    return parser


def main(argv=None) -> int:
    from bench import common
    from bench.first_start import checkpoint
    from corun_sglang.probes.launch import Server

    args = build_parser().parse_args(argv)
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    model = checkpoint(args.shape, Path(args.checkpoints))
    vocab = min(json.loads((model / "config.json").read_text())["vocab_size"], generate.VOCAB)
    sizes = lengths(args.prompts, args.seed)
    prompts = generate.sized_prompts(sizes, args.seed, vocab)
    sequence = orders(len(prompts), args.orders, args.seed)
    bursts = crowds(args.bursts, args.burst, args.seed + 1, vocab)
    result = {"command": "python -m bench.prefill_history " + " ".join(argv or []), "gpu": common.gpu_uuid(),
              "lengths": sizes, "arms": {}}
    for arm in args.arms.split(","):
        server = Server(str(model), [*SERVER_ARGS, *ARMS[arm]], Path(args.logs) / f"prefill-history-{arm}.log",
                        static_gb=args.static_gb)
        try:
            got = run_arm(server.url, prompts, sequence, bursts, args.new_tokens, lambda: server.proc.poll() is None)
            said = [line.strip() for line in server.log_text().splitlines() if "Error:" in line]
            got["first_error_line"] = said[0][:300] if said else None
            got["server_args"] = [*SERVER_ARGS, *ARMS[arm]]
        finally:
            server.stop()
        result["arms"][arm] = got
        print(json.dumps({arm: summarize_arm(got)}), flush=True)
    return common.finish(result, {arm: summarize_arm(r) for arm, r in result["arms"].items()}, args.out)


def summarize_arm(r: dict) -> dict:
    """Prompts that differed from the first order, per later order and after the bursts; the bursts that
    ran; whether the server lived, and its first error."""
    return {"differ_in_orders": [len(o["differ"]) for o in r["orders"][1:]],
            "differ_after_bursts": None if r["after"] is None else len(r["after"]["differ"]),
            "bursts": r["bursts"], "alive": r["alive"], "error": r["error"],
            "first_error_line": r.get("first_error_line")}


if __name__ == "__main__":
    raise SystemExit(main())
