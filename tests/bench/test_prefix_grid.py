"""``bench/prefix_grid.py``: the cases of the prefix-grid experiment and their summary."""

from bench import prefix_grid


def test_each_prompt_gets_a_grid_an_off_grid_and_a_whole_prompt_hit():
    got = prefix_grid.cases(256, [600, 2100, 100], vocab=1000)
    assert [(c.kind, len(c.prompt), c.prefix) for c in got] == [
        ("grid", 600, 512), ("off-grid", 600, 519), ("whole", 600, 599),
        ("grid", 2100, 2048), ("off-grid", 2100, 2055), ("whole", 2100, 2099)]  # 100 tokens: no chunk to hit
    grid, off, whole = got[:3]
    assert grid.warm_up() == list(grid.prompt[:512]) and off.warm_up() == list(off.prompt[:519])
    assert whole.warm_up() == list(whole.prompt)
    assert got == prefix_grid.cases(256, [600, 2100, 100], vocab=1000)


def test_only_warm_runs_that_hit_as_intended_count():
    rows = [{"kind": "grid", "grid": 256, "hit_as_intended": True, "identical": True},
            {"kind": "grid", "grid": 256, "hit_as_intended": False, "identical": True},
            {"kind": "whole", "grid": 256, "hit_as_intended": True, "identical": False}]
    assert prefix_grid.summarize(rows) == {"grid G=256": {"cases": 2, "hit_as_intended": 1, "identical": 1},
                                           "whole G=256": {"cases": 1, "hit_as_intended": 1, "identical": 0}}
