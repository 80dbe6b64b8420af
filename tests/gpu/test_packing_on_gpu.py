"""Packed prefill on a GPU, end to end on a synthetic checkpoint.

``verify-prefill-pack`` must verify a pack of ``CORUN_PACK`` tokens (default 1024) on a ``--corun``
candidate server: every needle, from the shortest packable prompt (1 token on FlashInfer's FA3 prefill,
33 on qwen3-small elsewhere) to the pack less that, keeps its generation alone in every packing. The negative control runs the same probe
against default SGLang on FlashInfer attention (as ``--corun`` serves it), which packs too but runs a
lone prompt at its own token count: there a packed needle must differ from it alone. A server serving
the record keeps a needle's bits among concurrent short prompts, also when its packs wait for KV
(``--corun-prefill-pack-wait``), and a record whose environment
differs keeps the server from starting. Each test stops its servers, so the next one has the GPU.

Environment: ``CORUN_PACK``, ``CORUN_RESULTS`` (the record, server logs and a summary are written there).
"""

import json
import os
import threading
from pathlib import Path

import pytest

from corun_sglang.core import packing
from corun_sglang.probes import verify_packing
from corun_sglang.probes.harness import PREFILL_LOG

pytestmark = pytest.mark.e2e

PACK = int(os.environ.get("CORUN_PACK", "1024"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = Path(os.environ.get("CORUN_RESULTS") or tmp_path_factory.mktemp("packing"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def verified(checkpoint, folder):
    static = float(os.environ["CORUN_STATIC_GB"]) if os.environ.get("CORUN_STATIC_GB") else None
    try:
        record, problem = verify_packing.verify(checkpoint, PACK, folder / "pack.json", folder / "verify-pack.log",
                                                static_gb=static), None
    except packing.PackingError as exc:
        record, problem = None, str(exc)
    (folder / "pack-summary.json").write_text(json.dumps(
        {"pack": PACK, "record": record and record.to_json(), "problem": problem}, indent=1))
    return record, problem


def test_verify_prefill_pack_verifies_the_pack(verified):
    record, problem = verified
    assert record is not None, problem
    assert record.pack == PACK and all(k > 0 for k in record.needles.values())


def test_default_sglang_packing_changes_a_prompts_bits(verified, launch, checkpoint, folder):
    """The negative control: the probe that verified the pack, from its shortest prompt, sees default
    SGLang's packing."""
    record, _ = verified
    least = record.shortest if record else packing.shortest(*verify_packing.model_heads(checkpoint))
    server = launch(checkpoint, "--attention-backend", "flashinfer", "--disable-radix-cache", name="pack-default")
    try:
        found = verify_packing.probe(verify_packing.sender(server.url, server.log), PACK, least,
                                     verify_packing.model_vocab(checkpoint))
    finally:
        server.stop()  # the GPU's memory goes to the next test's server
    (folder / "pack-default.json").write_text(json.dumps(found, indent=1))
    assert any(got["counted"] for got in found.values()), "default SGLang packed no needle"
    assert any(got["differ"] for got in found.values()), found


def test_a_packing_server_keeps_a_needles_bits_among_concurrent_prompts(verified, launch, checkpoint, folder):
    record, _ = verified
    if record is None:
        pytest.skip("the pack did not verify")
    server = launch(checkpoint, "--corun", "--corun-prefill-pack", str(folder / "pack.json"), name="packed")
    assert f"at {PACK} tokens" in server.log_text() and "(verified by --corun-prefill-pack" in server.log_text()
    send = verify_packing.sender(server.url, server.log)
    needle, short = list(range(1000, 1000 + 200)), list(range(3000, 3005))  # short packs from 5 tokens on FA3
    alone, short_alone = send([needle], 0)[0], send([short], 0)[0]
    others = [[2000 + 37 * i + j for j in range(40 + i)] for i in range(48)]
    got = {}

    def one(i, prompt):
        got[i] = send([prompt], 0)[0]

    prompts = [*others[:24], needle, *others[24:], short]
    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = server.log_text()
    server.stop()  # the GPU's memory goes to the next test's server
    assert got[24] == alone and got[len(prompts) - 1] == short_alone
    batches = [int(n) for n, _ in PREFILL_LOG.findall(log)]
    assert max(batches) > 1, "no prefill packed two prompts"


def test_packs_waiting_for_kv_keep_a_needles_bits_and_serve_every_prompt(verified, launch, checkpoint, folder):
    """``--corun-prefill-pack-wait`` with a KV pool that holds about half of 49 concurrent requests, whose
    answers end at different steps: packs the pool cuts short wait, and nothing changes a needle's bits."""
    record, _ = verified
    if record is None:
        pytest.skip("the pack did not verify")
    server = launch(checkpoint, "--corun", "--corun-prefill-pack", str(folder / "pack.json"),
                    "--corun-prefill-pack-wait", "8", "--max-total-tokens", "2500", name="packed-wait")
    assert "cut short or underfilled waits up to 8 decode steps" in server.log_text()
    needle = list(range(1000, 1000 + 200))
    alone, _ = verify_packing.sender(server.url, server.log, new_tokens=16)([needle], 0)
    others = [[2000 + 37 * i + j for j in range(40 + i)] for i in range(48)]
    got, failed = {}, []

    def one(i, prompt, new_tokens):
        try:
            got[i] = verify_packing.sender(server.url, server.log, new_tokens=new_tokens)([prompt], 0)[0]
        except Exception as exc:  # noqa: BLE001 - reported below with the request
            failed.append((i, repr(exc)))

    prompts = [*others[:24], needle, *others[24:]]
    threads = [threading.Thread(target=one, args=(i, p, 16 if i == 24 else 8 + 8 * (i % 8)))
               for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = server.log_text()
    server.stop()
    assert not failed and len(got) == len(prompts), failed
    assert got[24] == alone
    batches = [int(n) for n, _ in PREFILL_LOG.findall(log)]
    assert max(batches) > 1, "no prefill packed two prompts"


def test_a_record_from_another_environment_refuses_to_start(verified, launch, checkpoint, folder):
    record, _ = verified
    if record is None:
        pytest.skip("the pack did not verify")
    data = record.to_json()
    data["environment"]["gpu"] = "another GPU"
    other = folder / "pack-other-gpu.json"
    other.write_text(json.dumps(data))
    with pytest.raises(RuntimeError, match="verified in another environment.*gpu: verified with 'another GPU'"):
        launch(checkpoint, "--corun", "--corun-prefill-pack", str(other), name="pack-other-gpu")
