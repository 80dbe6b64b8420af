"""``scripts/flashinfer_aot.py``: the prebuilt sampling module lands where FlashInfer loads it, and a module
that fails its GPU check (or was built for another FlashInfer) is removed rather than served."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "flashinfer_aot.py"
spec = importlib.util.spec_from_file_location("flashinfer_aot", SCRIPT)
aot = importlib.util.module_from_spec(spec)
sys.modules["flashinfer_aot"] = aot
spec.loader.exec_module(aot)


def test_the_archive_member_is_flashinfers_own_aot_path_under_its_data_folder(monkeypatch):
    import flashinfer
    from flashinfer.jit import core, env

    # what the build sets (FLASHINFER_CUDA_ARCH_LIST): this machine has no GPU to detect
    monkeypatch.setattr(core.current_compilation_context, "TARGET_CUDA_ARCHS", {(9, "0a")})

    for name, gen in aot.specs().items():
        jit = gen()
        member = aot.member(jit)
        assert member == f"aot/{name}/{name}.so"
        # install.sh unpacks the archive into flashinfer/data: the member then sits at the path FlashInfer checks
        assert Path(flashinfer.__file__).parent / "data" / member == Path(jit.aot_path)
        assert Path(env.FLASHINFER_AOT_DIR) == Path(flashinfer.__file__).parent / "data" / "aot"


def test_the_module_is_built_for_the_flashinfer_sglang_pins():
    import flashinfer

    assert aot.VERSION == flashinfer.__version__


@pytest.fixture
def aot_dir(tmp_path, monkeypatch):
    from flashinfer.jit import env

    monkeypatch.setattr(env, "FLASHINFER_AOT_DIR", tmp_path)
    return tmp_path


def _install(aot_dir: Path) -> Path:
    folder = aot_dir / "sampling"
    folder.mkdir()
    (folder / "sampling.so").write_bytes(b"\0")
    return folder


def test_check_without_a_prebuilt_module_changes_nothing(aot_dir, capsys):
    assert aot.check() == 0
    assert "compiles it on first use" in capsys.readouterr().out and not list(aot_dir.iterdir())


def test_a_module_that_fails_a_check_is_removed(aot_dir, monkeypatch, capsys):
    folder = _install(aot_dir)
    monkeypatch.setattr(aot, "_checks", lambda: iter([("renorm", True), ("one-hot", False)]))
    assert aot.check() == 0
    assert not folder.exists() and "failed: one-hot" in capsys.readouterr().out


def test_a_module_that_does_not_load_is_removed(aot_dir, monkeypatch, capsys):
    folder = _install(aot_dir)

    def broken():
        raise OSError("undefined symbol")
        yield

    monkeypatch.setattr(aot, "_checks", broken)
    assert aot.check() == 0
    assert not folder.exists() and "OSError: undefined symbol" in capsys.readouterr().out


def test_a_module_that_passes_stays(aot_dir, monkeypatch, capsys):
    folder = _install(aot_dir)
    monkeypatch.setattr(aot, "_checks", lambda: iter([("one-hot", True)]))
    assert aot.check() == 0
    assert folder.exists() and "ok" in capsys.readouterr().out


def test_a_module_built_for_another_flashinfer_is_removed(aot_dir, monkeypatch, capsys):
    folder = _install(aot_dir)
    monkeypatch.setattr(aot, "VERSION", "0.0.1")
    monkeypatch.setattr(aot, "_checks", lambda: iter([("one-hot", True)]))
    assert aot.check() == 0
    assert not folder.exists() and "built for 0.0.1" in capsys.readouterr().out
