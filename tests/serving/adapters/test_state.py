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
    assert state.config() is None


def test_the_guards_pass_through_without_corun_and_act_with_it(make_args):
    import asyncio

    @state.corun_only
    def around(original, x):
        return ("corun", original(x))

    @state.corun_only_after
    def after(result, x):
        return ("corun", result)

    @state.corun_only_stream
    async def stream(original, n):
        async for item in original(n):
            yield item * 10

    async def numbers(n):
        for i in range(n):
            yield i

    def drain(gen):
        async def run():
            return [i async for i in gen]

        return asyncio.run(run())

    publish(make_args(corun=False), role="scheduler")
    assert around(lambda x: x + 1, 1) == 2 and after("sglang's", 1) == "sglang's"
    assert drain(stream(numbers, 3)) == [0, 1, 2]
    publish(make_args(corun=True), role="scheduler")
    assert around(lambda x: x + 1, 1) == ("corun", 2) and after("sglang's", 1) == ("corun", "sglang's")
    assert drain(stream(numbers, 3)) == [0, 10, 20]


def test_whether_corun_is_on_is_asked_of_the_published_configuration_alone():
    """No adapter reads ``--corun`` off an object's server args: ``state.config()`` (and its guards) answer."""
    import re
    from pathlib import Path

    folder = Path(state.__file__).parent
    asked = [f"{p.name}:{n}" for p in sorted(folder.glob("*.py")) if p.name != "state.py"
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"server_args\.corun\b|getattr\([^)]*[\"']corun[\"']|\.corun_config\b", line)]
    assert asked == []
