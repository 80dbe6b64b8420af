"""Replay ``--corun``'s admission on a workload's lengths: how many prefills it runs, and of which kind.

No GPU and no server: a closed-loop client keeps ``--concurrency`` requests outstanding, and each
scheduler pass either runs one prefill, admitted as a ``--corun`` server admits it (in queue order up to
the first refusal: ``packing.next_prefill``, the policy ``packing.waits`` applies), or one decode
step in which every running request emits a token. With ``--wait W``, a prefill ``packing.waits``
flags is skipped for up to W passes, as ``--corun-prefill-pack-wait W`` does. Passes have no duration
here: the output counts prefills by kind, the padding tokens the packs run beyond their prompts
(``packing.replay_tokens``), and decode steps, which a server's log prices.

    python -m bench.admission --workloads sharegpt,azure-conv --pool 104000 --wait 0,32
    python -m bench.admission --workloads sharegpt --pool 104000 --shortest 1 --pack 512,1024,2048 --concurrency 16
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys

from bench import workloads
from corun_sglang.core import packing, policy

#: Prefill kinds: a prompt that runs alone (shorter than the shortest packable prompt, or longer than the
#: pack), a pack that holds one prompt, a pack of two or more.
KINDS = ("alone: short", "alone: long", "pack of 1", "pack of 2+")


@dataclasses.dataclass
class Replay:
    prefills: dict[str, int]
    padding: int  # tokens the prefills run beyond their prompts' (a pack's, up to its size)
    decode_steps: int
    mean_running: float  # requests running per decode step


def replay(pairs: list[tuple[int, int]], pool: int, pack: int, least: int, max_running: int = 256,
           concurrency: int = 256, wait: int = 0) -> Replay:
    """Replay admission for ``(prompt_len, output_len)`` pairs; the prefill gives each its first token."""
    reserved = [policy.reserved_tokens(p, o, 1) for p, o in pairs]
    if max(reserved) > pool:
        raise ValueError(f"a request reserves {max(reserved)} tokens, more than the pool of {pool}")
    sent, outstanding, waited, steps, running_sum, padding = 0, 0, 0, 0, 0, 0
    waiting: list[int] = []
    running: dict[int, int] = {}  # request -> tokens left to decode
    kinds: collections.Counter = collections.Counter()
    while sent < len(pairs) or waiting or running:
        while outstanding < concurrency and sent < len(pairs):
            waiting.append(sent)
            sent, outstanding = sent + 1, outstanding + 1
        held = [reserved[i] for i in running]
        queue = [(pairs[i][0], 0, reserved[i]) for i in waiting]
        if wait and waited < wait and running and packing.waits(queue, held, pool, max_running, pack, least):
            waited += 1
        else:
            waited = 0
            batch, _ = packing.next_prefill(queue, held, pool, max_running, pack, least)
            if batch:
                first = pairs[waiting[0]][0]
                kind = ("alone: short" if first < least else "alone: long" if first > pack
                        else "pack of 1" if batch == 1 else "pack of 2+")
                kinds[kind] += 1
                tokens = sum(pairs[i][0] for i in waiting[:batch])
                padding += packing.replay_tokens(tokens, pack, least) - tokens
                for i in waiting[:batch]:
                    running[i] = pairs[i][1] - 1
                del waiting[:batch]
                continue
        steps += 1
        running_sum += len(running)
        for i in list(running):
            running[i] -= 1
            if running[i] <= 0:
                del running[i]
                outstanding -= 1
    return Replay({k: kinds[k] for k in KINDS}, padding, steps, running_sum / max(1, steps))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="sharegpt")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--pool", type=int, required=True, help="KV pool tokens (a server log's max_total_num_tokens)")
    parser.add_argument("--pack", default="1024", help="comma-separated pack sizes")
    parser.add_argument("--shortest", type=int, default=17,
                        help="the shortest packable prompt (packing.shortest: 17 for Qwen3-8B on FA2, 1 on FA3)")
    parser.add_argument("--wait", default="0", help="comma-separated --corun-prefill-pack-wait values")
    args = parser.parse_args(argv)
    print(f"| workload | pack | wait | prefills | {' | '.join(KINDS)} | padding tokens | decode steps | mean running |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in KINDS) + " | ---: | ---: | ---: |")
    for name in args.workloads.split(","):
        pairs = workloads.lengths(name, args.requests)
        for pack in (int(p) for p in args.pack.split(",")):
            for wait in (int(w) for w in args.wait.split(",")):
                r = replay(pairs, args.pool, pack, args.shortest, args.max_running_requests, args.concurrency, wait)
                print(f"| {name} | {pack} | {wait} | {sum(r.prefills.values())} | "
                      + " | ".join(str(r.prefills[k]) for k in KINDS)
                      + f" | {r.padding:,} | {r.decode_steps} | {r.mean_running:.1f} |")
                print(json.dumps({"workload": name, "pack": pack, "wait": wait, **dataclasses.asdict(r)}),
                      file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
