"""``adapters``: pass-through without --corun, policy with it (process-wide server args)."""

import pytest
from sglang.srt.runtime_context import publish

from corun_sglang import adapters


def _original(self):
    return "sglang's budget"


class _Adder:
    rem_chunk_tokens = 512


@pytest.mark.parametrize("corun,expected", [(False, "sglang's budget"), (True, 512)])
def test_chunk_budget_follows_the_published_server_args(make_args, corun, expected):
    publish(make_args(corun=corun), role="scheduler")
    assert adapters._serving_corun() is corun
    assert adapters.chunked_req_token_budget(_original, _Adder()) == expected
