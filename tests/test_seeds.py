"""``seeds``: request seeds are stable, pinned, and distinct where they must be."""

import subprocess
import sys

from corun_sglang import seeds

ALL = 1 << 30


def test_request_seed_is_stable_across_processes_and_pinned():
    params = {"temperature": 0.6, "top_p": 1.0, "top_k": ALL, "min_p": 0.0}
    here = seeds.request_seed(0, [1, 2, 3], params)
    code = (
        "from corun_sglang import seeds;"
        f"print(seeds.request_seed(0, [1, 2, 3], {params!r}))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "123", "TRITON_INTERPRET": "1", "PATH": ""},
    ).stdout.split()[-1]
    assert int(there) == here
    assert here == 2169840291686027455  # pinned: a change here breaks reproducibility across versions


def test_request_seed_depends_on_server_seed_prompt_and_parameters():
    params = {"temperature": 0.6, "top_p": 1.0, "top_k": ALL, "min_p": 0.0}
    base = seeds.request_seed(0, [1, 2, 3], params)
    assert seeds.request_seed(1, [1, 2, 3], params) != base
    assert seeds.request_seed(0, [1, 2, 4], params) != base
    assert seeds.request_seed(0, [1, 2, 3], {**params, "temperature": 0.7}) != base
    assert 0 <= base < 2**63


def test_child_seeds_are_distinct_and_stable():
    children = [seeds.child_seed(42, i) for i in range(64)]
    assert len(set(children)) == 64 and 42 not in children
    assert children == [seeds.child_seed(42, i) for i in range(64)]
