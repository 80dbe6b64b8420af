"""Determinism suite: scenarios a-j against three arms, dense and MoE checkpoints.

Arms: ``default`` (SGLang as shipped: the negative control, divergence
asserted in scenarios a, b, d, i), ``deterministic`` (SGLang's
``--enable-deterministic-inference``: reported only) and ``corun`` (every
comparison must be bitwise identical); ``corun-moe-compute`` (``--corun
--corun-moe-padding compute``, asserted like ``corun``, whose MoE padding rows
skip the experts) runs when named, and scenario j then checks that both give
every request the same bits. For each shape the arms' servers run
side by side on one GPU, each with ``CORUN_SUITE_STATIC_GB`` GiB of static
memory, and every scenario runs on all arms at once (the other arms' load
changes only timing, which the default arm's batching is free to follow and
``--corun`` must be immune to).

Environment: ``CORUN_SUITE_SHAPES`` (default ``qwen3-8b,qwen3-moe-small``),
``CORUN_SUITE_ARMS`` (default the first three; one arm at a time for a model too
large for three copies), ``CORUN_SUITE_STATIC_GB`` (default 36),
``CORUN_SUITE_PERMUTATIONS`` (scenario c, default 16), ``CORUN_SUITE_SERVER_ARGS``
(default ``--attention-backend flashinfer``, so prefills run in SGLang's default prefill
CUDA graphs as ``--corun`` serves them; every
server also gets ``--chunked-prefill-size 2048``, which scenario f needs
prompts three times longer than, and ``--tp-size $CORUN_SUITE_TP``, default 1),
``CORUN_WEIGHTS`` (``in-place``, the default, or ``files``; see
``corun_sglang.tools.synthetic``). Each scenario appends one JSON line per arm to
``$CORUN_RESULTS/suite.jsonl``; ``scripts/determinism_report.py`` turns them
into ``docs/results/determinism.md``.
"""

import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from corun_sglang.compare import Generation
from corun_sglang.tools import generate

import harness

pytestmark = pytest.mark.e2e

SHAPES = os.environ.get("CORUN_SUITE_SHAPES", "qwen3-8b,qwen3-moe-small").split(",")
ARMS = {
    "default": [],
    "deterministic": ["--enable-deterministic-inference"],
    "corun": ["--corun"],
    # --corun with a decode graph's padding rows routed through the MoE experts: selected by name
    "corun-moe-compute": ["--corun", "--corun-moe-padding", "compute"],
}
SELECTED = os.environ.get("CORUN_SUITE_ARMS", "default,deterministic,corun").split(",")
TP = int(os.environ.get("CORUN_SUITE_TP", "1"))
STATIC_GB = float(os.environ.get("CORUN_SUITE_STATIC_GB", "36"))
PERMUTATIONS = int(os.environ.get("CORUN_SUITE_PERMUTATIONS", "16"))
SERVER_ARGS = os.environ.get(
    "CORUN_SUITE_SERVER_ARGS", "--attention-backend flashinfer"
).split() + ["--chunked-prefill-size", "2048", "--tp-size", str(TP)]
MUST_DIVERGE_IN_DEFAULT = {"a", "b", "d", "i"}
ASSERTED = {"default", "corun", "corun-moe-compute"}  # the deterministic arm is reported only
COMPARED = ("corun", "corun-moe-compute")  # scenario j: the same bits, padding rows through the experts or not


@pytest.fixture(scope="module", params=SHAPES)
def arms(request, launch, tmp_path_factory):
    """(shape, {arm: server}): the selected arms' servers, started one after another, side by side."""
    from corun_sglang.tools import synthetic

    shape = request.param
    unknown = set(SELECTED) - set(ARMS)
    assert not unknown, f"CORUN_SUITE_ARMS names unknown arms {sorted(unknown)}"
    root = Path(os.environ.get("CORUN_CHECKPOINTS", str(tmp_path_factory.getbasetemp())))
    ckpt = synthetic.prepare(root / f"ckpt-{shape}", shape, os.environ.get("CORUN_WEIGHTS", "in-place"))
    servers = {}
    try:
        for arm in SELECTED:  # one after another: each sizes its memory from what is free at its start
            try:
                servers[arm] = launch(str(ckpt), *ARMS[arm], *SERVER_ARGS, name=f"suite-{shape}-{arm}",
                                      static_gb=STATIC_GB)
            except (RuntimeError, TimeoutError) as exc:
                if arm in ASSERTED:
                    raise
                # a reported-only arm that cannot start is reported as such; the others go on
                _record(shape, arm, "start", [], error=str(exc)[-2000:])
        yield shape, servers
    finally:
        for server in servers.values():
            server.stop()


def _record(shape, arm, scenario, divergences, **extra):
    label = shape if TP == 1 else f"{shape}-tp{TP}"
    row = {"shape": label, "arm": arm, "scenario": scenario, "tp": TP, **harness.summary(divergences), **extra}
    folder = os.environ.get("CORUN_RESULTS")
    if folder:
        with open(Path(folder) / "suite.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    return row


def _problem(arm, scenario, row) -> str | None:
    corun = arm.startswith("corun")
    if corun and row["divergent"]:
        return f"{arm} diverged: {row}"
    if corun and "distinct_samples" in row and row["distinct_samples"] != row["comparisons"]:
        return f"{arm} n>1 samples not distinct: {row}"
    if arm == "default" and scenario in MUST_DIVERGE_IN_DEFAULT and not row["divergent"]:
        return f"negative control: default SGLang did not diverge: {row}"
    return None


def _across_arms(arms, scenario, run, **extra):
    """``run(url)`` on every arm at once, a row recorded per arm, then every arm checked.

    ``run`` returns the divergences, or (divergences, extra fields for the row).
    """
    shape, servers = arms
    with ThreadPoolExecutor(len(servers)) as pool:
        futures = {arm: pool.submit(run, server.url) for arm, server in servers.items()}
    problems = []
    for arm, future in futures.items():
        result = future.result()
        divergences, more = result if isinstance(result, tuple) else (result, {})
        row = _record(shape, arm, scenario, divergences, **extra, **more)
        problems.append(_problem(arm, scenario, row))
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


def _requests(prompts, new_tokens, temperature, seed0):
    return [harness.request(p, new_tokens, temperature, seed0 + i) for i, p in enumerate(prompts)]


def _fillers(count, seed, new_tokens=64):
    rnd = random.Random(seed)
    return [
        harness.request(p, rnd.randint(8, new_tokens), rnd.choice([0.0, 0.7, 1.0]), seed * 1000 + i)
        for i, p in enumerate(generate.token_prompts(count, 16, 1024, seed=seed))
    ]


def _inside(url, needle, others, position):
    batch = others[:position] + [needle] + others[position:]
    return harness.generate(url, batch)[position]


def test_a_bs1_vs_bs32(arms):
    reqs = _requests(generate.token_prompts(32, 16, 1024, seed=10), 16, 0.6, 100)

    def run(url):
        alone = harness.generate(url, reqs, concurrent=False)
        return harness.compare(alone, harness.generate(url, reqs))

    _across_arms(arms, "a", run)


@pytest.mark.parametrize("temperature", [0.0, 0.8], ids=["greedy", "t0.8"])
def test_b_needle_in_random_batches(arms, temperature):
    rnd = random.Random(20)
    needle = harness.request(generate.token_prompts(1, 200, 200, seed=21)[0], 128, temperature, 7)
    trials = []
    for trial in range(4):
        size = rnd.randint(64, 256)
        trials.append((_fillers(size - 1, 30 + trial, 128), rnd.randrange(size)))

    def run(url):
        alone = harness.generate(url, [needle], concurrent=False)[0]
        got = [_inside(url, needle, others, position) for others, position in trials]
        return harness.compare([alone] * len(got), got)

    _across_arms(arms, "b", run, temperature=temperature)


def test_c_arrival_order_permutations(arms):
    reqs = _requests(generate.token_prompts(64, 16, 1024, seed=40), 32, 0.6, 400)
    orders = []
    for k in range(PERMUTATIONS):
        order = list(range(len(reqs)))
        random.Random(41 + k).shuffle(order)
        orders.append(order)

    def run(url):
        alone = harness.generate(url, reqs, concurrent=False)
        divergences = []
        for order in orders:
            outs = harness.generate(url, [reqs[i] for i in order])
            by_index = dict(zip(order, outs))
            divergences += harness.compare(alone, [by_index[i] for i in range(len(reqs))])
        return divergences

    _across_arms(arms, "c", run, permutations=PERMUTATIONS)


def test_d_needle_under_concurrency(arms):
    needle = harness.request(generate.token_prompts(1, 300, 300, seed=50)[0], 64, 0.8, 9)
    crowds = {n: _fillers(n, 51 + n, 96) for n in (1, 7, 63, 255)}

    def run(url):
        alone = harness.generate(url, [needle], concurrent=False)[0]
        got = [_inside(url, needle, others, n // 2) for n, others in crowds.items()]
        return harness.compare([alone] * len(got), got)

    _across_arms(arms, "d", run)


def test_e_long_outputs(arms):
    reqs = _requests(generate.token_prompts(4, 64, 512, seed=60), 1024, 0.6, 600)
    others = _fillers(28, 61, 256)

    def run(url):
        alone = harness.generate(url, reqs, concurrent=False)
        return harness.compare(alone, harness.generate(url, reqs + others)[: len(reqs)])

    _across_arms(arms, "e", run)


def test_f_prompts_longer_than_three_chunks(arms):
    reqs = _requests(generate.token_prompts(4, 6500, 8000, seed=70), 32, 0.6, 700)
    others = _fillers(28, 71)

    def run(url):
        alone = harness.generate(url, reqs, concurrent=False)
        return harness.compare(alone, harness.generate(url, reqs + others)[: len(reqs)])

    _across_arms(arms, "f", run)


def _n_samples(url, prompt, n, seed):
    body = {"input_ids": prompt, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 24, "temperature": 0.8, "n": n, "ignore_eos": True,
                                "sampling_seed": seed}}
    reply = httpx.post(url + "/generate", json=body, timeout=600)
    reply.raise_for_status()
    return [Generation.of_reply(x) for x in reply.json()]


def test_g_parallel_samples_distinct_and_reproducible(arms):
    prompt = generate.token_prompts(1, 100, 100, seed=80)[0]

    def run(url):
        first = _n_samples(url, prompt, 4, 81)
        second = _n_samples(url, prompt, 4, 81)
        return harness.compare(first, second), {"distinct_samples": len({g.tokens for g in first})}

    _across_arms(arms, "g", run)


def test_h_aborted_co_runners_do_not_change_the_needle(arms):
    needle = harness.request(generate.token_prompts(1, 200, 200, seed=90)[0], 96, 0.8, 11)
    others = _fillers(63, 91, 512)

    def run(url):
        import threading
        import time

        mine = [dict(r, rid=f"abort-me-{i}-{url.rsplit(':', 1)[1]}") for i, r in enumerate(others)]
        alone = harness.generate(url, [needle], concurrent=False)[0]

        def abort_later():
            time.sleep(1.0)
            for r in mine[::2]:
                httpx.post(url + "/abort_request", json={"rid": r["rid"]}, timeout=30)

        threading.Thread(target=abort_later, daemon=True).start()
        return harness.compare([alone], [_inside_tolerant(url, needle, mine)])

    _across_arms(arms, "h", run)


def _inside_tolerant(url, needle, others):
    """The needle's generation while ``others`` run (aborted ones may fail; they are not compared)."""

    def one(req):
        with httpx.Client(timeout=900) as client:
            reply = client.post(url + "/generate", json=req)
        return reply.json() if reply.status_code == 200 else None

    with ThreadPoolExecutor(len(others) + 1) as pool:
        futures = [pool.submit(one, r) for r in others[:32]] + [pool.submit(one, needle)]
        futures += [pool.submit(one, r) for r in others[32:]]
        return Generation.of_reply(futures[32].result())


FILTERS = [{"top_p": 0.9, "top_k": 50}, {"top_p": 0.3}, {"top_k": 20}, {"top_p": 0.95, "min_p": 0.05}, {}]


def test_i_filtered_needles_among_mixed_filters(arms):
    """Needles with top-p / top-k keep their tokens whatever filters their co-runners ask for: the
    batch's widest top-k and its top-p rows change what the sampler computes for the whole batch."""
    rnd = random.Random(100)
    needles = [
        harness.request(p, 64, temperature, 13 + i, **FILTERS[i])
        for i, (p, temperature) in enumerate(zip(generate.token_prompts(2, 100, 400, seed=101), (0.8, 0.5)))
    ]
    trials = []
    for trial in range(3):
        others = _fillers(rnd.randint(32, 200), 110 + trial, 96)
        for r in others:
            r["sampling_params"].update(rnd.choice(FILTERS))
        positions = sorted(rnd.sample(range(len(others) + 2), 2))
        trials.append((others, positions))

    def run(url):
        alone = harness.generate(url, needles, concurrent=False)
        got = []
        for others, positions in trials:
            batch = list(others)
            for position, needle in zip(positions, needles):
                batch.insert(position, needle)
            outs = harness.generate(url, batch)
            got += [outs[position] for position in positions]
        return harness.compare(alone * len(trials), got)

    _across_arms(arms, "i", run)


def test_j_moe_padding_rows_skip_the_experts_without_changing_a_bit(arms):
    """``--corun-moe-padding skip`` (``--corun``'s default here) gives every request the bits of ``compute``:
    the same requests, alone and among 1-255 others (graphs with few to no padding rows), on both
    servers. Negative control: the default arm, on the same requests, differs from ``--corun``."""
    shape, servers = arms
    if not set(COMPARED) <= set(servers):
        pytest.skip(f"needs the arms {', '.join(COMPARED)}")
    needles = _requests(generate.token_prompts(4, 100, 400, seed=120), 64, 0.8, 1200)
    crowds = [_fillers(n, 121 + n, 96) for n in (1, 15, 100, 255)]

    def run(url):
        alone = harness.generate(url, needles, concurrent=False)
        return alone + [_inside(url, needle, others, len(others) // 2) for needle, others in zip(needles, crowds)]

    with ThreadPoolExecutor(len(servers)) as pool:
        got = {arm: future.result() for arm, future in
               [(arm, pool.submit(run, server.url)) for arm, server in servers.items()]}
    reference = got["corun"]
    rows = {arm: _record(shape, arm, "j", harness.compare(reference, outs)) for arm, outs in got.items()
            if arm != "corun"}
    assert rows["corun-moe-compute"]["divergent"] == 0, rows["corun-moe-compute"]
    if "default" in rows:
        assert rows["default"]["divergent"] == rows["default"]["comparisons"], rows["default"]
