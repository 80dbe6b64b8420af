"""``bench/first_start.py``: a forced first start, then a later one with the same options reading the cache."""

import json

import pytest

from bench import first_start


@pytest.fixture
def servers(monkeypatch, streaming_server):
    """``launch.Server`` replaced by a stand-in whose /server_info holds a contract; the args of every start."""
    import corun_sglang.probes.launch

    started = []

    class Server:
        def __init__(self, model_path, args, log, timeout=600, static_gb=None, env=None):
            started.append(list(args))
            if "--fail" in args:
                raise RuntimeError("server exited with 1")
            mode = args[args.index("--corun-calibrate") + 1]
            calibration = {"source": "calibrated" if mode == "force" else "cached", "seconds": 150.0, "tiers": [64]}
            self.httpd = streaming_server(info={"corun_contract": {"calibration": calibration,
                                                                   "system_fingerprint": "fp_x"}})
            self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

        def stop(self):
            self.httpd.shutdown()

    monkeypatch.setattr(corun_sglang.probes.launch, "Server", Server)
    return started


def test_a_forced_first_start_then_a_later_one_with_the_same_options(tmp_path, servers):
    out = tmp_path / "first_start.json"
    assert first_start.main(["--shape", "qwen3-small", "--server-args=--chunked-prefill-size 2048", "--later",
                             "--checkpoints", str(tmp_path / "ckpt"), "--out", str(out)]) == 0
    first, later = servers
    assert first[first.index("--corun-calibrate") + 1] == "force" and later[later.index("--corun-calibrate") + 1] == "auto"
    assert [a for a in first if a not in ("force", "auto")] == [a for a in later if a not in ("force", "auto")]
    assert first[:3] == ["--corun", "--chunked-prefill-size", "2048"]
    result = json.loads(out.read_text())
    assert result["first"]["calibration"]["source"] == "calibrated" and result["later"]["calibration"]["source"] == "cached"
    assert result["first"]["seconds"] >= 0 and result["later"]["system_fingerprint"] == "fp_x"


def test_a_failed_first_start_is_recorded_and_nothing_more_starts(tmp_path, servers):
    out = tmp_path / "first_start.json"
    assert first_start.main(["--shape", "qwen3-small", "--server-args=--fail", "--later",
                             "--checkpoints", str(tmp_path / "ckpt"), "--out", str(out)]) == 1
    assert len(servers) == 1 and "exited with 1" in json.loads(out.read_text())["first"]["error"]


def _calibration_log(tmp_path, caplog, **options) -> str:
    """The log lines a real calibration writes (``calibration.prepare``, stand-in server and probes), as a server
    logs them."""
    import logging
    import types

    from corun_sglang.probes import calibration

    args = types.SimpleNamespace(**{
        "model_path": "m", "max_running_requests": 256, "corun_calibrate": "auto", "corun_calibration_dir": str(tmp_path),
        "corun_decode_tiers": None, "corun_decode_tier_candidates": None, "corun_prefill_pack": None,
        "corun_prefill_pack_candidate": None, "corun_prefill_pack_wait": 0, "cuda_graph_bs_decode": None,
        "cuda_graph_bs_prefill": None, "chunked_prefill_size": None, **options})
    probes = calibration.Probes(lambda model, flags, log: types.SimpleNamespace(url="http://x", stop=lambda grace: None),
                                lambda *a, **k: types.SimpleNamespace(tiers=(64,)),
                                lambda *a, **k: types.SimpleNamespace(pack=1024))
    with caplog.at_level(logging.INFO, logger=calibration.__name__):
        calibration.prepare(args, lambda: {"model": "m"}, "NVIDIA H100", probes=probes)
    return "\n".join(f"[2026-12-05 21:24:48] {r.getMessage()}" for r in caplog.records)


def test_the_phases_of_a_calibration_are_read_from_its_own_log_lines(tmp_path, caplog):
    found = first_start.phases(_calibration_log(tmp_path / "both", caplog))
    assert set(found) == {"server", "pack", "tiers"} and all(v >= 0 for v in found.values())
    caplog.clear()
    tiers_only = first_start.phases(_calibration_log(tmp_path / "tiers", caplog, chunked_prefill_size=512))
    assert set(tiers_only) == {"server", "tiers"}
    # the log of a calibration on two servers side by side names no candidate server: no phases
    two_servers = ("corun calibration [  72.5 s] decode tiers: server ready at http://127.0.0.1:1\n"
                   "corun calibration [ 173.3 s] done in 173.3 s: tiers [64], pack 1024\n")
    assert first_start.phases(two_servers) is None
    line = "[2026-12-05 21:24:48] corun calibration [{:6.1f} s] {}"
    text = "\n".join(line.format(t, what) for t, what in [
        (0.0, "starting the candidate server"), (63.7, "candidate server ready at http://x"),
        (63.7, "prefill pack: verifying 1024 tokens"), (67.6, "decode tiers: verifying [64] against N = 256"),
        (74.7, "done in 74.7 s: tiers [64], pack 1024")])
    assert first_start.phases(text) == {"server": 63.7, "pack": 3.9, "tiers": 7.1}
    # and the serving server's start after it, to the log's second
    served = text + ("\n[2026-12-05 21:25:20] Load weight begin.\n"
                     "[2026-12-05 21:25:33] The server is fired up and ready to roll!\n")
    assert first_start.phases(served) == {"server": 63.7, "pack": 3.9, "tiers": 7.1, "serving": 45.0}
