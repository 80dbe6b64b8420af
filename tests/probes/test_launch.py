"""``launch``: a server that cannot start is reported with its log, and leaves nothing running."""

import pytest

from corun_sglang.probes.launch import Server


def test_a_refused_start_raises_with_the_log(tiny_model, tmp_path):
    log = tmp_path / "server.log"
    with pytest.raises(RuntimeError, match="enable-mixed-chunk"):
        Server(tiny_model, ["--corun", "--enable-mixed-chunk", "--device", "cuda"], log, timeout=300)
    assert "--corun cannot start" in log.read_text() and "Traceback" not in log.read_text()


def test_a_server_appends_to_its_log_and_reports_only_its_own_part(tiny_model, tmp_path):
    # one log path for servers started one after another (an arm restarted within a study): the
    # earlier output stays, and a refusal quotes the new server's output alone
    log = tmp_path / "server.log"
    log.write_text("an earlier server: Decode batch, #running-req: 7\n")
    with pytest.raises(RuntimeError, match="enable-mixed-chunk") as refused:
        Server(tiny_model, ["--corun", "--enable-mixed-chunk", "--device", "cuda"], log, timeout=300)
    assert "an earlier server" not in str(refused.value)
    text = log.read_text()
    assert text.startswith("an earlier server: Decode batch") and "--corun cannot start" in text


def test_a_dummy_load_with_the_synthetic_seed_must_log_its_draw():
    from corun_sglang.probes.launch import expects_synthetic_draw
    from corun_sglang.tools.synthetic import SEED_ENV

    cmd = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
    assert expects_synthetic_draw(cmd + ["--load-format", "dummy"], {SEED_ENV: "0"})
    assert expects_synthetic_draw(cmd + ["--load-format=dummy"], {SEED_ENV: "0"})
    assert not expects_synthetic_draw(cmd + ["--load-format", "dummy"], {})
    assert not expects_synthetic_draw(cmd + ["--load-format", "safetensors"], {SEED_ENV: "0"})
    assert not expects_synthetic_draw(cmd, {SEED_ENV: "0"})


def test_a_folder_without_weight_files_is_weightless(tmp_path):
    from corun_sglang.tools import synthetic
    from corun_sglang.probes.launch import weightless

    folder = synthetic.prepare(tmp_path / "m", "qwen3-tiny", "in-place")
    assert weightless(str(folder))
    (folder / "model-00001-of-00001.safetensors").write_bytes(b"")
    assert not weightless(str(folder))
    assert not weightless(str(tmp_path))


def test_static_memory_is_asked_for_as_a_size():
    from corun_sglang.probes.launch import static_fraction

    assert static_fraction(30, 120) == 0.25
    assert static_fraction(30, 60) == 0.5
    with pytest.raises(RuntimeError, match="40 GiB"):
        static_fraction(40, 41)


def test_the_static_size_waits_for_a_stopped_servers_memory(monkeypatch):
    from corun_sglang.probes import launch

    reads = iter([16.2, 70.0, 139.0, 139.1, 139.1])
    monkeypatch.setattr(launch, "free_gpu_gb", lambda: next(reads))
    # 16.2 GiB free just after the last server stopped; the read counts once it is enough and still
    assert launch.settled_free_gpu_gb(126.0, timeout=5, poll=0) == 139.1
    monkeypatch.setattr(launch, "free_gpu_gb", lambda: 16.2)
    assert launch.settled_free_gpu_gb(126.0, timeout=0.05, poll=0.01) == 16.2  # never freed: the last read
