"""``patches``: apply / check / revert on a copy of the installed SGLang."""

import shutil

import pytest

from corun_sglang.commands import cli
from corun_sglang.serving import patches


@pytest.fixture
def sglang_copy(tmp_path):
    """The installed SGLang's dist-info and patched files, copied and returned to pristine."""
    root = patches.sglang_root()
    for dist in root.glob("sglang-*.dist-info"):
        shutil.copytree(dist, tmp_path / dist.name)
    for patch in patches.series():
        for rel in patch.files():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(root / rel, tmp_path / rel)
    patches.revert(tmp_path)
    return tmp_path


def _files(root):
    return {rel: (root / rel).read_bytes() for p in patches.series() for rel in p.files()}


def test_series_is_numbered_and_each_patch_carries_its_marker():
    series = patches.series()
    assert [p.number for p in series] == sorted(p.number for p in series)
    assert series, "the series is empty"
    for patch in series:
        assert patch.files()
        assert patch.marker in patch.path.read_text()


def test_every_patch_has_a_ledger_entry():
    ledger = (patches.series_dir() / "README.md").read_text()
    for patch in patches.series():
        assert f"### {patch.number}" in ledger


def test_apply_check_revert_round_trip(sglang_copy):
    pristine = _files(sglang_copy)
    assert patches.missing(sglang_copy) == [p.name for p in patches.series()]
    assert {s for _, s in patches.check(sglang_copy)} == {patches.Status.UNAPPLIED}

    assert [what for _, what in patches.apply(sglang_copy)] == ["applied"] * len(patches.series())
    patched = _files(sglang_copy)
    assert patched != pristine
    assert patches.missing(sglang_copy) == []
    assert {s for _, s in patches.check(sglang_copy)} == {patches.Status.APPLIED}

    # idempotent: a second run changes nothing
    assert {what for _, what in patches.apply(sglang_copy)} == {"already applied"}
    assert _files(sglang_copy) == patched

    patches.revert(sglang_copy)
    assert _files(sglang_copy) == pristine


def test_conflict_is_reported_by_name_and_exit_code(sglang_copy, capsys):
    (patch,) = patches.series()[:1]
    rel = patch.files()[0]
    target = sglang_copy / rel
    target.write_text(target.read_text().replace("def add_chunked_req(", "def add_chunked_request("))
    with pytest.raises(patches.PatchError, match=patch.name):
        patches.apply(sglang_copy)
    assert cli.main(["apply-patches", "--site-packages", str(sglang_copy)]) == 2
    assert patch.name in capsys.readouterr().err
    assert cli.main(["apply-patches", "--check", "--site-packages", str(sglang_copy)]) == 1


def test_other_sglang_version_is_refused(sglang_copy):
    (dist,) = sglang_copy.glob("sglang-*.dist-info")
    meta = dist / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.17", "Version: 0.5.16", 1))
    with pytest.raises(patches.PatchError, match="0.5.17"):
        patches.apply(sglang_copy)


def test_cli_round_trip(sglang_copy, capsys):
    args = ["apply-patches", "--site-packages", str(sglang_copy)]
    assert cli.main(["apply-patches", "--check", "--site-packages", str(sglang_copy)]) == 1
    assert cli.main(args) == 0
    assert cli.main(["apply-patches", "--check", "--site-packages", str(sglang_copy)]) == 0
    assert cli.main(args + ["--revert"]) == 0
    out = capsys.readouterr().out
    assert "applied" in out and "reverted" in out


def test_installed_sglang_is_patched():
    """The environment under test runs the series (as the README's install does)."""
    assert patches.missing() == []
