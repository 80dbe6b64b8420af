"""``bench/bi_sampler.py`` on SGLang 0.5.17's own sampling functions: a seeded row keeps its token beside another
sampled request (the control) and changes it beside a greedy one (sglang#35697). Run as a program, as the
module asks (Triton's interpreter has to be chosen before torch is imported)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_greedy_batchmate_changes_a_seeded_token_and_a_sampled_one_does_not(tmp_path):
    out = tmp_path / "bi_sampler.json"
    subprocess.run([sys.executable, "-m", "bench.bi_sampler", "--rows", "12", "--vocab", "512", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    got = json.loads(out.read_text())
    assert got["rows"] == len(got["tokens"]) == 12
    assert got["differ_beside_sampled"] == 0
    assert got["differ_beside_greedy"] >= 6
    assert got["differ_beside_greedy"] == sum(r["beside_greedy"] != r["alone"] for r in got["tokens"])
