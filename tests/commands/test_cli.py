"""The commands a user types: SGLang's launchers with --corun, and corun-sglang itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*argv, timeout=600):
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
    )


def test_launch_server_help_lists_corun():
    out = run(sys.executable, "-m", "sglang.launch_server", "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--corun" in out.stdout


def _refused(out, option):
    """A refusal exits non-zero and prints one line per problem (``refusal``), no traceback."""
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "--corun cannot start" in out.stderr
    assert any(line.startswith(f"  - {option}:") and "Fix:" in line for line in out.stderr.splitlines())


def test_launch_server_refuses_mixed_chunk_before_loading_a_model(tiny_model):
    out = run(
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", tiny_model, "--device", "cuda", "--corun", "--enable-mixed-chunk",
    )
    _refused(out, "--enable-mixed-chunk")
    assert "Load weight" not in out.stderr + out.stdout


def test_sglang_serve_reads_corun_from_yaml(tiny_model, tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("corun: true\nenable-mixed-chunk: true\ndevice: cuda\n")
    sglang = Path(sys.executable).with_name("sglang")
    out = run(str(sglang), "serve", "--model-path", tiny_model, "--config", str(cfg))
    _refused(out, "--enable-mixed-chunk")


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).with_name("corun-sglang")), "apply-patches", "--check"],
        ["bash", str(REPO / "scripts" / "apply_patches.sh"), "--check"],
    ],
    ids=["corun-sglang", "apply_patches.sh"],
)
def test_patch_commands_report_the_installed_series(command):
    out = subprocess.run(
        command, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0001-" in out.stdout and "applied" in out.stdout


@pytest.mark.parametrize("candidates, says", [("64,300", "not below N = 256"), ("a,8", "not a comma-separated")])
def test_verify_tiers_refuses_bad_candidates_before_starting_a_server(candidates, says, tmp_path, capsys):
    from corun_sglang.commands import cli

    out = tmp_path / "tiers.json"
    code = cli.main(["verify-tiers", "--model-path", str(tmp_path), "--candidates", candidates, "--out", str(out)])
    assert code == 2 and says in capsys.readouterr().err and not out.exists()


def test_verify_prefill_pack_refuses_a_bad_pack_before_starting_a_server(tmp_path, capsys):
    from corun_sglang.commands import cli

    out = tmp_path / "pack.json"
    code = cli.main(["verify-prefill-pack", "--model-path", str(tmp_path), "--pack", "64", "--out", str(out)])
    assert code == 2 and "below 128" in capsys.readouterr().err and not out.exists()


def test_progress_lines_carry_the_elapsed_seconds_and_go_out_at_once():
    import io

    from corun_sglang.commands import cli

    stream, now = io.StringIO(), iter([100.0, 100.0, 163.25])
    say = cli.progress("verify-tiers", stream=stream, clock=lambda: next(now))
    say("starting the candidate server")
    assert stream.getvalue() == "corun-sglang verify-tiers [    0.0 s] starting the candidate server\n"
    say("size 64: identical")
    assert stream.getvalue().splitlines()[-1] == "corun-sglang verify-tiers [   63.2 s] size 64: identical"


@pytest.mark.parametrize("command,module,argv", [
    ("verify-tiers", "verify_tiers", ["--candidates", "64"]),
    ("verify-prefill-pack", "verify_packing", ["--pack", "1024"]),
])
def test_the_verify_commands_print_the_probes_progress(command, module, argv, tmp_path, monkeypatch, capsys):
    import importlib

    from corun_sglang.commands import cli

    probe = importlib.import_module(f"corun_sglang.probes.{module}")

    def verify(*args, progress, **kwargs):
        progress("server ready")
        raise RuntimeError("the probe stopped here")

    monkeypatch.setattr(probe, "verify", verify)
    code = cli.main([command, "--model-path", str(tmp_path), *argv, "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and f"corun-sglang {command} [" in err and "s] server ready" in err
