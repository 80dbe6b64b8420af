from corun_sglang import policy


def test_chunk_budget_is_the_chunk_size_whatever_else():
    assert policy.chunk_budget(4096) == 4096
    assert policy.chunk_budget(1) == 1
