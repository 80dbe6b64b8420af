"""``corun-sglang verify-prefill-pack``: whether a packed prefill gives a prompt the bits it has alone.

A ``--corun`` server started with ``--corun-prefill-pack-candidate P`` packs unverified. For each
needle (a seeded prompt; lengths from the shortest packable prompt up to P less that), the probe
takes its generation alone, a prefill padded to P, then inside packings: one batched ``/generate``
call of the needle and co-runners that fill the pack (co-runners of the shortest packable length,
one long co-runner, random lengths; the needle first, last or in the middle). A packing counts when
the server logged it as one prefill batch of all its requests. Every generation is greedy; the needle's
carries the logprob of every prompt position and of a few new tokens, so a different prefill shows in
the prompt logprobs and a different KV cache in the new tokens. The co-runners ask for no logprobs, so
the rows the prefill's LM head computes change from packing to packing.

A server that also captures decode tier candidates (calibration's: ``decode_graphs`` reads the sizes from its
log) decodes a needle alone in its smallest graph and a packing of k prompts in the smallest that holds k:
where the two differ, the packing is compared on what its prefill computed (the prompt logprobs and the
first new token) and not on its decode steps, whose bits are the tiers probe's to judge; a packing decoded
in the graph of the needle alone is compared whole, and so checks the KV cache the packed prefill wrote.

The pack is verified when, for every needle, at least one packing counted, at least one of those was
compared whole, and every counted packing equals the needle alone bit for bit. The record (``record.PackRecord``) carries the environment the
server logged, which a server serving it must match. ``verify`` starts a candidate server of its own;
``on_server`` probes one already started, which runs nothing else meanwhile (calibration's).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Callable, Mapping, Sequence

from corun_sglang.core.packing import PackingError
from corun_sglang.records.record import PackRecord, pack_candidate_from_log
from corun_sglang.core.compare import Generation, first_divergence
from corun_sglang.probes import generate, harness
from corun_sglang.probes.verify_tiers import model_vocab

#: Co-runners per packing at most.
MAX_CORUNNERS = 63

#: A batched call's prompts (each a token-id list) and the needle's place among them -> the needle's
#: generation, and the prefill batches ``(requests, tokens)`` the server logged for the call.
Sender = Callable[[list[list[int]], int], tuple[Generation, list[tuple[int, int]]]]


def needle_lengths(pack: int, least: int, count: int = 4) -> list[int]:
    """``count`` needle lengths, log-spaced from ``least`` to ``pack - least`` (room for one co-runner)."""
    top = pack - least
    return sorted({round(least * (top / least) ** (i / max(1, count - 1))) for i in range(count)})


def packings(needle_len: int, pack: int, least: int, rnd: random.Random) -> list[tuple[str, list[int]]]:
    """(name, lengths) of each packing of ``needle_len`` into ``pack`` tokens, the needle marked ``-1``;
    every co-runner is packable, and the lengths sum to ``pack`` at most."""
    room = pack - needle_len
    if room < least:
        return []
    short = [least] * min(MAX_CORUNNERS, room // least)
    randoms = []
    while room - sum(randoms) >= least and len(randoms) < MAX_CORUNNERS:
        randoms.append(rnd.randint(least, min(room - sum(randoms), max(least, room // 2))))
    middle = len(randoms) // 2
    return [
        ("short-first", [-1, *short]),
        ("short-last", [*short, -1]),
        ("long-last", [room, -1]),
        ("random-middle", [*randoms[:middle], -1, *randoms[middle:]]),
    ]


def generation(meta: Mapping) -> Generation:
    """A reply's prompt logprobs (from the second position) followed by its new tokens."""
    prompt = [step for step in meta["input_token_logprobs"] if step[0] is not None]
    steps = [*prompt, *meta["output_token_logprobs"]]
    return Generation.of([s[1] for s in steps], [s[0] for s in steps])


def sender(url: str, log: Path, new_tokens: int = 4, timeout: float = 600) -> Sender:
    """The probe's ``Sender`` over HTTP: one batched ``/generate`` call (``harness.batched``), the needle
    asking for the logprob of every prompt position and the co-runners for none (so the rows a prefill's LM
    head computes vary with the co-runners), and the prefill batches the server logged in ``log`` for it."""
    def send(prompts: list[list[int]], needle: int) -> tuple[Generation, list[tuple[int, int]]]:
        body = {"input_ids": prompts, "return_logprob": [i == needle for i in range(len(prompts))],
                "logprob_start_len": [0 if i == needle else -1 for i in range(len(prompts))],
                "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}}
        got = harness.batched(url, log, body, timeout)
        return generation(got.reply[needle]["meta_info"]), got.batches

    return send


#: The decode graph sizes a ``--corun`` server logs at start (``config.CorunConfig.summary``).
DECODE_GRAPHS_LOG = re.compile(r"corun: decode graph bs=\[([0-9, ]+)\]")


def decode_graphs(log_text: str) -> list[int] | None:
    """The decode graph sizes a server logged (None: it logged none)."""
    found = DECODE_GRAPHS_LOG.search(log_text)
    return None if found is None else sorted(int(x) for x in found.group(1).split(","))


def graph_of(running: int, graphs: Sequence[int]) -> int | None:
    """The decode graph a step of ``running`` requests replays: the smallest size that holds it."""
    return next((g for g in sorted(graphs) if g >= running), None)


def prefill_part(g: Generation, length: int) -> Generation:
    """What the prefill of a ``length``-token prompt computed of ``g`` (``generation``'s layout): the logprobs of
    its positions 2 to ``length`` and the first new token."""
    return Generation.of(g.tokens[:length], g.logprobs[:length])


def probe(send: Sender, pack: int, least: int, vocab: int, needles: int = 4, seed: int = 0,
          progress: Callable[[str], None] = harness.quiet, graphs: Sequence[int] | None = None) -> dict[int, dict]:
    """Per needle length: its packings that counted, those compared whole (decoded in the graph of the needle
    alone, ``graphs`` the server's decode graph sizes; None: one graph), and those whose needle differs from
    it alone (name -> first differing position). ``progress`` gets a line as each needle starts and as each
    of its packings is checked, with the outcome."""
    rnd = random.Random(seed)
    found = {}
    lengths_checked = needle_lengths(pack, least, needles)
    for number, length in enumerate(lengths_checked, 1):
        progress(f"needle {number}/{len(lengths_checked)}: {length} tokens, alone")
        needle = generate.token_ids(rnd, length, vocab)
        alone, _ = send([needle], 0)
        counted, whole, differ = [], [], {}
        for name, lengths in packings(length, pack, least, rnd):
            prompts = [needle if n == -1 else generate.token_ids(rnd, n, vocab) for n in lengths]
            packed, batches = send(prompts, lengths.index(-1))
            if batches != [(len(prompts), sum(len(p) for p in prompts))]:
                # not one prefill batch: proves nothing either way
                progress(f"needle {number}: packed {name} ({len(prompts)} prompts): not one prefill batch, not counted")
                continue
            counted.append(name)
            same = graphs is None or graph_of(1, graphs) == graph_of(len(prompts), graphs)
            if same:
                whole.append(name)
                step = first_divergence(alone, packed)
            else:
                step = first_divergence(prefill_part(alone, length), prefill_part(packed, length))
            if step is not None:
                differ[name] = step
            scope = "" if same else (f" (its prefill: decoded in the {graph_of(len(prompts), graphs)}-slot graph, "
                                     f"alone in the {graph_of(1, graphs)})")
            progress(f"needle {number}: packed {name} ({len(prompts)} prompts){scope}: "
                     + ("identical" if step is None else f"differs at position {step}"))
        found[length] = {"counted": counted, "whole": whole, "differ": differ}
    return found


def failures(found: Mapping[int, dict]) -> list[str]:
    """What keeps a probe's result from verifying the pack (empty: verified)."""
    out = []
    for length, got in sorted(found.items()):
        if not got["counted"]:
            out.append(f"a {length}-token needle never ran packed in one prefill batch")
        elif not got["whole"]:
            out.append(f"a {length}-token needle never ran packed with its decode steps in the graph of it alone")
        for name, step in sorted(got["differ"].items()):
            out.append(f"a {length}-token needle packed {name} first differs from it alone at position {step}")
    return out


def model_heads(model_path: str) -> tuple[int, int]:
    """(attention heads, KV heads) from ``model_path``/config.json (a multimodal model's text config)."""
    config = json.loads((Path(model_path) / "config.json").read_text())
    config = config.get("text_config", config)
    heads = int(config["num_attention_heads"])
    return heads, int(config.get("num_key_value_heads") or heads)


def on_server(server, model_path: str, pack: int, out: Path, needles: int = 4, seed: int = 0,
              progress: Callable[[str], None] = harness.quiet) -> PackRecord:
    """Probe ``server`` (``launch.Server``: started with ``--corun`` and this pack candidate, running nothing
    else, so that the prefill batches its log shows are the probe's), write the record to ``out`` and return
    it; ``PackingError`` (no record written) when the pack does not verify."""
    from corun_sglang.records import environment

    vocab = model_vocab(model_path)
    found_environment = environment.environment_from_log(server.log_text())
    least = pack_candidate_from_log(server.log_text())["shortest"]
    found = probe(sender(server.url, server.log), pack, least, vocab, needles=needles, seed=seed, progress=progress,
                  graphs=decode_graphs(server.log_text()))
    problems = failures(found)
    if problems:
        raise PackingError(f"a pack of {pack} tokens does not verify here: " + "; ".join(problems))
    record = PackRecord(pack=pack, shortest=least, environment=found_environment,
                        needles={n: len(got["counted"]) for n, got in found.items()}, source=str(out))
    record.write(out)
    return record


def candidate_args(pack: int) -> list[str]:
    """The options that make a ``--corun`` server a prefill pack candidate."""
    return ["--corun-prefill-pack-candidate", str(pack)]


def verify(model_path: str, pack: int, out: Path, log: Path, server_args: Sequence[str] = (), needles: int = 4,
           seed: int = 0, static_gb: float | None = None,
           progress: Callable[[str], None] = harness.quiet) -> PackRecord:
    """Start a candidate server, probe it (``on_server``), stop it; returns the record written to ``out``.
    ``progress`` gets a line as the server starts and as the probe goes (``probe``)."""
    from corun_sglang.probes.launch import Server

    progress(f"starting the candidate server (pack {pack} tokens; log: {log})")
    server = Server(model_path, ["--corun", *candidate_args(pack), *server_args], log, static_gb=static_gb)
    progress(f"server ready at {server.url}")
    try:
        return on_server(server, model_path, pack, out, needles, seed, progress)
    finally:
        server.stop()


def render(record: PackRecord) -> str:
    needles = ", ".join(f"{n} tokens in {k} packings" for n, k in sorted(record.needles.items()))
    return (f"prefill pack verified: prompts of {record.shortest} to {record.pack} tokens run at {record.pack} "
            f"tokens, alone or packed, with the same bits (needles: {needles})")
