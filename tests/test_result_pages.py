"""``scripts/result_pages.py``: the demo and calibration pages are drawn from the committed files alone."""

import gzip
import importlib.util
import json
import sys
from pathlib import Path

from corun_sglang.commands import demo

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "result_pages.py"
spec = importlib.util.spec_from_file_location("result_pages", SCRIPT)
pages = importlib.util.module_from_spec(spec)
sys.modules["result_pages"] = pages
spec.loader.exec_module(pages)


def _row(prompt, first):
    return demo.Row(prompt=prompt, sampling="greedy", text_alone="a", text_among="a" if first is None else "b",
                    steps=4, tokens_identical=first is None, logprob_bits_identical=first is None,
                    first_divergence=first)


def test_the_demo_page_renders_every_arm_from_demo_json(tmp_path):
    folder = tmp_path / "queue" / "demo-smollm2"
    folder.mkdir(parents=True)
    arms = {demo.CORUN: [_row("p1", None), _row("p2", None)], demo.DEFAULT: [_row("p1", 3), _row("p2", None)]}
    data = demo.to_json(arms, {"concurrency": 256}, {demo.CORUN: ["python", "--corun"], demo.DEFAULT: ["python"]})
    (folder / "demo.json").write_text(json.dumps(data))
    (folder / "chunk.json").write_text(json.dumps({"gpu": "NVIDIA H200, 1 MiB, GPU-x, 580", "commit": "abcdef12345",
                                                   "runtime": "r1", "software": "torch", "started": "t"}))
    assert pages.write(tmp_path) == ["demo.md"]
    text = (tmp_path / "demo.md").read_text()
    assert "--corun: 2 of 2 prompts identical" in text and "default SGLang: 1 of 2 prompts identical" in text
    assert "abcdef1" in text and "`GPU-x`" in text and "`python --corun`" in text


def test_the_calibration_page_lists_entries_and_first_starts(tmp_path):
    entry = tmp_path / "calibration" / "k1"
    entry.mkdir(parents=True)
    (entry / "calibration.json").write_text(json.dumps({"key": "k1", "tiers": [64], "pack": 1024, "seconds": 12.5,
                                                        "parts": {"gpu": "NVIDIA H100", "n": 256, "flags": ["--x"]}}))
    start = tmp_path / "queue" / "calibrate-s"
    start.mkdir(parents=True)
    (start / "first_start.json").write_text(json.dumps({"shape": "s", "server_args": "--x", "first": {
        "seconds": 200.0, "calibration": {"seconds": 150.0, "tiers": [64], "pack": 1024}}, "later": {"seconds": 40.0}}))
    assert pages.write(tmp_path) == ["calibration.md"]
    text = (tmp_path / "calibration.md").read_text()
    assert "| calibrate-s | s | `--x` | 200.0 | 150.0 | - | - | - | [64] | 1024 | 40.0 |" in text  # no log: no phases
    (start / "first_start.first.log").write_text("corun calibration [  40.0 s] candidate server ready at x\n"
                                                  "corun calibration [  40.0 s] decode tiers: verifying [64]\n"
                                                  "corun calibration [  50.0 s] done in 50.0 s\n")
    pages.write(tmp_path)
    assert "| 200.0 | 150.0 | - | 40.0 / - / 10.0 | - | [64] |" in (tmp_path / "calibration.md").read_text()
    # with the log's clock: the serving start after calibration, and the launch before it
    (start / "first_start.first.log").write_text(
        "[2026-12-07 10:00:00] corun calibration [   0.0 s] starting the candidate server\n"
        "[2026-12-07 10:00:40] corun calibration [  40.0 s] candidate server ready at x\n"
        "[2026-12-07 10:00:40] corun calibration [  40.0 s] decode tiers: verifying [64]\n"
        "[2026-12-07 10:02:30] corun calibration [ 150.0 s] done in 150.0 s\n"
        "[2026-12-07 10:03:00] The server is fired up and ready to roll!\n")
    pages.write(tmp_path)
    assert "| 200.0 | 150.0 | 20.0 | 40.0 / - / 110.0 | 30.0 | [64] |" in (tmp_path / "calibration.md").read_text()
    assert "[k1](calibration/k1/) | NVIDIA H100 | 256 | `--x` | [64] | 1024 | 12.5 |" in text


def test_no_data_no_page(tmp_path):
    assert pages.write(tmp_path) == [] and not list(tmp_path.iterdir())


def test_the_demo_page_names_the_calibration_its_corun_server_served(tmp_path):
    folder = tmp_path / "queue" / "demo-smollm2"
    folder.mkdir(parents=True)
    data = demo.to_json({demo.CORUN: [_row("p1", None)]}, {"concurrency": 256}, {demo.CORUN: ["python", "--corun"]})
    (folder / "demo.json").write_text(json.dumps(data))
    entry = tmp_path / "calibration" / "f0ea7cc1324859ad"
    entry.mkdir(parents=True)
    (entry / "calibration.json").write_text(json.dumps({"key": "f0ea7cc1324859ad", "tiers": [64, 128], "pack": 1024,
                                                        "seconds": 229.3, "parts": {}}))
    with gzip.open(folder / "demo.corun.log.gz", "wt") as log:
        log.write("[t] corun calibration: serving /tmp/corun-cache/calibration/f0ea7cc1324859ad\n")
    pages.write(tmp_path)
    text = (tmp_path / "demo.md").read_text()
    assert "[f0ea7cc1324859ad](calibration/f0ea7cc1324859ad/)" in text and "229.3 s of probes" in text
    (folder / "demo.corun.log.gz").unlink()  # no log, no claim about the calibration
    pages.write(tmp_path)
    assert "f0ea7cc1324859ad" not in (tmp_path / "demo.md").read_text()


CHECK_LOG = """tests/gpu/test_server.py::test_starts PASSED [ 50%]
tests/gpu/test_malformed_on_gpu.py::test_corpus FAILED [100%]
============================== slowest durations ===============================
90.37s call     tests/gpu/test_server.py::test_starts
0.30s setup    tests/gpu/test_server.py::test_starts
71.90s call     tests/gpu/test_malformed_on_gpu.py::test_corpus
=========================== short test summary info ============================
PASSED tests/gpu/test_server.py::test_starts
FAILED tests/gpu/test_malformed_on_gpu.py::test_corpus - AssertionError: chat-echo got 500
"""


def test_the_checks_page_gives_each_check_chunk_its_tests_outcomes_and_note(tmp_path):
    folder = tmp_path / "checks" / "checks-server"
    folder.mkdir(parents=True)
    (folder / "chunk.json").write_text(json.dumps({"rc": 1, "wall_s": 170.2, "command": "python3 -m pytest x",
                                                   "gpu": "NVIDIA H100, 1 MiB, GPU-y, 580", "commit": "abc1234ff"}))
    with gzip.open(folder / "chunk.log.gz", "wt") as f:
        f.write(CHECK_LOG)
    (folder / "note.md").write_text("The corpus's\nchat case failed.\n")
    (tmp_path / "checks" / "empty").mkdir()  # no chunk.json: not a chunk's folder
    assert pages.write(tmp_path) == ["checks.md"]
    text = (tmp_path / "checks.md").read_text()
    assert "## checks-server\n\nrc 1, 170.2 s: NVIDIA H100 (`GPU-y`)" in text and "abc1234" in text
    assert "| `test_starts` | passed | 90.7 |" in text
    assert "| `test_corpus` | failed: AssertionError: chat-echo got 500 | 71.9 |" in text
    assert "The corpus's chat case failed." in text and "## empty" not in text and "    python3 -m pytest x" in text


def test_a_cut_run_lists_only_the_tests_its_summary_reached():
    lines = CHECK_LOG.splitlines()
    cut = [line for line in lines if not line.startswith("FAILED")]
    assert [t[:2] for t in pages.outcomes(cut)] == [("tests/gpu/test_server.py::test_starts", "PASSED")]
    assert pages.outcomes([]) == []


def test_the_decode_split_page_tables_bits_times_and_graph_trials(tmp_path):
    folder = tmp_path / "queue" / "decode-split-h100"
    folder.mkdir(parents=True)
    (folder / "chunk.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3, 81559 MiB, GPU-1, 580",
                                                   "commit": "abcdef0", "runtime": "r1"}))
    (folder / "decode_split.json").write_text(json.dumps({
        "kernel": "flashinfer", "command": "python -m bench.decode_split", "graph_grid": {"128": 159, "256": 319},
        "bits": {"off": {"compared": 20, "divergent": 0, "output_divergent": 0},
                 "auto": {"compared": 20, "divergent": 9, "output_divergent": 2},
                 "512": {"compared": 0, "divergent": 0, "output_divergent": 0, "error": "out of workspace"}},
        "timing": [{"load": 8, "kv_len": 544, "split": "off", "ms": 0.0403, "chunks": 8, "fits": {"128": True}},
                   {"load": 8, "kv_len": 544, "split": "512", "ms": 0.0201, "chunks": 16, "fits": {"128": True}},
                   {"load": 256, "kv_len": 2048, "split": "512", "ms": 0.5, "chunks": 1024, "fits": {"256": False}},
                   {"load": 256, "kv_len": 2048, "split": "off", "ms": None, "error": "refused", "chunks": 256}],
        "graph": [{"slots": 128, "split": "512", "grid": 1024,
                   "fixed": {"compared": 10, "divergent": 0}, "fixed_graph_alone": {"compared": 10, "divergent": 0},
                   "unfixed": {"compared": 10, "divergent": 3},
                   "full_4x_split": {"FlashInfer's grid": "refused: new batch size", "grid 1024": "planned"}},
                  {"slots": 256, "split": "off", "error": "CUDA error: an illegal memory access"}],
        "graph_timing": [{"slots": 128, "load": 8, "kv_len": 544, "split": "off", "ms": 0.05},
                         {"slots": 128, "load": 8, "kv_len": 544, "split": "512", "ms": 0.03}]}))
    (folder / "note.md").write_text("What the bits showed.\n")
    assert "decode_split.md" in pages.write(tmp_path)
    text = (tmp_path / "decode_split.md").read_text()
    assert "## flashinfer: decode-split-h100" in text and "commit abcdef0" in text
    assert "| auto | 9 / 20 (output 2) |" in text and "| 512 | refused |" in text
    assert "| requests x KV tokens | off | 512 |" in text
    assert "| 8 x 544 | 0.040 | 0.020 |" in text and "| 256 x 2048 | refused | 0.500 (grid) |" in text
    assert ("| 128 | 512 | 1024 | 0 / 10 | 0 / 10 | 3 / 10 | FlashInfer's grid: refused: new batch size; "
            "grid 1024: planned | - |") in text
    assert "| 256 | off | - | - | - | - | - | CUDA error: an illegal memory access |" in text
    assert "| 128: 8 x 544 | 0.050 | 0.030 |" in text and text.rstrip().endswith("What the bits showed.")
