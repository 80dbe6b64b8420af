"""``probes.generate``: seeded prompts every caller shares.

The pinned prompts are those the callers sent before they shared this module (``verify``'s text,
the GPU tests' token ids, ``bench`` workloads, the tiers probe's needles and co-runners): records and
results made with them stay comparable only while the same seeds give the same prompts.
"""

import hashlib
import json
import random

from bench import workloads
from corun_sglang.commands import verify
from corun_sglang.probes import verify_tiers
from corun_sglang.probes import generate


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def test_the_callers_prompts_stay_what_their_seeds_gave():
    texts = verify.prompts(3, seed=5)
    assert [len(t.split()) for t in texts] == [91, 9, 11] and texts[0].startswith("who orange to engine")
    assert _digest(texts) == "33d5e956f1f8879c"
    gpu = generate.token_prompts(4, 16, 2048, seed=0)  # tests/gpu: harness's prompts of test_determinism
    assert [len(p) for p in gpu] == [963, 31, 862, 55] and gpu[0][:3] == [110350, 10712, 67973]
    assert _digest(gpu) == "c8274a569426bfd5"
    bench = workloads.prompts([(5, 1), (300, 1), (1024, 1)], seed=2)
    assert [p[:3] for p in bench] == [[14924, 24108, 22348], [80876, 66051, 55731], [60838, 86454, 115140]]
    assert _digest(bench) == "1ea6a3f4ab3dca78"
    needles = verify_tiers.needles(3, 32, vocab=500, seed=4)
    assert [len(b["input_ids"]) for b in needles] == [32, 256, 2048] and needles[0]["input_ids"][:3] == [220, 255, 152]
    assert _digest(needles) == "a9a84a67736d1150"
    assert _digest(verify_tiers.corunners(2, 40, vocab=500, seed=9)) == "860383c899f9a4ee"
    assert generate.token_ids(random.Random(3), 5, 1000) == [343, 706, 657, 233, 478]


def test_prompts_are_seeded_and_within_their_bounds():
    a = generate.token_prompts(20, 16, 64, seed=1, vocab=300)
    assert a == generate.token_prompts(20, 16, 64, seed=1, vocab=300) != generate.token_prompts(20, 16, 64, seed=2)
    assert all(16 <= len(p) <= 64 for p in a) and len({len(p) for p in a}) > 5
    assert all(generate.FIRST_TOKEN <= t < 300 for p in a for t in p)
    assert [len(p) for p in generate.sized_prompts([3, 0, 7], seed=0)] == [3, 0, 7]
    texts = generate.text_prompts(10, seed=3, low=2, high=5)
    assert all(2 <= len(t.split()) <= 5 and set(t.split()) <= set(generate.WORDS) for t in texts)

