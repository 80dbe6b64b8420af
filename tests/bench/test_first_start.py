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
