"""``doctor``: the readiness report on this (GPU-less) machine, with the real SGLang install."""

import subprocess
import sys
from pathlib import Path

import pytest

from corun_sglang.commands import doctor

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:
    HAS_CUDA = False


@pytest.fixture(scope="module")
def found():
    return {c.name: c for c in doctor.checks()}


def test_install_checks_pass(found):
    for name in ("sglang", "flashinfer", "patches", "hooks", "bindings", "configuration"):
        assert found[name].ok, found[name]
    assert "0001-" in found["patches"].detail
    assert "cuda_graph_bs_decode=[256]" in found["configuration"].detail


@pytest.mark.skipif(HAS_CUDA, reason="checks the report without a GPU")
def test_missing_gpu_is_reported_and_waivable(found):
    assert not found["gpu"].ok and found["gpu"].gpu
    checks = list(found.values())
    assert not doctor.ready(checks)
    assert doctor.ready(checks, allow_no_gpu=True)
    assert "waived" in doctor.render(checks, allow_no_gpu=True)
    assert "MISSING" in doctor.render(checks) and "NOT ready" in doctor.render(checks)


def test_doctor_is_not_ready_where_corun_refuses(monkeypatch):
    """The install checks are the startup check's own parts: a FlashInfer release ``--corun`` refuses
    makes doctor not ready, with the same problem."""
    import importlib.metadata

    from corun_sglang.serving import startup

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.6.14" if name == "flashinfer-python" else real(name))
    (refused,) = startup.problems()
    found = doctor.checks()
    assert not doctor.ready(found, allow_no_gpu=True)
    assert [(c.name, c.detail) for c in found if not c.ok and not c.gpu] == [("flashinfer", refused)]
    assert "NOT ready" in doctor.render(found, allow_no_gpu=True)


def test_model_path_resolves_the_full_configuration(tiny_model):
    check = {c.name: c for c in doctor.checks(tiny_model)}["configuration"]
    assert check.ok and check.detail.startswith("corun: decode graph bs=[256]")


def test_a_failing_check_is_reported_not_raised():
    def broken():
        raise ImportError("no module named flashinfer")

    check = doctor._guard("flashinfer", broken)
    assert not check.ok and "ImportError" in check.detail


@pytest.mark.skipif(HAS_CUDA, reason="checks the exit code without a GPU")
def test_cli_exit_codes():
    exe = str(Path(sys.executable).with_name("corun-sglang"))
    strict = subprocess.run([exe, "doctor"], capture_output=True, text=True, timeout=300)
    waived = subprocess.run([exe, "doctor", "--allow-no-gpu"], capture_output=True, text=True, timeout=300)
    assert strict.returncode == 1 and "NOT ready" in strict.stdout
    assert waived.returncode == 0 and "ready for --corun" in waived.stdout
