"""Why a seeded request's sampled token depends on its batchmates in SGLang's batch-invariant mode, shown with
SGLang's own sampling functions on the CPU.

With ``--enable-deterministic-inference`` SGLang samples on its pytorch backend with a seed per request
(``multinomial_with_seed``: Gumbel noise hashed from the seed, the position and the column). ``Sampler.forward``
chooses one path per batch: when no request of the batch needs top-k, top-p or min-p,
``sampling_from_probs_torch``, whose columns are vocabulary ids; when any request does (a greedy one is top-k 1),
``top_k_top_p_min_p_sampling_from_probs_torch`` for every row, which sorts each row first, so the noise falls on
ranks instead of ids (sglang#35697, open). A request's token then follows the batch it landed in.

For ``--rows`` distributions over ``--vocab`` tokens (softmax of normal logits at ``--temperature``), each with a
seed and a position, the token the request gets in three batches:

- ``alone``: the request by itself (no filter in the batch: the first path);
- ``beside_sampled``: beside another unfiltered sampled request (still the first path): the control, which
  must give the alone token on every row, or the comparison would show something other than the path;
- ``beside_greedy``: beside a greedy request (the second path).

    python -m bench.bi_sampler --out bi_sampler.json

The rows live on the CPU, where SGLang's hash kernel (Triton) runs in Triton's interpreter: the module sets
``TRITON_INTERPRET=1`` and ``TORCHDYNAMO_DISABLE=1`` before it imports torch, so run it as a program.

Invariants: the rows, seeds and positions are a pure function of ``--seed``; each batch goes through the SGLang
function ``Sampler.forward`` would pick for it, with the arguments it would pass.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch  # noqa: E402

from sglang.srt.layers.sampler import (  # noqa: E402
    sampling_from_probs_torch, top_k_top_p_min_p_sampling_from_probs_torch)
from sglang.srt.sampling.sampling_params import TOP_K_ALL  # noqa: E402


def batch_tokens(probs: torch.Tensor, top_ks: list[int], seeds: torch.Tensor, positions: torch.Tensor) -> list[int]:
    """The tokens SGLang's seeded sampler gives the rows of one batch: the simple path when no row filters
    (every ``top_k`` is ``TOP_K_ALL``, top-p 1, min-p 0), else the sorted one for every row."""
    n = probs.shape[0]
    if all(k == TOP_K_ALL for k in top_ks):
        out = sampling_from_probs_torch(probs, sampling_seed=seeds, positions=positions)
    else:
        out = top_k_top_p_min_p_sampling_from_probs_torch(
            probs, torch.tensor(top_ks, dtype=torch.int32), torch.ones(n), torch.zeros(n), False, seeds, positions)
    return [int(t) for t in out]


def rows(count: int, vocab: int, temperature: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(probs, seeds, positions) of ``count`` requests: a pure function of the arguments."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(count, vocab, generator=gen, dtype=torch.float32) * 3.0
    probs = torch.softmax(logits / temperature, dim=-1)
    seeds = torch.randint(0, 2**31, (count,), generator=gen, dtype=torch.int64)
    positions = torch.randint(0, 4096, (count,), generator=gen, dtype=torch.int64)
    return probs, seeds, positions


def run(count: int, vocab: int, temperature: float, seed: int) -> dict:
    """Per row, the token alone, beside a sampled request and beside a greedy one; and how many differ."""
    probs, seeds, positions = rows(count + 1, vocab, temperature, seed)
    other = (probs[count:], seeds[count:], positions[count:])  # the batchmate: the same row in every batch
    out = []
    for i in range(count):
        row = (probs[i:i + 1], seeds[i:i + 1], positions[i:i + 1])

        def beside(top_k: int) -> int:
            pair = [torch.cat([a, b]) for a, b in zip(row, other)]
            return batch_tokens(pair[0], [TOP_K_ALL, top_k], pair[1], pair[2])[0]

        out.append({"alone": batch_tokens(row[0], [TOP_K_ALL], row[1], row[2])[0],
                    "beside_sampled": beside(TOP_K_ALL), "beside_greedy": beside(1)})
    return {"rows": count, "vocab": vocab, "temperature": temperature, "seed": seed,
            "differ_beside_sampled": sum(r["beside_sampled"] != r["alone"] for r in out),
            "differ_beside_greedy": sum(r["beside_greedy"] != r["alone"] for r in out),
            "tokens": out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--vocab", type=int, default=49152, help="SmolLM2's vocabulary")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    result = run(args.rows, args.vocab, args.temperature, args.seed)
    summary = {k: v for k, v in result.items() if k != "tokens"}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
