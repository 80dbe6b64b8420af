"""``hooks``: every target resolves and carries its adapter; registration is idempotent; every hook says why,
what SGLang does there and what would let it go, and ``docs/hooks.md`` is the table's ledger."""

import dataclasses
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from sglang.srt.plugins.hook_registry import HookRegistry

from corun_sglang.serving import hooks
from corun_sglang.serving.adapters import startup

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "hooks.md"


def test_every_target_is_hooked_after_sglang_loads_plugins(sglang_plugins):
    assert hooks.unhooked() == []
    for hook in hooks.HOOKS:
        assert hook.target in HookRegistry._patched


def test_the_synthetic_weight_hook_is_registered_only_where_its_seed_is_set(sglang_plugins, monkeypatch):
    from corun_sglang.tools.synthetic import SEED_ENV

    assert hooks.SYNTHETIC not in hooks.selected({})  # a production server: no testing hook
    assert hooks.selected({SEED_ENV: "0"}) == hooks.HOOKS + (hooks.SYNTHETIC,)
    monkeypatch.setenv(SEED_ENV, "0")
    hooks.register()
    HookRegistry.apply_hooks()
    assert hooks.unhooked((hooks.SYNTHETIC,)) == []


def test_targets_are_named_once():
    targets = [h.target for h in hooks.HOOKS + (hooks.SYNTHETIC,)]
    assert len(targets) == len(set(targets))


def test_register_is_idempotent(sglang_plugins):
    before = {h.target: list(HookRegistry._hooks[h.target]) for h in hooks.HOOKS}
    resolved = {h.target: pkgutil.resolve_name(h.target) for h in hooks.HOOKS}
    hooks.register()
    HookRegistry.apply_hooks()
    assert {h.target: list(HookRegistry._hooks[h.target]) for h in hooks.HOOKS} == before
    # applying again wraps nothing twice
    assert {h.target: pkgutil.resolve_name(h.target) for h in hooks.HOOKS} == resolved


def _stray(target: str) -> hooks.Hook:
    """The hook on ``Scheduler.__init__`` moved to ``target``."""
    (scheduler_init,) = [h for h in hooks.HOOKS if h.adapter is startup.scheduler_init]
    return dataclasses.replace(scheduler_init, target=target)


def test_unhooked_names_a_target_that_lost_its_hook(sglang_plugins):
    stray = _stray("sglang.srt.managers.scheduler.Scheduler.event_loop_normal")
    assert hooks.unhooked((stray,)) == [f"{stray.target}: resolved but not hooked"]


def test_unhooked_names_a_target_sglang_does_not_have(sglang_plugins):
    renamed = _stray("sglang.srt.managers.scheduler.Scheduler.renamed_method")
    (problem,) = hooks.unhooked((renamed,))
    assert problem.startswith(f"{renamed.target}: not found")


def test_every_hook_says_why_what_sglang_does_and_what_would_let_it_go():
    for hook in hooks.HOOKS + (hooks.SYNTHETIC,):
        assert all(text.strip() for text in (hook.why, hook.sglang, hook.upstream)), hook.target
    with pytest.raises(ValueError, match="upstream left blank"):
        dataclasses.replace(hooks.HOOKS[0], upstream=" ")


def test_each_adapter_is_the_object_its_name_resolves_to():
    for hook in hooks.HOOKS:
        assert not isinstance(hook.adapter, (str, hooks.Deferred)), hook.target
        assert pkgutil.resolve_name(hook.adapter_name) is hook.adapter is hook.resolve()
    assert startup.scheduler_init in {h.adapter for h in hooks.HOOKS}


def test_the_synthetic_weight_adapter_is_named_and_imported_only_where_registered():
    from corun_sglang.tools import synthetic

    assert hooks.SYNTHETIC.adapter == hooks.Deferred("corun_sglang.tools.synthetic:fill_dummy_model")
    assert hooks.SYNTHETIC.adapter_name == "corun_sglang.tools.synthetic:fill_dummy_model"
    assert hooks.SYNTHETIC.resolve() is synthetic.fill_dummy_model


def test_a_production_process_never_imports_tools():
    """The plugin loads, registers every hook and writes the ledger without importing ``tools/``."""
    from corun_sglang.probes.launch import SEED_ENV

    env = {k: v for k, v in os.environ.items() if k != SEED_ENV}
    code = ("import sys\n"
            "from corun_sglang.serving import hooks, plugin\n"
            "plugin.register()\n"
            "hooks.ledger()\n"
            "print(sorted(m for m in sys.modules if m.startswith('corun_sglang.tools')))\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_the_ledger_page_is_generated_from_the_table():
    assert DOC.read_text() == hooks.ledger(), (
        "docs/hooks.md is stale: python -m corun_sglang.serving.hooks > docs/hooks.md")


def test_the_ledger_has_a_section_per_hook_with_its_patch():
    page = hooks.ledger()
    assert any(h.patch for h in hooks.HOOKS)
    for hook in hooks.HOOKS + (hooks.SYNTHETIC,):
        assert page.count(f"### `{hook.target}`") == 1
        section = page[page.index(f"### `{hook.target}`"):].split("\n\n")[1]
        assert f"- **Adapter:** `{hook.adapter_name}`" in section
        assert (f"- **Patch:** {hook.patch}," in section) == (hook.patch is not None)
