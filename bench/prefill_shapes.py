"""Does a prompt's prefill keep its bits when packed with co-runners into a prefill of a fixed token count?

For each arm (a server of bench/run.py's ARMS, radix cache off) and each of ``--needle-lens``, the
probe sends a needle prompt of that many tokens alone, then inside packings: one batched
``/generate`` call holding the needle and co-runner prompts whose lengths sum to a ``--totals``
value above the needle's length, the needle at the front, the middle or the back, the co-runners
of equal, random or one long length, drawn afresh for each packing, or (``--tiny-len``) as many
prompts of a few tokens as one prefill batch holds, which narrows the attention kernel's query tile
for every prompt of the batch, the needle's too. Every request asks for one new
token, greedy, with the logprob of every prompt position, so the needle's prefill shows bit for bit
in its prompt logprobs and its first token. A packing counts only when the server's log shows it
as one prefill batch of all its requests (``harness.batched``).

Per total, the result says how many distinct needle results the packings gave (1: the prefill of a
fixed token count is blind to how its tokens are split among requests and where the needle sits)
and whether they equal the needle alone; two results are the same when their logprobs are, bit for
bit, and their token (``compare.first_divergence``). Each packing's needle result is named by a
digest of its bits, so results also compare across totals. Rows append to ``--out`` (JSON lines),
one per arm and needle.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

from bench import common, run
from corun_sglang.core.compare import Generation, first_difference, first_divergence
from corun_sglang.probes import generate, harness

#: Requests per packing at most: well below the server's 256 running requests, so each packing can be
#: one prefill batch.
MAX_REQUESTS = 128
#: Requests of a ``tiny`` packing at most: below the server's 256 running requests.
TINY_REQUESTS = 240


def split(rnd: random.Random, total: int, kind: str, unit: int) -> list[int]:
    """Co-runner lengths summing to ``total``: ``equal`` parts of ``unit``, one ``long`` prompt, or ``random`` parts."""
    if total <= 0:
        return []
    if kind == "long":
        return [total]
    if kind == "equal":
        return [unit] * (total // unit) + ([total % unit] if total % unit else [])
    cuts = sorted(rnd.sample(range(1, total), min(total - 1, rnd.randint(1, 7))))
    return [b - a for a, b in zip([0, *cuts], [*cuts, total])]


def packings(needle_len: int, total: int, seed: int, tiny: int = 0) -> list[tuple[str, list[int]]]:
    """(name, lengths) for each packing of ``total`` tokens, the needle marked ``-1``; the name gives its place.

    At most ``MAX_REQUESTS`` requests each. A short needle's ``equal`` packings keep the batch's mean prompt
    length at the needle's, its ``long`` ones raise it to half the total: the attention kernel's query tile
    follows that mean. With ``tiny``, two ``tiny`` packings add co-runners of ``tiny`` tokens, as many as
    ``TINY_REQUESTS`` allows (the tokens left over make one more co-runner), which lowers the mean for a
    needle of any length; they draw no random numbers, so the other packings stay as they are without them."""
    rnd = random.Random(seed)
    out = []
    # equal co-runners are as long as the needle, or as short as MAX_REQUESTS allows
    unit = max(needle_len, -(-(total - needle_len) // (MAX_REQUESTS - 1)))
    for kind in ("equal", "long", "random", "random"):
        others = split(rnd, total - needle_len, kind, unit)
        for place in ("front", "back") if kind != "random" else (rnd.choice(("front", "middle", "back")),):
            at = {"front": 0, "back": len(others), "middle": len(others) // 2}[place]
            out.append((f"{kind}-{place}", [*others[:at], -1, *others[at:]]))
    if tiny > 0:
        count = min(TINY_REQUESTS - 2, (total - needle_len) // tiny)
        rest = total - needle_len - count * tiny
        others = [tiny] * count + ([rest] if rest else [])
        out += [("tiny-front", [-1, *others]), ("tiny-back", [*others, -1])]
    return out


def needle_result(meta: dict) -> dict:
    """The bits of a request's prefill: its prompt logprobs, first token and that token's logprob."""
    prompt = [lp for lp, *_ in meta["input_token_logprobs"]]
    token = meta["output_token_logprobs"][0]
    return {"prompt_logprobs": prompt, "token": token[1], "token_logprob": token[0]}


def digest(result: dict) -> str:
    """A short name for a result's bits (equal digests: equal logprobs, bit for bit, and token)."""
    return hashlib.sha256(json.dumps(result).encode()).hexdigest()[:12]


def _generation(result: dict) -> Generation:
    return Generation.of([result["token"]], [result["token_logprob"]], result["prompt_logprobs"])


def same(a: dict, b: dict) -> bool:
    """Whether two results are the same: their token, and their logprobs bit for bit."""
    return first_divergence(_generation(a), _generation(b)) is None


def probe(url: str, log: Path, needle: list[int], lengths: list[int],
          rnd: random.Random) -> tuple[dict, list, float]:
    """Send one batched request (``-1`` in ``lengths`` marks the needle); the needle's result, the
    prefill batches the server logged for it and the request's wall seconds (an upper bound on the
    prefill's time: it includes the HTTP round trip)."""
    prompts = [needle if n == -1 else generate.token_ids(rnd, n) for n in lengths]
    body = {"input_ids": prompts, "return_logprob": True, "logprob_start_len": 0,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
    got = harness.batched(url, log, body, 600)
    return needle_result(got.reply[lengths.index(-1)]["meta_info"]), got.batches, got.seconds


def study(url: str, log: Path, needle_len: int, totals: list[int], seed: int, tiny: int = 0) -> dict:
    """One needle alone, then in every packing of each total: the results as the module docstring gives them."""
    rnd = random.Random(seed)
    needle = generate.token_ids(rnd, needle_len)
    alone, alone_batches, alone_seconds = probe(url, log, needle, [-1], rnd)
    out = {"alone_batches": alone_batches, "alone_digest": digest(alone), "alone_seconds": alone_seconds,
           "totals": {}}
    for total in totals:
        distinct, rows = [], []
        for name, lengths in packings(needle_len, total, seed + total, tiny):
            got, batches, seconds = probe(url, log, needle, lengths, rnd)
            one_batch = batches == [(len(lengths), total)]
            rows.append({"packing": name, "requests": len(lengths), "batches": batches, "one_batch": one_batch,
                         "digest": digest(got), "equals_alone": same(got, alone), "seconds": seconds})
            if one_batch and not any(same(got, d) for d in distinct):
                distinct.append(got)
        counted = [r for r in rows if r["one_batch"]]
        out["totals"][str(total)] = {
            "packings": rows, "counted": len(counted), "distinct": len(distinct),
            "first_differing_position": _first_difference(distinct),
            "equal_to_alone": bool(counted) and all(r["equals_alone"] for r in counted),
        }
    return out


def _first_difference(distinct: list[dict]) -> int | None:
    """The first prompt position where two distinct results differ (None: one result, or only the token)."""
    if len(distinct) < 2:
        return None
    return first_difference(_generation(distinct[0]).prompt_logprobs, _generation(distinct[1]).prompt_logprobs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_options(parser, out="docs/results/bench/prefill_shapes.jsonl",
                       server_args="--attention-backend flashinfer --disable-radix-cache "
                                   "--max-running-requests 256 --chunked-prefill-size 8192")
    parser.add_argument("--arms", default="STD", help=f"of {', '.join(run.ARMS)}")
    parser.add_argument("--needle-lens", default="64", help="needle lengths, each probed on the same server")
    parser.add_argument("--totals", default="256,1024,2048",
                        help="prefill token counts the packings fill (for each needle, those above its length)")
    parser.add_argument("--seed", type=int, default=0, help="the first needle's seed; the next ones count up")
    parser.add_argument("--tiny-len", type=int, default=0,
                        help="add two packings of co-runners this many tokens long, as many as one batch holds")
    parser.add_argument("--static-gb", type=float, default=None, help="static GPU memory per server, GiB")
    parser.add_argument("--arm-args", action="append", default=[], metavar="ARM=ARGS",
                        help="extra server options for one arm (repeatable), as in bench/run.py")
    args = parser.parse_args(argv)

    from corun_sglang.probes.launch import Server

    arms = run.arms_of(parser, args.arms)
    extra = run.arm_args(args.arm_args, arms)
    totals = sorted(int(t) for t in args.totals.split(","))
    needles = [int(n) for n in args.needle_lens.split(",")]
    if any(n >= totals[-1] for n in needles):
        parser.error("every needle must be shorter than the largest total")
    ckpt = common.prepare(args)
    for arm in arms:
        log = Path(args.logs) / f"prefill-shapes-{args.shape}-{arm}.log"
        server = Server(str(ckpt), run.ARMS[arm] + extra[arm] + args.server_args.split(), log,
                        timeout=900, static_gb=args.static_gb)
        try:
            for i, needle_len in enumerate(needles):
                result = study(server.url, log, needle_len, [t for t in totals if t > needle_len], args.seed + i,
                               args.tiny_len)
                row = {"shape": args.shape, "arm": arm, "needle_len": needle_len, "seed": args.seed + i,
                       "tiny_len": args.tiny_len,
                       "gpu": common.gpu_uuid(), "server_command": server.command, **result}
                harness.append_rows(Path(args.out), [row])
                report(args.shape, arm, needle_len, result)
        finally:
            server.stop()
    return 0


def report(shape: str, arm: str, needle_len: int, result: dict) -> None:
    for total, t in result["totals"].items():
        print(f"{shape} {arm} needle {needle_len}, total {total}: {t['counted']}/{len(t['packings'])} packings "
              f"one batch, {t['distinct']} distinct needle results, equal to alone: {t['equal_to_alone']}",
              flush=True)
        for p in t["packings"]:
            print(f"    {p['packing']}: {p['requests']} requests, {p['batches']}, {p['digest']}", flush=True)
    names = {p["digest"] for t in result["totals"].values() for p in t["packings"] if p["one_batch"]}
    print(f"{shape} {arm} needle {needle_len}: {len(names)} distinct needle results over all totals "
          f"({len(names | {result['alone_digest']})} with the needle alone)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
