"""Does a prefix-cache hit on a fixed prefill grid give the cold run's bits? The experiment a deterministic
prefix cache rests on, on stock SGLang, before anything is built on it.

The design under test: every prompt prefills in chunks of G tokens from position 0 (SGLang's chunked
prefill with ``--chunked-prefill-size G``, one request per prefill batch), and the cache serves only hits
that end on that grid. A warm request then computes exactly the chunks the cold run computed after the
hit, in the same shapes, so its output should carry the cold run's bits. Each case serves a prompt cold
(``/flush_cache`` first), then warm after its prefix was served alone, and compares the outputs bit for
bit (``compare.first_divergence``):

- ``grid``: the prefix ends on the grid (m G tokens): the design's claim, expected identical;
- ``off-grid``: the prefix ends 7 tokens past the grid: the control, expected to differ (the suffix's
  chunks then start off the grid);
- ``whole``: the same prompt twice: SGLang leaves the last token to compute, a one-token step the cold
  run never ran; expected to differ unless the cold run's last token also runs alone (the final-token
  step of the design), which stock SGLang does not do.

The server's ``cached_tokens`` must show each warm hit's length, or the case proves nothing. It also
times each prompt's prefill alone at every G (time to first token, the median of ``--repeats``), against
SGLang's default chunk size: what the grid costs long and short prompts.

    python -m bench.prefix_grid --shape qwen3-8b --grids 256,1024 --out prefix_grid.json

Invariants: ``cases`` is a pure function of its arguments (prompts from ``tools.generate``); a case's
verdict counts only when its warm run hit the cache by the length the case intends.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from corun_sglang.core.compare import Generation, first_divergence
from corun_sglang.probes import generate, harness

#: Tokens past the grid where an ``off-grid`` prefix ends.
OFF_GRID = 7


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str  # grid | off-grid | whole
    grid: int
    prompt: tuple[int, ...]
    prefix: int  # tokens of the prompt the warm run should find cached

    def warm_up(self) -> list[int]:
        """What is served first, alone, so the warm run hits ``prefix`` tokens."""
        return list(self.prompt[: self.prefix]) if self.kind != "whole" else list(self.prompt)


def cases(grid: int, lengths: list[int], vocab: int, seed: int = 0) -> list[Case]:
    """Per prompt length: a grid hit, an off-grid hit and a whole-prompt hit (the prefix the largest
    multiple of ``grid`` below the length, at least one chunk)."""
    out = []
    for k, n in enumerate(lengths):
        (prompt,) = generate.sized_prompts([n], seed + k, vocab)
        on = max(grid, (len(prompt) - 1) // grid * grid)
        if on + OFF_GRID >= len(prompt):
            continue
        out += [Case("grid", grid, tuple(prompt), on), Case("off-grid", grid, tuple(prompt), on + OFF_GRID),
                Case("whole", grid, tuple(prompt), len(prompt) - 1)]
    return out


def _body(prompt: list[int], new_tokens: int) -> dict:
    return {"input_ids": prompt, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}}


def run_case(url: str, case: Case, new_tokens: int) -> dict:
    """The case served cold (an empty cache), then warm (after its warm-up alone), one request in flight."""
    send = harness.http_sender(url)
    harness.flush_cache(url)
    cold = send(_body(list(case.prompt), new_tokens))
    harness.flush_cache(url)
    send(_body(case.warm_up(), new_tokens))
    warm = send(_body(list(case.prompt), new_tokens))
    hit = warm["meta_info"].get("cached_tokens", 0)
    step = first_divergence(Generation.of_reply(cold), Generation.of_reply(warm))
    return {"kind": case.kind, "grid": case.grid, "length": len(case.prompt), "intended_hit": case.prefix,
            "cached_tokens": hit, "hit_as_intended": hit == case.prefix, "first_divergence": step,
            "identical": step is None, "tokens": len(Generation.of_reply(warm).tokens)}


def prefill_ms(url: str, prompt: list[int], repeats: int) -> float:
    """Median time to the first token of ``prompt`` alone, from an empty cache (ms)."""
    send = harness.http_sender(url)
    times = []
    for _ in range(repeats):
        harness.flush_cache(url)
        start = time.perf_counter()
        send(_body(prompt, 1))
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def build_parser() -> argparse.ArgumentParser:
    from bench import common

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_options(parser, out="prefix_grid.json", server_args="--attention-backend flashinfer")
    parser.add_argument("--grids", default="256,1024", help="chunk sizes G, comma-separated")
    parser.add_argument("--lengths", default="600,2100,5000", help="prompt lengths of the cases")
    parser.add_argument("--cost-lengths", default="128,1024,4096,16000", help="prompt lengths timed")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--static-gb", type=float, default=40.0)
    return parser


def main(argv=None) -> int:
    from bench import common
    from corun_sglang.probes.launch import Server

    args = build_parser().parse_args(argv)
    ckpt = common.prepare(args)
    vocab = json.loads((Path(ckpt) / "config.json").read_text())["vocab_size"]
    lengths = [int(n) for n in args.lengths.split(",")]
    timed = generate.sized_prompts([int(n) for n in args.cost_lengths.split(",")], 99, min(vocab, generate.VOCAB))
    result = {"command": "python -m bench.prefix_grid " + " ".join(argv or []), "gpu": common.gpu_uuid(),
              "cases": [], "prefill_ms": {}}
    for grid in ["default", *[int(g) for g in args.grids.split(",")]]:
        chunk = [] if grid == "default" else ["--chunked-prefill-size", str(grid)]
        server = Server(str(ckpt), ["--prefill-max-requests", "1", *chunk, *args.server_args.split()],
                        Path(args.logs) / f"prefix-grid-{grid}.log", static_gb=args.static_gb)
        try:
            if grid != "default":
                for case in cases(grid, lengths, min(vocab, generate.VOCAB)):
                    result["cases"].append(run_case(server.url, case, args.new_tokens))
                    print(json.dumps(result["cases"][-1]), flush=True)
            result["prefill_ms"][str(grid)] = {len(p): prefill_ms(server.url, p, args.repeats) for p in timed}
        finally:
            server.stop()
    return common.finish(result, summarize(result["cases"]), args.out)


def summarize(rows: list[dict]) -> dict:
    """Per kind and grid: cases whose warm run hit as intended, and how many of those were identical."""
    out = {}
    for r in rows:
        cell = out.setdefault(f"{r['kind']} G={r['grid']}", {"cases": 0, "hit_as_intended": 0, "identical": 0})
        cell["cases"] += 1
        if r["hit_as_intended"]:
            cell["hit_as_intended"] += 1
            cell["identical"] += r["identical"]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
