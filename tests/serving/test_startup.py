"""``startup``: the fail-closed check names each cause and its fix."""

import dataclasses
from pathlib import Path

import pytest

from corun_sglang.serving import patches, startup


def test_ready_environment_has_no_problems(sglang_plugins):
    assert startup.problems() == []
    startup.check_startup()


def _unpatched(folder: Path) -> Path:
    """A copy of the installed SGLang files the series changes, without their patch markers."""
    root = patches.sglang_root()
    for patch in patches.series():
        for rel in patch.files():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            text = (root / rel).read_text().replace(patch.marker, "")
            (folder / rel).write_text(text)
    return folder


def _stray(hooks, **changes):
    """The hook on ``Scheduler.__init__`` moved to a target nothing hooks."""
    scheduler_init = next(h for h in hooks.HOOKS if h.target.endswith(".Scheduler.__init__"))
    return dataclasses.replace(scheduler_init, target="sglang.srt.managers.scheduler.Scheduler.event_loop_normal",
                               **changes)


def test_missing_patch_names_the_command(sglang_plugins, tmp_path):
    tmp_path = _unpatched(tmp_path)
    (problem,) = startup.problems(sglang_root=tmp_path)
    assert "0001" in problem and "corun-sglang apply-patches" in problem
    with pytest.raises(startup.CorunStartupError, match="apply-patches"):
        startup.check_startup(sglang_root=tmp_path)


def test_a_hook_whose_target_a_missing_patch_creates_is_reported_as_the_patch(sglang_plugins, tmp_path,
                                                                            monkeypatch):
    from corun_sglang.serving import hooks

    # hooks.register leaves out a hook of a missing patch, so its target does not carry its adapter
    left_out = _stray(hooks, patch="0001")
    monkeypatch.setattr(hooks, "HOOKS", hooks.HOOKS + (left_out,))
    (problem,) = startup.problems(sglang_root=_unpatched(tmp_path))
    assert problem.startswith("SGLang patches not applied: 0001")
    (problem,) = startup.problems()  # the patch applied: the hook itself is missing
    assert "event_loop_normal: resolved but not hooked" in problem


def test_parts_are_the_problems_with_what_passed(sglang_plugins):
    found = startup.parts()
    assert [p.name for p in found] == ["sglang", "flashinfer", "patches", "hooks", "bindings"]
    assert all(p.detail and not p.problems for p in found)


def test_a_refusal_carries_its_problems():
    error = startup.CorunStartupError(["one. Fix: a", "two. Fix: b"])
    assert error.problems == ["one. Fix: a", "two. Fix: b"]
    assert str(error) == "--corun cannot start:\n  - one. Fix: a\n  - two. Fix: b"


def test_corun_refuses_to_start_when_a_hook_is_missing(sglang_plugins, make_args, monkeypatch):
    from corun_sglang.core import config
    from corun_sglang.serving import hooks

    stray = _stray(hooks)
    monkeypatch.setattr(hooks, "HOOKS", hooks.HOOKS + (stray,))
    with pytest.raises(config.CorunConfigError, match="event_loop_normal: resolved but not hooked"):
        make_args(corun=True)
    make_args()  # without --corun nothing is checked


@pytest.mark.parametrize("dist, found, fix", [
    ("sglang", "0.5.18", "pip install sglang==0.5.17"),
    ("flashinfer-python", "0.6.16", "pip install flashinfer-python==0.6.15.post1"),
])
def test_other_sglang_or_flashinfer_version_is_refused(monkeypatch, dist, found, fix):
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: found if name == dist else real(name))
    (problem,) = startup.problems()
    assert found in problem and fix in problem
