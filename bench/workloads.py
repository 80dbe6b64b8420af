"""Benchmark workloads: (input, output) length pairs, and token-id prompts for them.

Trace files live in ``bench/workloads/``; ``fixed-I-O`` names a workload of
identical requests. Prompts are seeded random token ids, so every arm sees
the same requests.
"""

from __future__ import annotations

import csv
from pathlib import Path

from corun_sglang.probes import generate

FOLDER = Path(__file__).parent / "workloads"
TRACES = {
    "sharegpt": "sharegpt_lengths.csv",
    "azure-conv": "azure2023_conv_lengths.csv",
    "blazedit-synthetic": "blazedit_standin_synthetic.csv",
}
FIXED = [f"fixed-{i}-{o}" for i in (1024, 4096) for o in (128, 2048)]
ALL = list(TRACES) + FIXED


def identical(name: str) -> bool:
    """Whether every request of workload ``name`` has the same lengths (a ``fixed-I-O`` workload)."""
    return name.startswith("fixed-")


def lengths(name: str, count: int = 300) -> list[tuple[int, int]]:
    """The first ``count`` (input, output) pairs of workload ``name``."""
    if identical(name):
        _, i, o = name.split("-")
        return [(int(i), int(o))] * count
    with open(FOLDER / TRACES[name]) as f:
        rows = [(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]
    if len(rows) < count:
        raise ValueError(f"{name} has {len(rows)} rows, {count} asked")
    return rows[:count]


def prompts(pairs: list[tuple[int, int]], seed: int = 0, vocab: int = generate.VOCAB) -> list[list[int]]:
    """A token-id prompt of each pair's input length, from ``seed`` (``generate.sized_prompts``)."""
    return generate.sized_prompts([i for i, _ in pairs], seed, vocab)
