"""``launch``: a server that cannot start is reported with its log, and leaves nothing running."""

from pathlib import Path

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


def _session(tmp_path, command):
    """A ``Server`` for ``command`` in a session of its own, as ``Server`` starts SGLang's."""
    import subprocess

    server = Server.__new__(Server)
    server.log = tmp_path / "server.log"
    server._out = open(server.log, "a")
    server.proc = subprocess.Popen(command, stdout=server._out, stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=tmp_path)
    return server


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("grace,least,most", [(0, 0, 2), (1.0, 1.0, 5)])
def test_a_server_is_killed_after_its_grace_and_at_once_without_one(tmp_path, grace, least, most):
    """A server that ignores SIGTERM, with a child of its own: stopped after ``grace`` seconds, both gone."""
    import time

    server = _session(tmp_path, ["sh", "-c", "trap '' TERM; sleep 60 & echo $! > child; wait"])
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text().strip():
        time.sleep(0.05)
    child = int((tmp_path / "child").read_text())
    assert _alive(child)
    start = time.monotonic()
    server.stop(grace=grace)
    took = time.monotonic() - start
    assert least <= took < most and server.proc.returncode is not None and server._out.closed
    time.sleep(0.2)
    assert not _alive(child)
