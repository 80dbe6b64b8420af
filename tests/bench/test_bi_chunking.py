"""``bench/bi_chunking.py`` on SGLang 0.5.17's own ``PrefillAdder``: in the batch-invariant mode without a
radix cache, a request with ``ignore_eos`` is cut where its pass ends, not at the deterministic alignment
(the control without ``ignore_eos`` never cuts a prompt shorter than the alignment). Run as a program: it
publishes its own server args, as a scheduler process does."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ignore_eos_requests_are_cut_off_the_alignment_and_the_suites_divergent_ones_are_those(tmp_path):
    out = tmp_path / "bi_chunking.json"
    subprocess.run([sys.executable, "-m", "bench.bi_chunking", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    got = json.loads(out.read_text())
    cut, control = got["ignore_eos"], got["stop_at_eos"]
    assert cut["split"] and control["split"] == []
    assert all(p["tokens"] <= got["chunk"] for p in cut["passes"] + control["passes"])
    assert any(p["tokens"] == got["chunk"] for p in cut["passes"][:-1])  # passes filled to the chunk by a cut
    # every prompt is prefilled once in the control, and once plus a continuation per cut in the replay
    queued = 32 - got["from"]
    assert sum(p["seqs"] for p in control["passes"]) == queued
    assert sum(p["seqs"] for p in cut["passes"]) == queued + len(cut["split"])
    assert sum(p["tokens"] for p in cut["passes"]) == sum(p["tokens"] for p in control["passes"])
    # the committed run: the prompts the arm diverged on in scenario a are the ones cut
    assert sorted(cut["split"]) == sorted(got["diverged"]["together"])
