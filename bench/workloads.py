"""Benchmark workloads: (input, output) length pairs, and token-id prompts for them.

Trace files live in ``bench/workloads/``; ``fixed-I-O`` names a workload of
identical requests. Prompts are seeded random token ids, so every arm sees
the same requests.

Two workloads share prompt prefixes, for the prefix cache (``PREFIX``); both draw on
``sharegpt_multiturn8k_lengths.csv`` (ShareGPT conversations in context, README), and both clip each
output at ``OUTPUT_CAP`` tokens so that four arms fit one GPU queue chunk:

- ``rl-group``: RL rollout groups, ``GROUP`` samples of each prompt sent back to back (a client that
  expands each group into requests, so each sample's ``cached_tokens`` is in its own reply). A prompt's
  length is the input of the trace's next row of at most ``RL_MAX_INPUT`` tokens (a problem with its
  instructions and examples, at most two grid chunks), the output that row's, clipped; requests come in
  multiples of ``GROUP``.
- ``sessions``: multi-turn conversations of ``TURNS`` turns behind one system prompt of ``SYSTEM``
  tokens every session shares; a turn's prompt is the previous turn's prompt, the model's reply to it
  and a new user message. Session k takes the trace's k-th row of at most ``SESSION_MAX_INPUT`` input
  tokens: its input is the last turn's prompt (raised to hold the system prompt, ``TURNS`` user messages
  of at least ``MIN_USER`` tokens and the replies), its output every turn's reply, clipped; the user
  tokens are split evenly over the turns. ``lengths`` gives each turn's (prompt, output) in session order,
  ``sessions`` the token ids (replies come from the server at run time).

Invariants: everything here is a function of the workload's name, the count and the seed; a group's
prompts are identical and every session's prompt starts with the same system prompt.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from corun_sglang.probes import generate

FOLDER = Path(__file__).parent / "workloads"
TRACES = {
    "sharegpt": "sharegpt_lengths.csv",
    "azure-conv": "azure2023_conv_lengths.csv",
    "blazedit-synthetic": "blazedit_standin_synthetic.csv",
}
FIXED = [f"fixed-{i}-{o}" for i in (1024, 4096) for o in (128, 2048)]
ALL = list(TRACES) + FIXED
#: The trace the prefix-cache workloads draw on, and their names.
MULTITURN = "sharegpt_multiturn8k_lengths.csv"
RL_GROUP, SESSIONS = "rl-group", "sessions"
PREFIX = [RL_GROUP, SESSIONS]
#: Samples per RL group, and the longest prompt a group draws from the trace.
GROUP, RL_MAX_INPUT = 8, 2048
#: Turns per session, the shared system prompt, the shortest user message, the longest last-turn prompt
#: drawn from the trace.
TURNS, SYSTEM, MIN_USER, SESSION_MAX_INPUT = 3, 1536, 64, 3072
#: The longest output of a prefix-cache workload's request.
OUTPUT_CAP = 128


def identical(name: str) -> bool:
    """Whether every request of workload ``name`` has the same lengths (a ``fixed-I-O`` workload)."""
    return name.startswith("fixed-")


def _rows(file: str) -> list[tuple[int, int]]:
    with open(FOLDER / file) as f:
        return [(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]


def _first(rows: list[tuple[int, int]], count: int, most: int, name: str) -> list[tuple[int, int]]:
    """The first ``count`` rows of at most ``most`` input tokens."""
    kept = [r for r in rows if r[0] <= most][:count]
    if len(kept) < count:
        raise ValueError(f"{name}: {len(kept)} trace rows of at most {most} input tokens, {count} asked")
    return kept


def _whole(name: str, count: int, unit: int) -> int:
    if count % unit:
        raise ValueError(f"{name} takes requests in multiples of {unit}, {count} asked")
    return count // unit


def session_turns(last_input: int, output: int) -> list[tuple[int, int]]:
    """A session's (prompt, output) per turn from its trace row: the last prompt holds the system prompt,
    ``TURNS`` user messages of at least ``MIN_USER`` tokens and the replies before it; each prompt adds the
    reply before it and a user message to the one before."""
    reply = min(output, OUTPUT_CAP)
    last = max(last_input, SYSTEM + TURNS * MIN_USER + (TURNS - 1) * reply)
    users = last - SYSTEM - (TURNS - 1) * reply
    split = [users // TURNS] * TURNS
    split[-1] += users - sum(split)
    prompts, prompt = [], SYSTEM
    for t, user in enumerate(split):
        prompt += user + (reply if t else 0)
        prompts.append(prompt)
    return [(p, reply) for p in prompts]


def lengths(name: str, count: int = 300) -> list[tuple[int, int]]:
    """The first ``count`` (input, output) pairs of workload ``name``."""
    if identical(name):
        _, i, o = name.split("-")
        return [(int(i), int(o))] * count
    if name == RL_GROUP:
        rows = _first(_rows(MULTITURN), _whole(name, count, GROUP), RL_MAX_INPUT, name)
        return [(i, min(o, OUTPUT_CAP)) for i, o in rows for _ in range(GROUP)]
    if name == SESSIONS:
        rows = _first(_rows(MULTITURN), _whole(name, count, TURNS), SESSION_MAX_INPUT, name)
        return [turn for i, o in rows for turn in session_turns(i, o)]
    with open(FOLDER / TRACES[name]) as f:
        rows = [(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]
    if len(rows) < count:
        raise ValueError(f"{name} has {len(rows)} rows, {count} asked")
    return rows[:count]


def prompts(pairs: list[tuple[int, int]], seed: int = 0, vocab: int = generate.VOCAB) -> list[list[int]]:
    """A token-id prompt of each pair's input length, from ``seed`` (``generate.sized_prompts``)."""
    return generate.sized_prompts([i for i, _ in pairs], seed, vocab)


def workload_prompts(name: str, pairs: list[tuple[int, int]], seed: int = 0,
                     vocab: int = generate.VOCAB) -> list[list[int]]:
    """The prompts of ``pairs`` (``lengths(name, ...)``): one per request, but one per group of ``rl-group``,
    repeated for each of its samples."""
    if name != RL_GROUP:
        return prompts(pairs, seed, vocab)
    firsts = prompts(pairs[::GROUP], seed, vocab)
    return [firsts[k // GROUP] for k in range(len(pairs))]


@dataclasses.dataclass(frozen=True)
class Session:
    """One conversation: the shared system prompt, a user message per turn and each turn's reply length."""

    system: list[int]
    users: list[list[int]]
    outputs: list[int]


def sessions(pairs: list[tuple[int, int]], seed: int = 0, vocab: int = generate.VOCAB) -> list[Session]:
    """The sessions of ``pairs`` (``lengths("sessions", ...)``, ``TURNS`` a session): one system prompt, and
    user messages that make each turn's prompt the length its pair gives."""
    if len(pairs) % TURNS:
        raise ValueError(f"{len(pairs)} turns do not make sessions of {TURNS}")
    (system,) = generate.sized_prompts([SYSTEM], seed, vocab)
    out = []
    for k in range(0, len(pairs), TURNS):
        turns = pairs[k:k + TURNS]
        sizes = [turns[0][0] - SYSTEM] + [p - q - r for (p, _), (q, r) in zip(turns[1:], turns)]
        users = generate.sized_prompts(sizes, seed * 1_000_003 + k + 1, vocab)
        out.append(Session(system, users, [o for _, o in turns]))
    return out
