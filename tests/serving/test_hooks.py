"""``hooks``: every target resolves and carries its adapter; registration is idempotent."""

import pkgutil

from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from corun_sglang.serving import hooks


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


def test_unhooked_names_a_target_that_lost_its_hook(sglang_plugins):
    stray = hooks.Hook(
        "sglang.srt.managers.scheduler.Scheduler.event_loop_normal",
        HookType.AROUND,
        "corun_sglang.serving.adapters.startup:scheduler_init",
    )
    assert hooks.unhooked((stray,)) == [f"{stray.target}: resolved but not hooked"]


def test_unhooked_names_a_target_sglang_does_not_have(sglang_plugins):
    renamed = hooks.Hook(
        "sglang.srt.managers.scheduler.Scheduler.renamed_method",
        HookType.AROUND,
        "corun_sglang.serving.adapters.startup:scheduler_init",
    )
    (problem,) = hooks.unhooked((renamed,))
    assert problem.startswith(f"{renamed.target}: not found")
