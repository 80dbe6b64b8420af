"""Decode tiers on a GPU, end to end on a synthetic checkpoint.

``verify-tiers`` must reject every candidate size whose GEMMs differ from the N-row batch on this GPU
(``bench/gemm_tiers.py`` finds them: the negative control, showing the probe sees a changed kernel),
and keep only sizes whose GEMMs match. A server serving the record must give a needle the bits of
its N-slot reference whatever the load, so through every tier; and a record whose environment
differs from the server's must keep the server from starting.

Environment: ``CORUN_TIER_CANDIDATES`` (default: sizes from 8 to 192), ``CORUN_RESULTS`` (the record,
server logs and a summary are written there).
"""

import json
import os
from pathlib import Path

import pytest

from corun_sglang.probes import verify_tiers
from corun_sglang.core import tiers

pytestmark = pytest.mark.e2e

N = 256


def _gemm_differs(checkpoint: str, sizes: list[int]) -> set[int]:
    """Sizes whose rows of some linear layer of ``checkpoint`` differ from the N-row product."""
    from bench import gemm_tiers

    config = json.loads((Path(checkpoint) / "config.json").read_text())
    differ = set()
    for k, n_out in gemm_tiers.layers_of(config).values():
        differ |= set(sizes) - set(gemm_tiers.equal_sizes(k, n_out, N, sizes, trials=3, device="cuda"))
    return differ


@pytest.fixture(scope="module")
def verified(checkpoint, tmp_path_factory):
    folder = Path(os.environ.get("CORUN_RESULTS") or tmp_path_factory.mktemp("tiers"))
    folder.mkdir(parents=True, exist_ok=True)
    candidates = tiers.parse_sizes(os.environ.get("CORUN_TIER_CANDIDATES", "8,16,32,48,64,72,88,96,128,160,192"))
    differ = _gemm_differs(checkpoint, candidates)
    static = float(os.environ["CORUN_STATIC_GB"]) if os.environ.get("CORUN_STATIC_GB") else None
    record = verify_tiers.verify(checkpoint, candidates, N, folder / "tiers.json", folder / "verify-tiers.log",
                                 static_gb=static)
    (folder / "tiers-summary.json").write_text(json.dumps(
        {"candidates": candidates, "gemm_differs": sorted(differ), "record": record.to_json()}, indent=1))
    return record, candidates, differ, folder


def test_verify_tiers_rejects_every_size_whose_gemms_differ(verified):
    record, candidates, differ, _ = verified
    assert differ, f"no candidate among {candidates} has other GEMM bits: the negative control needs one"
    assert differ <= set(record.rejected), (sorted(differ), record.to_json())
    assert not set(record.tiers) & differ
    assert set(record.tiers) | set(record.rejected) == set(candidates)


def test_a_tiered_server_keeps_a_needle_bits_at_every_load(verified, launch, checkpoint):
    record, _, _, folder = verified
    if not record.tiers:
        pytest.skip("no candidate was verified")
    server = launch(checkpoint, "--corun", "--corun-decode-tiers", str(folder / "tiers.json"), name="tiered")
    assert f"bs={[*record.tiers, N]}" in server.log_text()
    vocab = verify_tiers.model_vocab(checkpoint)
    send = verify_tiers.sender(server.url)
    needle = verify_tiers.needles(1, 48, vocab, seed=7)[0]
    tokens = verify_tiers.corunner_tokens(N, 48)
    reference = send(verify_tiers.corunners(N - 1, tokens, vocab, seed=70), needle)
    loads = sorted({1, *record.tiers, record.tiers[0] + 1, N // 2 + 3})
    got = {r: send(verify_tiers.corunners(r - 1, tokens, vocab, seed=70 + r), needle) for r in loads}
    differ = {r: g for r, g in got.items() if g != reference}
    assert not differ, f"needle differs from its {N}-slot reference at loads {sorted(differ)}"


def test_a_record_from_another_environment_refuses_to_start(verified, launch, checkpoint):
    _, _, _, folder = verified
    data = json.loads((folder / "tiers.json").read_text())
    data["environment"]["gpu"] = "another GPU"
    other = folder / "tiers-other-gpu.json"
    other.write_text(json.dumps(data))
    with pytest.raises(RuntimeError, match="verified in another environment.*gpu: verified with 'another GPU'"):
        launch(checkpoint, "--corun", "--corun-decode-tiers", str(other), name="other-gpu")
