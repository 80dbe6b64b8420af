"""``bench/admission.py``: ``--corun``'s admission replayed on a trace's lengths."""


import pytest


def test_admission_replay_counts_prefills_by_kind_and_decode_steps():
    from bench import admission

    # pack 256 from 17 tokens: two 100-token prompts share a prefill, the third runs in a pack of its own;
    # each decodes 2 more tokens in 2 steps, all three at once
    r = admission.replay([(100, 3)] * 3, pool=10_000, pack=256, least=17)
    assert r.prefills == {"alone: short": 0, "alone: long": 0, "pack of 1": 1, "pack of 2+": 1}
    assert (r.decode_steps, r.mean_running) == (2, 3.0)
    assert r.padding == (256 - 200) + (256 - 100)  # each pack runs at 256 tokens
    # a pool of 150 holds one whole sequence (104 tokens) at a time: a prefill, then its 2 decode steps
    r = admission.replay([(100, 3)] * 3, pool=150, pack=256, least=17)
    assert r.prefills["pack of 1"] == 3 and (r.decode_steps, r.mean_running) == (6, 1.0)
    r = admission.replay([(10, 3), (2000, 3)], pool=10_000, pack=256, least=17)
    assert (r.prefills["alone: short"], r.prefills["alone: long"]) == (1, 1) and r.padding == 0
    with pytest.raises(ValueError, match="more than the pool"):
        admission.replay([(100, 3)], pool=50, pack=256, least=17)


def test_admission_table_compares_pack_sizes_and_waits(capsys):
    from bench import admission

    assert admission.main(["--workloads", "fixed-64-448", "--requests", "6", "--pool", "100000",
                           "--pack", "128,256", "--wait", "0,4", "--shortest", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| fixed-64-448 |")]
    # 6 prompts of 64 tokens: three full packs of 2 at 128 tokens; at 256 a pack of 4 and one of 2, which
    # runs 128 padding tokens
    assert [r.split(" | ")[1:4] + [r.split(" | ")[8]] for r in rows] == [
        ["128", "0", "3", "0"], ["128", "4", "3", "0"], ["256", "0", "2", "128"], ["256", "4", "2", "128"]]


def test_waiting_for_kv_gathers_packs_of_one_into_fuller_packs():
    """A pool of three whole sequences, outputs of different lengths: the running requests free their KV a
    step apart, room for one waiting prompt each. Without a wait most prompts get a prefill of their own;
    waiting up to 4 passes gathers them two to a pack."""
    from bench import admission

    pairs = [(100, 2), (100, 3), (100, 4), (100, 5), (100, 5), (100, 5)]
    pool = 3 * (100 + 5 + 1)
    alone = admission.replay(pairs, pool=pool, pack=256, least=17, concurrency=6)
    gathered = admission.replay(pairs, pool=pool, pack=256, least=17, concurrency=6, wait=4)
    assert (alone.prefills["pack of 1"], alone.prefills["pack of 2+"]) == (4, 1)
    assert (gathered.prefills["pack of 1"], gathered.prefills["pack of 2+"]) == (0, 3)


def test_waiting_for_prompts_gathers_a_closed_loops_trickle_into_fuller_packs():
    """KV to spare and N = 4 requests in flight, each ending a step apart: the client sends one prompt as
    each ends, so without a wait every later prompt gets a pack of its own. With N/2 or more running and
    the queue short of three quarters of the pack, waiting up to 4 passes gathers them two to a pack (the
    last prompt, its pack still short, runs once the passes are spent)."""
    from bench import admission

    pairs = [(60, 2), (60, 3), (60, 4), (60, 5)] + [(60, 6)] * 4
    alone = admission.replay(pairs, pool=100_000, pack=256, least=17, max_running=4, concurrency=4)
    gathered = admission.replay(pairs, pool=100_000, pack=256, least=17, max_running=4, concurrency=4, wait=4)
    assert (alone.prefills["pack of 1"], alone.prefills["pack of 2+"]) == (4, 1)
    assert (gathered.prefills["pack of 1"], gathered.prefills["pack of 2+"]) == (1, 2)
