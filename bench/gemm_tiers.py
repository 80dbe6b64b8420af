"""Which decode batch sizes give a row the same GEMM bits as the size-N batch.

For each linear layer of a checkpoint shape (qkv, o, gate_up, down, lm_head;
the attention projections and lm_head for an MoE shape), one seeded
random-normal bf16 weight and one [N, K] activation: the first M rows are
multiplied alone and compared, bit for bit, with the same rows of the product
of all N. A size M is equal for a layer when every row matches in every
trial. A size equal on every layer runs the same reduction for its rows as the
size-N batch does (the GEMM library picked a kernel with the same K order and
no split-K for both); a size that differs anywhere would give a request other
logits in an M-slot decode graph than in the N-slot one. This measures the
GEMMs only: attention and the row-wise layers are not part of it.

    python -m bench.gemm_tiers --shape qwen3-8b --out gemm_tiers.json

``--blas cublaslt`` asks PyTorch to run the products through cuBLASLt instead
of cuBLAS (``torch.backends.cuda.preferred_blas_library``): its heuristics may
keep one kernel over a wider range of sizes. ``--time`` also times each
product at each size (median of CUDA-event timings) and adds them up into the
GEMM time of one decode step (every layer's products times the number of
layers, and lm_head once): what a size costs through that library.
"""

from __future__ import annotations

import argparse
import sys

import torch

from bench import common
from corun_sglang.tools import synthetic

#: SGLang's default decode CUDA graph sizes up to 256.
DEFAULT_SIZES = [1, 2, 4, 8, 12, 16] + list(range(24, 257, 8))


def layers(shape: str, tp_size: int = 1) -> dict[str, tuple[int, int]]:
    """Layer name -> (K, N) of its GEMM on one tensor-parallel rank, for a synthetic shape."""
    return layers_of(synthetic.hf_config(shape), tp_size)


def layers_of(c: dict, tp_size: int = 1) -> dict[str, tuple[int, int]]:
    """Layer name -> (K, N) of its GEMM on one tensor-parallel rank, for a Qwen3 config (config.json)."""
    h, d = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    out = {
        "qkv": (h, (q + 2 * kv) // tp_size),
        "o": (q // tp_size, h),
        "lm_head": (h, c["vocab_size"] // tp_size),
    }
    if "num_experts" not in c:
        out["gate_up"] = (h, 2 * c["intermediate_size"] // tp_size)
        out["down"] = (c["intermediate_size"] // tp_size, h)
    return out


def equal_sizes(k: int, n_out: int, n: int, sizes: list[int], trials: int, device: str,
                linear=torch.nn.functional.linear) -> list[int]:
    """The sizes M whose rows of ``linear(x[:M], W)`` equal those rows of ``linear(x, W)`` in every trial."""
    equal = set(sizes)
    for trial in range(trials):
        gen = torch.Generator(device=device).manual_seed(trial)
        w = torch.randn(n_out, k, generator=gen, device=device, dtype=torch.bfloat16)
        x = torch.randn(n, k, generator=gen, device=device, dtype=torch.bfloat16)
        full = linear(x, w)
        for m in sorted(equal):
            if not torch.equal(linear(x[:m].clone(), w), full[:m]):
                equal.discard(m)
    return sorted(equal)


def time_sizes(k: int, n_out: int, sizes: list[int], device: str, iters: int = 20, trials: int = 5,
               linear=torch.nn.functional.linear) -> dict[int, float]:
    """Milliseconds of ``linear(x[:M], W)`` at each size M: ``iters`` products back to back over their
    elapsed time, the median of ``trials``, after ``iters`` untimed ones. On a GPU two CUDA events frame
    the batch, so the host's launches overlap the GPU's work, as in a replayed decode graph."""
    gen = torch.Generator(device=device).manual_seed(0)
    w = torch.randn(n_out, k, generator=gen, device=device, dtype=torch.bfloat16)
    x = torch.randn(max(sizes), k, generator=gen, device=device, dtype=torch.bfloat16)
    cuda = device.startswith("cuda")
    out = {}
    for m in sizes:
        xm = x[:m].clone()
        for _ in range(iters):
            linear(xm, w)
        out[m] = common.median_ms(lambda: linear(xm, w), iters, trials, cuda)
    return out


def step_gemm_ms(per_layer: dict[str, dict[int, float]], num_layers: int) -> dict[int, float]:
    """The GEMM time of one decode step at each size: every layer's product ``num_layers`` times,
    lm_head once."""
    sizes = set.intersection(*(set(t) for t in per_layer.values()))
    return {m: sum(t[m] * (1 if name == "lm_head" else num_layers) for name, t in per_layer.items())
            for m in sorted(sizes)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-8b", choices=sorted(synthetic.SHAPES))
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--n", type=int, default=256, help="the decode graph size compared against")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--layers", default=None, help="comma-separated subset of the shape's layers")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--blas", choices=("default", "cublas", "cublaslt"), default="default",
                        help="the BLAS library PyTorch runs the products through (default: PyTorch's choice)")
    parser.add_argument("--time", action="store_true", help="also time each product at each size")
    parser.add_argument("--out", default=None)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.blas != "default":
        torch.backends.cuda.preferred_blas_library(args.blas)

    sizes = sorted({int(s) for s in args.sizes.split(",") if int(s) <= args.n} | {args.n})
    shapes = layers(args.shape, args.tp_size)
    if args.layers:
        shapes = {name: shapes[name] for name in args.layers.split(",")}
    per_layer = {
        name: {"k": k, "n_out": n_out, "equal": equal_sizes(k, n_out, args.n, sizes, args.trials, args.device)}
        for name, (k, n_out) in shapes.items()
    }
    everywhere = sorted(set(sizes).intersection(*(set(r["equal"]) for r in per_layer.values())))
    timed = {}
    if args.time:
        for name, (k, n_out) in shapes.items():
            per_layer[name]["ms"] = time_sizes(k, n_out, sizes, args.device)
        timed = {"step_gemm_ms": step_gemm_ms({name: r["ms"] for name, r in per_layer.items()},
                                              synthetic.hf_config(args.shape)["num_hidden_layers"])}
    result = {
        "shape": args.shape, "tp_size": args.tp_size, "n": args.n, "sizes": sizes, "trials": args.trials,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__, "blas": str(torch.backends.cuda.preferred_blas_library()).rsplit(".", 1)[-1],
        "layers": per_layer, "equal_on_every_layer": everywhere, **timed,
        "command": " ".join([sys.executable, *sys.argv]),
    }
    summary = {name: r["equal"] for name, r in per_layer.items()} | {"every layer": everywhere}
    if timed:
        summary["step GEMM ms"] = {m: round(ms, 3) for m, ms in timed["step_gemm_ms"].items()}
    return common.finish(result, summary, args.out)


if __name__ == "__main__":
    sys.exit(main())
