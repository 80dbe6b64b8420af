"""``bench/workloads.py``: trace rows and fixed shapes."""

from bench import workloads


def test_workloads_are_the_first_rows_and_fixed_shapes():
    pairs = workloads.lengths("sharegpt", 300)
    assert len(pairs) == 300 and pairs[0] == (18, 407)
    assert workloads.lengths("fixed-4096-128", 3) == [(4096, 128)] * 3
    prompts = workloads.prompts([(5, 1), (7, 1)], seed=1)
    assert [len(p) for p in prompts] == [5, 7] and prompts == workloads.prompts([(5, 1), (7, 1)], seed=1)
    for name in workloads.ALL:
        assert len(workloads.lengths(name, 300)) == 300
