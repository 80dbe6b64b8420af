"""Malformed and refused requests against a live ``--corun`` server while seeded co-runners decode.

Every case of ``request_corpus.CASES`` is sent (native ``/generate`` and the OpenAI endpoints,
streaming or not, batches and ``n > 1``) while eight seeded co-runners decode. The server must keep
serving, every refused case must get a 4xx (a streamed ``/generate`` an error event with a 4xx code),
every served case a 200, and each co-runner's tokens and logprobs must equal its run alone, bit for bit.
The server's own running count (its scheduler's load snapshot) must show all eight co-runners
running while the corpus is sent. The checkpoint (``CORUN_CHECKPOINT``) may be a real model's, SmolLM2 in
the queue's chunk: its byte-level vocabulary spells whatever a grammar or a forced tool call asks for.

Negative control, on the same harness: default SGLang, sent the corpus's served cases beside the same co-runners
(greedy), changes some co-runner's bits.
"""

import dataclasses
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
import httpx
import pytest

from corun_sglang.tools import request_corpus
from corun_sglang.probes import generate
from corun_sglang.tools import evidence
from corun_sglang.tools.loads import LoadProbe, Overlap

pytestmark = pytest.mark.e2e

SERVER_ARGS = os.environ.get("CORUN_SERVER_ARGS", "").split()
MODEL = "synthetic"


def _body(case):
    return case.body if case.path == request_corpus.GENERATE else {"model": MODEL, **case.body}


def _status(client, case) -> int:
    """The status a case got: the HTTP status, or for a streamed ``/generate`` the code of its error event."""
    if case.path == request_corpus.GENERATE and case.body.get("stream"):
        with client.stream("POST", case.path, json=_body(case)) as reply:
            if reply.status_code != 200:
                return reply.status_code
            for line in reply.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    error = json.loads(line[len("data: "):]).get("error")
                    if error:
                        return int(error.get("code", 400))
            return 200
    if case.body.get("stream"):
        with client.stream("POST", case.path, json=_body(case)) as reply:
            for _ in reply.iter_lines():  # read the whole stream
                pass
            return reply.status_code
    return client.post(case.path, json=_body(case)).status_code


@dataclasses.dataclass
class Run:
    """What one server did: the co-runners alone, together while the corpus was sent, and two of them after."""

    command: str
    statuses: dict[str, int]
    healthy: int
    overlap: Overlap
    alone: list
    together: list
    after: list

    def divergences(self) -> list[int | None]:
        return harness.compare(self.alone, self.together)


def _under_the_corpus(launch, checkpoint, name: str, args: tuple[str, ...], cases=request_corpus.CASES,
                      body=lambda b: b) -> Run:
    """Eight seeded co-runners (``body`` of each) decoded alone, then together while ``cases`` are sent one after
    another, on a server started with ``args``; the server stopped before this returns."""
    server = launch(checkpoint, *args, "--served-model-name", MODEL, "--load-snapshot-publish-interval", "1",
                    *SERVER_ARGS, name=name, text=True)
    vocab = min(generate.VOCAB, json.loads((Path(checkpoint) / "config.json").read_text())["vocab_size"])
    co_runners = [body(harness.request(p, 256, 0.8, 300 + i))
                  for i, p in enumerate(generate.token_prompts(8, 64, 512, seed=30, vocab=vocab))]
    try:
        alone = harness.generate(server.url, co_runners, concurrent=False)
        with ThreadPoolExecutor(len(co_runners) + 1) as pool, LoadProbe(server.pid) as probe:
            busy = pool.submit(harness.generate, server.url, co_runners)
            start = time.monotonic()
            with httpx.Client(base_url=server.url, timeout=600) as client:
                statuses = {case.name: _status(client, case) for case in cases}
            overlap = probe.during(start, time.monotonic())
            together = busy.result()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            healthy = client.get("/health").status_code
        after = harness.generate(server.url, co_runners[:2], concurrent=False)
    finally:
        server.stop()
    # every co-runner ran its whole length (ignore_eos): two empty outputs would compare equal
    assert all(len(g.tokens) == len(g.logprobs) == 256 for g in (*alone, *together, *after))
    return Run(server.command, statuses, healthy, overlap, alone, together, after)


def test_malformed_requests_get_4xx_and_change_no_co_runner(launch, checkpoint, record):
    run = _under_the_corpus(launch, checkpoint, "malformed", ("--corun",))
    wrong = {case.name: run.statuses[case.name] for case in request_corpus.CASES
             if not (400 <= run.statuses[case.name] < 500 if case.status == 400 else run.statuses[case.name] == 200)}
    divergences = run.divergences()
    record("malformed_on_gpu", {"command": run.command, "statuses": run.statuses, "wrong": wrong,
                                "co_runners": harness.summary(divergences), "overlap": run.overlap.as_row(8)})
    assert run.healthy == 200
    assert run.overlap.observed_max >= 8, run.overlap  # the corpus met all co-runners running
    assert run.after == run.alone[:2]
    assert not wrong, wrong
    assert all(d is None for d in divergences), harness.summary(divergences)


def test_default_sglang_on_the_same_harness_changes_its_co_runners_bits(launch, checkpoint, record):
    """The negative control: default SGLang (radix cache off, greedy, as the suite's ``default`` arm) with the same
    co-runners while the corpus's served cases are sent: not its refused ones, ``--corun``'s refusals, which stock
    SGLang is not asked to survive, nor the one with ``token_ids_logprob``, beside which stock SGLang's scheduler
    dies on the co-runners' batch (sglang#35705). Its decode batch, the eight co-runners and those cases, sets its
    kernels' shapes, so some co-runner's bits must differ from its run alone; that they do shows the harness sees a
    co-runner's change where there is one."""
    served = tuple(case for case in request_corpus.CASES if case.status == 200 and
                   "token_ids_logprob" not in case.body)
    run = _under_the_corpus(launch, checkpoint, "malformed-default", ("--disable-radix-cache",), served,
                            evidence.greedy)
    divergences = run.divergences()
    record("malformed_on_gpu_default", {"command": run.command, "statuses": run.statuses,
                                        "co_runners": harness.summary(divergences), "overlap": run.overlap.as_row(8)})
    assert run.healthy == 200
    assert run.overlap.observed_max >= 8, run.overlap
    assert run.after == run.alone[:2]  # alone, its bits repeat: what differs together is the batch's doing
    assert any(d is not None for d in divergences), harness.summary(divergences)
