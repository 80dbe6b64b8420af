"""The commands a user types: SGLang's launchers with --corun, and corun-sglang itself."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corun_sglang.core import packing
from corun_sglang.records.record import PackRecord, TiersRecord

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


def test_a_stopped_command_prints_its_name_and_message_and_exits_with_its_code(tmp_path, capsys):
    from corun_sglang.commands import cli

    assert cli.main(["models", "smollm2"]) == 2
    assert capsys.readouterr().err == "corun-sglang models: give DEST, the folder to write the checkpoint into\n"
    assert cli.main(["models", "nosuch", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err.startswith("corun-sglang models: unknown model 'nosuch'. Fix: choose one of ")


def test_a_demo_whose_second_server_fails_still_shows_the_first(tmp_path, monkeypatch, capsys):
    from corun_sglang.commands import cli, demo

    def serve_and_run(model, arm, cases, *args):
        if arm == demo.DEFAULT:
            raise RuntimeError("the default server did not start")
        return [demo.Row(prompt=c.prompt, sampling="greedy", text_alone="a", text_among="a", steps=2,
                         tokens_identical=True, logprob_bits_identical=True, first_divergence=None) for c in cases], []

    monkeypatch.setattr(demo, "serve_and_run", serve_and_run)
    out = tmp_path / "demo.json"
    assert cli.main(["demo", "--model-path", str(tmp_path), "--concurrency", "4", "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert printed.out.startswith("each prompt alone, then among 3 concurrent co-runners\n")
    assert printed.err.splitlines()[-1] == ("corun-sglang demo: could not complete the run: the default server did "
                                            f"not start (server logs next to {out})")
    assert not out.exists()


def test_work_stops_on_a_known_error_with_its_code_and_lets_an_unexpected_one_through_unless_named():
    from corun_sglang.commands import cli

    with pytest.raises(cli.Stop) as stop, cli.attempt(known={KeyError: 3}):
        raise KeyError("gone")
    assert (str(stop.value), stop.value.code) == ("'gone'", 3)
    with pytest.raises(ValueError), cli.attempt(known={KeyError: 3}):
        raise ValueError("not known, and no work named")
    shown = []
    with pytest.raises(cli.Stop) as stop, cli.attempt("finish", " (see the log)", shown=lambda: shown.append(1)):
        raise ValueError("broke")
    assert (str(stop.value), stop.value.code, shown) == ("could not finish: broke (see the log)", 2, [1])
    with pytest.raises(cli.Stop) as stop, cli.attempt("finish", known={ValueError: 1}):
        cli.refuse(["a problem", "another"])  # a refusal inside the work stays itself
    assert (str(stop.value), stop.value.code) == ("a problem; another", 2)
    cli.refuse([])


PACK_FAILS = packing.PackingError("a pack of 1024 tokens does not verify here: needle 17 differs")
POOL_TOO_SMALL = RuntimeError("the KV pool holds 9000 tokens, a reference round needs 20000")


@pytest.mark.parametrize("command,module,argv,record,failure,code,says", [
    ("verify-tiers", "verify_tiers", ["--candidates", "64"], TiersRecord(n=256, tiers=(64,), environment={}),
     POOL_TOO_SMALL, 2, f"could not complete the check: {POOL_TOO_SMALL} (server log: {{log}})"),
    ("verify-prefill-pack", "verify_packing", ["--pack", "1024"], PackRecord(pack=1024, shortest=1, environment={}),
     PACK_FAILS, 1, str(PACK_FAILS)),  # the check ran and failed
    ("verify-prefill-pack", "verify_packing", ["--pack", "1024"], PackRecord(pack=1024, shortest=1, environment={}),
     POOL_TOO_SMALL, 2, f"could not complete the check: {POOL_TOO_SMALL} (server log: {{log}})"),
])
def test_a_verify_command_shows_the_record_it_wrote_or_why_it_wrote_none(command, module, argv, record, failure, code,
                                                                         says, tmp_path, monkeypatch, capsys):
    import importlib

    from corun_sglang.commands import cli

    probe = importlib.import_module(f"corun_sglang.probes.{module}")
    out = tmp_path / "r.json"
    argv = [command, "--model-path", str(tmp_path), *argv, "--out", str(out)]

    def verify(*args, **kwargs):
        record.write(out)
        return record

    monkeypatch.setattr(probe, "verify", verify)
    assert cli.main(argv) == 0
    assert f"record: {out}; serve it with --corun {record.kind.option} {out}" in capsys.readouterr().out
    assert type(record).load(out) == dataclasses.replace(record, source=str(out))

    def fails(*args, **kwargs):
        raise failure

    monkeypatch.setattr(probe, "verify", fails)
    out.unlink()
    assert cli.main(argv) == code and not out.exists()
    log = tmp_path / "r.server.log"
    assert capsys.readouterr().err == f"corun-sglang {command}: {says.format(log=log)}\n"
