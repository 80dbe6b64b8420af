"""``corun-sglang verify-tiers``: which decode graph sizes below N give a request the bits of the N-slot graph.

A ``--corun`` server started with ``--corun-decode-tier-candidates`` captures the candidate sizes
unverified. For each needle (a seeded token-id request) the probe first takes its reference
generation inside N - 1 co-runners, so that every one of its decode steps replays the N-slot
graph, then, for each candidate M, its generation inside M - 1 co-runners, so that every step
replays the M-slot graph. The co-runners are sent first and are all running (each has streamed
its first token) before the needle is sent, and they could decode longer than the needle, so the
running count stays M for the needle's whole life; once the needle has its reply they are aborted,
so a round lasts as long as its needle. A candidate is a tier when every needle's
tokens and logprobs equal its reference bit for bit; a different kernel or reduction order in any
layer shows as a divergence within a few steps. The record (``record.TiersRecord``) carries the
environment the server logged, which a server serving the record must match. A server whose KV pool
cannot hold a reference round's whole sequences at once (``pool_problem``) is not probed: full-sequence
admission would hold co-runners back, and the reference would decode in a smaller graph than N's.
``verify`` starts a candidate server of its own; ``on_server`` probes one already started, which runs
nothing else meanwhile (calibration's, which also carries a prefill pack candidate: its co-runners'
prefills are then packed, the needle's prefill is alone in every round).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from corun_sglang.core import policy
from corun_sglang.core.compare import Generation, first_divergence
from corun_sglang.probes import generate, harness

if TYPE_CHECKING:
    from corun_sglang.records.record import TiersRecord

def _body(prompt: list[int], max_new_tokens: int, temperature: float, seed: int, stream: bool = False) -> dict:
    return {
        "input_ids": prompt, "return_logprob": not stream, "stream": stream,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature,
                            "ignore_eos": True, "sampling_seed": seed},
    }


#: The longest co-runner prompt (``corunners``).
CORUNNER_PROMPT = 48


def needles(count: int, tokens: int, vocab: int, seed: int = 0) -> list[dict]:
    """``count`` needle requests: prompts from 32 to 2,048 tokens (log-spaced), T 0.8, seeded."""
    rnd = random.Random(seed)
    lengths = [int(32 * 64 ** (i / max(1, count - 1))) for i in range(count)]
    return [_body(generate.token_ids(rnd, n, vocab), tokens, 0.8, seed * 1000 + i) for i, n in enumerate(lengths)]


def corunners(count: int, tokens: int, vocab: int, seed: int) -> list[dict]:
    """``count`` streamed co-runners with short prompts (16-48 tokens), ``tokens`` new tokens each."""
    rnd = random.Random(seed)
    return [_body(generate.token_ids(rnd, rnd.randint(16, CORUNNER_PROMPT), vocab), tokens, 1.0, seed * 1000 + i,
                  stream=True) for i in range(count)]


#: The KV pool size, in tokens, a server's scheduler logs at start.
POOL_LOG = re.compile(r"max_total_num_tokens=(\d+)")


def pool_needed(n: int, needle_bodies: Sequence[dict], page_size: int = 1) -> int:
    """KV tokens a reference round reserves at once under full-sequence admission
    (``policy.reserved_tokens``): N - 1 co-runners of the longest co-runner prompt and the longest needle."""
    tokens = corunner_tokens(n, max(b["sampling_params"]["max_new_tokens"] for b in needle_bodies))
    needle = max(policy.reserved_tokens(len(b["input_ids"]), b["sampling_params"]["max_new_tokens"], page_size)
                 for b in needle_bodies)
    return (n - 1) * policy.reserved_tokens(CORUNNER_PROMPT, tokens, page_size) + needle


def pool_problem(log_text: str, n: int, needle_bodies: Sequence[dict]) -> str | None:
    """Why a server that logged ``log_text`` cannot run a reference round whole (None: it can)."""
    found = POOL_LOG.search(log_text)
    if found is None:
        return "the candidate server logged no KV pool size (max_total_num_tokens)"
    pool, need = int(found.group(1)), pool_needed(n, needle_bodies)
    if pool < need:
        return (f"the candidate server's KV pool holds {pool} tokens; a reference round reserves {need} "
                f"(N - 1 = {n - 1} co-runners and a needle), so it would not decode in the {n}-slot graph. "
                "Fix: give it more memory (--mem-fraction-static, --max-total-tokens)")
    return None


def corunner_tokens(n: int, needle_tokens: int) -> int:
    """New tokens per co-runner: enough to outlast the needle even if a decode step ran after every
    admission (up to n of them) before the needle's; a co-runner that ended early would let the
    needle decode in a smaller graph than the one under test."""
    return needle_tokens + n + 64


#: Co-runners and a needle -> the needle's generation among them.
Sender = Callable[[list[dict], dict], Generation]


def sender(url: str, timeout: float = 900) -> Sender:
    """The probe's ``Sender`` over HTTP: the co-runners streamed, then the needle once each of them streams,
    then every co-runner aborted once the needle has its reply (``harness.once_running``, ``end_others``):
    the server must run nothing else."""
    def send(others: list[dict], needle: dict) -> Generation:
        return Generation.of_reply(harness.once_running(url, others, needle, timeout, end_others=True))

    return send


def probe(send: Sender, n: int, candidates: Sequence[int], needle_bodies: Sequence[dict], vocab: int,
          seed: int = 1, progress: Callable[[str], None] = harness.quiet) -> dict[int, list[int | None]]:
    """Per candidate M: for each needle, its first step that differs from its N-slot reference (None: none).
    ``progress`` gets a line as each reference and each candidate starts, and each candidate's outcome."""
    tokens = corunner_tokens(n, max(b["sampling_params"]["max_new_tokens"] for b in needle_bodies))
    count = len(needle_bodies)
    reference = []
    for i, b in enumerate(needle_bodies):
        progress(f"reference: needle {i + 1}/{count} among {n - 1} co-runners (the {n}-slot graph)")
        reference.append(send(corunners(n - 1, tokens, vocab, seed), b))
    found = {}
    for m in sorted(candidates):
        progress(f"size {m}: {count} needles, each among {m - 1} co-runners")
        found[m] = [first_divergence(ref, send(corunners(m - 1, tokens, vocab, seed + m), b))
                    for ref, b in zip(reference, needle_bodies)]
        differ = [s for s in found[m] if s is not None]
        progress(f"size {m}: " + (f"differs from step {min(differ)}" if differ else "identical"))
    return found


def verdict(found: Mapping[int, Sequence[int | None]]) -> tuple[list[int], dict[int, int]]:
    """Tiers (every needle identical) and rejected sizes with their earliest divergent step."""
    tiers = [m for m, steps in sorted(found.items()) if all(s is None for s in steps)]
    rejected = {m: min(s for s in steps if s is not None)
                for m, steps in sorted(found.items()) if any(s is not None for s in steps)}
    return tiers, rejected


def model_vocab(model_path: str, default: int = 32000) -> int:
    """The vocabulary size in ``model_path``/config.json (``default`` if there is none)."""
    config = Path(model_path) / "config.json"
    if config.exists():
        return int(json.loads(config.read_text()).get("vocab_size", default))
    return default


def on_server(server, model_path: str, candidates: Sequence[int], n: int, out: Path, needle_count: int = 2,
              needle_tokens: int = 32, seed: int = 0,
              progress: Callable[[str], None] = harness.quiet) -> "TiersRecord":
    """Probe ``server`` (``launch.Server``: started with ``--corun``, N = ``n`` and these candidates, running
    nothing else), write the record to ``out``; returns it. ``RuntimeError`` (no record written) where its KV
    pool cannot hold a reference round (``pool_problem``)."""
    from corun_sglang.records import environment
    from corun_sglang.records.record import TiersRecord

    found_environment = environment.environment_from_log(server.log_text())
    vocab = model_vocab(model_path)
    bodies = needles(needle_count, needle_tokens, vocab, seed)
    problem = pool_problem(server.log_text(), n, bodies)
    if problem:
        raise RuntimeError(problem)
    found = probe(sender(server.url), n, candidates, bodies, vocab, seed=seed + 1, progress=progress)
    passed, rejected = verdict(found)
    record = TiersRecord(n=n, tiers=tuple(passed), environment=found_environment, rejected=rejected,
                         source=str(out))
    record.write(out)
    return record


def candidate_args(candidates: Sequence[int], n: int) -> list[str]:
    """The options that make a ``--corun`` server a tiers candidate of N = ``n``."""
    return ["--max-running-requests", str(n), "--corun-decode-tier-candidates", ",".join(map(str, candidates))]


def verify(model_path: str, candidates: Sequence[int], n: int, out: Path, log: Path, server_args: Sequence[str] = (),
           needle_count: int = 2, needle_tokens: int = 32, seed: int = 0, static_gb: float | None = None,
           env: Mapping[str, str] | None = None, progress: Callable[[str], None] = harness.quiet) -> "TiersRecord":
    """Start a candidate server (with ``env`` added to its environment), probe it (``on_server``), stop it;
    returns the record written to ``out``. ``progress`` gets a line as the server starts and as the probe goes
    (``probe``)."""
    from corun_sglang.probes.launch import Server

    progress(f"starting the candidate server (N = {n}, candidates {list(candidates)}; log: {log})")
    server = Server(model_path, ["--corun", *candidate_args(candidates, n), *server_args], log, static_gb=static_gb,
                    env=env)
    progress(f"server ready at {server.url}")
    try:
        return on_server(server, model_path, candidates, n, out, needle_count, needle_tokens, seed, progress)
    finally:
        server.stop()


def render(record: "TiersRecord") -> str:
    lines = [f"decode tiers verified against N = {record.n}: {list(record.tiers) or 'none'}"]
    lines += [f"  {m}: rejected, a needle first differs at step {step}" for m, step in sorted(record.rejected.items())]
    return "\n".join(lines)
