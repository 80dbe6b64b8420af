"""``bindings``: the installed SGLang and FlashInfer have every name the adapters rely on, and a
renamed parameter or a missing attribute is named, with its target and the fix.

The stand-in targets are real functions and classes of this module, checked by the same function
that checks SGLang's.
"""

import dataclasses

import pytest

from corun_sglang.serving import bindings, hooks, startup

HERE = __name__


def plan(self, indptr, *, fixed_split_size=None, no_split_kv=False):  # ``disable_split_kv`` renamed
    self.plan_info = indptr  # no longer ``self._plan_info``


def catch_all(self, **kwargs):
    self._plan_info = kwargs


class Wrapper:
    is_cuda_graph_enabled = True

    def __init__(self):
        self._pin_memory_int_workspace_buffer = None


def test_installed_sglang_and_flashinfer_have_every_name(sglang_plugins):
    assert bindings.problems() == []


def test_every_adapter_binding_names_a_target_and_a_user():
    for binding in bindings.BINDINGS:
        assert binding.names and "." in binding.target and binding.user.split(".")[0] in (
            "adapters", "sampler", "hooks", "kernel_probe")


@pytest.mark.parametrize("binding, says", [
    (bindings.Parameters(f"{HERE}.plan", ("fixed_split_size", "disable_split_kv"), "adapters.decode.decode_plan"),
     f"{HERE}.plan: has no parameter 'disable_split_kv', which adapters.decode.decode_plan relies on"),
    (bindings.Parameters(f"{HERE}.catch_all", ("disable_split_kv",), "adapters.decode.decode_plan"),
     f"{HERE}.catch_all: has no parameter 'disable_split_kv'"),  # **kwargs may drop it
    (bindings.Attributes(f"{HERE}.Wrapper", ("is_cuda_graph_enabled", "_backend"), "adapters.prefill.prefill_plan"),
     f"{HERE}.Wrapper: has no attribute '_backend', which adapters.prefill.prefill_plan relies on"),
    (bindings.Assigns(f"{HERE}.plan", ("_plan_info",), "adapters.decode._fill_surplus"),
     f"{HERE}.plan: no longer assigns 'self._plan_info'"),
    (bindings.Parameters(f"{HERE}.Wrapper.plan", ("indptr",), "adapters.decode.decode_plan"),
     f"{HERE}.Wrapper.plan: not found"),
])
def test_a_mismatch_names_the_target_the_name_and_the_fix(binding, says):
    (problem,) = bindings.problems((binding,))
    assert problem.startswith(says)
    assert "SGLang 0.5.17 / FlashInfer 0.6.15.post1; reinstall them" in problem


def test_matching_stand_ins_pass():
    assert bindings.problems((
        bindings.Parameters(f"{HERE}.plan", ("indptr", "fixed_split_size", "no_split_kv"), "adapters.decode.decode_plan"),
        bindings.Assigns(f"{HERE}.catch_all", ("_plan_info",), "adapters.decode._fill_surplus"),
        bindings.Assigns(f"{HERE}.Wrapper.__init__", ("_pin_memory_int_workspace_buffer",), "adapters.decode._fill_surplus"),
    )) == []


def test_a_hook_target_that_does_not_resolve_is_left_to_the_hook_check(monkeypatch):
    renamed = "sglang.srt.managers.scheduler.Scheduler.renamed_method"
    scheduler_init = next(h for h in hooks.HOOKS if h.target.endswith(".Scheduler.__init__"))
    monkeypatch.setattr(hooks, "HOOKS", hooks.HOOKS + (dataclasses.replace(scheduler_init, target=renamed),))
    assert bindings.problems((bindings.Parameters(renamed, ("server_args",), "adapters.startup.scheduler_init"),)) == []


def test_corun_refuses_to_start_on_a_mismatch(sglang_plugins, make_args, monkeypatch):
    from corun_sglang.core import config

    renamed = bindings.Parameters(f"{HERE}.plan", ("disable_split_kv",), "adapters.decode.decode_plan")
    monkeypatch.setattr(bindings, "BINDINGS", bindings.BINDINGS + (renamed,))
    (problem,) = startup.problems()
    assert "has no parameter 'disable_split_kv'" in problem
    with pytest.raises(config.CorunConfigError, match="has no parameter 'disable_split_kv'"):
        make_args(corun=True)
