"""Cross-TP invariance on GPUs: with ``--corun-tp-invariant K`` a server at TP 1 and one at TP 2 give every
needle the same tokens and logprobs, bit for bit, alone and among co-runners; without it (the negative
control, ``CORUN_CROSS_TP_K=0``) the two TP sizes differ, while each keeps the CoRun contract within itself.

Needs as many GPUs as the largest size of ``CORUN_CROSS_TP_SIZES`` (default ``1,2``); the servers run one after
another. The checkpoint holds its weights in files (``CORUN_WEIGHTS=files``: drawn in place, a split weight is
drawn per rank, so TP 1 and TP 2 would serve different models). Environment: ``CORUN_CROSS_TP_K`` (default 2;
0 for the control), ``CORUN_SHAPE`` (default ``qwen3-8b``), ``CORUN_CROSS_TP_STATIC_GB`` (default 40),
``CORUN_RESULTS`` (one row per needle and run in ``cross_tp.jsonl``, a summary in ``cross_tp.json``).
"""

import json
import os
from pathlib import Path

import pytest

from corun_sglang.core.compare import Generation, digest
from corun_sglang.probes import generate, harness

K = int(os.environ.get("CORUN_CROSS_TP_K", "2"))
SIZES = [int(s) for s in os.environ.get("CORUN_CROSS_TP_SIZES", "1,2").split(",")]
STATIC_GB = float(os.environ.get("CORUN_CROSS_TP_STATIC_GB", "40"))
NEEDLES, OTHERS, NEW_TOKENS = 12, 52, 32


def _body(prompt: list[int]) -> dict:
    return {"input_ids": prompt, "return_logprob": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}}


def _whole(reply: dict) -> str:
    """The digest of a reply that generated all ``NEW_TOKENS`` tokens, each with its logprob: two empty or cut
    outputs would agree for no reason."""
    g = Generation.of_reply(reply)
    assert len(g.tokens) == len(g.logprobs) == NEW_TOKENS, f"{len(g.tokens)} tokens, not {NEW_TOKENS}"
    return digest(g)


def _runs(url: str, needles: list[list[int]], others: list[list[int]]) -> dict:
    """Each needle's digest alone (one request in flight), then with the others and every needle sent at
    once (their overlap is not read back here: the suite proves the contract within one TP size)."""
    send = harness.http_sender(url)
    alone = [_whole(send(_body(p))) for p in needles]
    replies = harness.together(send, [_body(p) for p in needles + others])
    return {"alone": alone, "among": [_whole(r) for r in replies]}


@pytest.fixture(scope="module")
def checkpoint_files(tmp_path_factory):
    from corun_sglang.tools import synthetic

    shape = os.environ.get("CORUN_SHAPE", "qwen3-8b")
    root = Path(os.environ.get("CORUN_CHECKPOINTS", str(tmp_path_factory.getbasetemp())))
    return synthetic.prepare(root / f"ckpt-{shape}-files", shape, "files"), shape


def test_tp_sizes_give_the_same_bits_with_k_shards_and_differ_without(launch, checkpoint_files, record):
    import torch

    if torch.cuda.device_count() < max(SIZES):
        pytest.skip(f"needs {max(SIZES)} GPUs")
    ckpt, shape = checkpoint_files
    vocab = min(json.loads((ckpt / "config.json").read_text())["vocab_size"], generate.VOCAB)
    needles = generate.token_prompts(NEEDLES, 16, 1500, seed=11, vocab=vocab)
    others = generate.token_prompts(OTHERS, 16, 1500, seed=12, vocab=vocab)
    shards = ["--corun-tp-invariant", str(K)] if K else []
    runs = {}
    for tp in SIZES:
        server = launch(str(ckpt), "--corun", "--tp-size", str(tp), *shards, name=f"cross-tp-{tp}",
                        static_gb=STATIC_GB)
        try:
            runs[tp] = _runs(server.url, needles, others)
        finally:
            server.stop()
    rows = [{"shape": shape, "k": K, "tp": tp, "needle": i, "run": run, "digest": d}
            for tp, by_run in runs.items() for run, ds in by_run.items() for i, d in enumerate(ds[:NEEDLES])]
    folder = os.environ.get("CORUN_RESULTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "cross_tp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    within = {tp: sum(a != b for a, b in zip(r["alone"], r["among"][:NEEDLES])) for tp, r in runs.items()}
    first = runs[SIZES[0]]["alone"]
    across = {tp: sum(a != b for a, b in zip(first, r["alone"])) for tp, r in runs.items() if tp != SIZES[0]}
    record("cross_tp", {"shape": shape, "k": K, "sizes": SIZES, "needles": NEEDLES, "others": OTHERS,
                        "new_tokens": NEW_TOKENS, "divergent_within_tp": within, "divergent_across_tp": across})
    assert all(v == 0 for v in within.values()), f"the CoRun contract broke within a TP size: {within}"
    if K:
        assert all(v == 0 for v in across.values()), f"K = {K} shards: TP sizes differ on {across} needles"
    else:
        assert any(v > 0 for v in across.values()), "control: without shards the TP sizes should differ"
