"""``adapters.state``: what every adapter reads of this process's published configuration."""

import pytest
from sglang.srt.runtime_context import publish

from corun_sglang.serving.adapters import state


@pytest.mark.parametrize(
    "ablation,splitkv_off,isolated",
    [(None, False, False), ("splitkv-off", True, False), ("splitkv-off+isolated-prefill", True, True)],
)
def test_ablations_apply_only_their_mechanisms(make_args, ablation, splitkv_off, isolated):
    publish(make_args(corun_ablation=ablation), role="scheduler")
    assert state.applies("splitkv-off") is splitkv_off
    assert state.applies("isolated-prefill") is isolated
    assert state.serving_corun() is False
