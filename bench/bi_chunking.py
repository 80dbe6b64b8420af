"""Which prompts SGLang's batch-invariant mode splits across prefill chunks, replayed with SGLang's own
``PrefillAdder`` on the CPU.

With ``--enable-deterministic-inference`` on FlashInfer, SGLang turns its radix cache off and aligns every
chunked-prefill cut to ``SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE`` (4,096 tokens): a prompt that does not fit
what is left of a pass waits whole for the next one rather than being cut where its batchmates happen to end,
since FlashInfer's prefill over a cached prefix adds up in another order than over the whole prompt.
``PrefillAdder.add_one_req`` applies that alignment, but a request with ``ignore_eos`` on a server without a
radix cache goes through ``add_one_req_ignore_eos``, which cuts at whatever is left of the pass's
``--chunked-prefill-size`` and ignores the alignment (SGLang 0.5.17). Such a prompt is then split at a point
set by its co-runners, and its first token and prompt logprobs follow them.

For prompt lengths in queue order (by default scenario a of a committed suite run: 32 prompts sent together),
each scheduler pass gets a fresh ``PrefillAdder`` with SGLang's arguments for this case (chunk 2,048, the
alignment, no radix cache); the request a pass cut goes first in the next pass with what is left of it, as
SGLang's scheduler puts it first. The replay runs twice:

- ``ignore_eos``: the suite's requests, through the path that ignores the alignment;
- ``stop_at_eos``: the same lengths without ``ignore_eos``, through ``add_one_req`` (the control: no prompt
  shorter than the alignment may be split).

    python -m bench.bi_chunking --suite docs/results/suite/smollm2-bi-nocal --out bi_chunking.json

With ``--suite``, the output puts the replay's split prompts beside the prompts the arm's together run
diverged on. The replay knows nothing of arrival times: ``--from K`` starts it where the log shows the
queue full (the suite's first passes take the requests that have arrived so far).

Invariants: every pass is SGLang's own ``PrefillAdder`` admitting SGLang ``Req`` objects; the replay is a pure
function of the lengths, the chunk size, the alignment and the path.
"""

from __future__ import annotations

import argparse
import json
from array import array
from pathlib import Path

#: SGLang 0.5.17's defaults for this case: the suite's chunked-prefill size and FlashInfer's prefill split tile.
CHUNK, ALIGN = 2048, 4096


_TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
         "num_attention_heads": 9, "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 49152,
         "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "torch_dtype": "bfloat16",
         "tie_word_embeddings": True, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}


def publish_server_args(chunk: int) -> None:
    """Publishes the server args a scheduler of this case reads (SmolLM2's shape, SGLang's batch-invariant
    mode on FlashInfer), as SGLang's scheduler process does at start. Resolution reads only the config and
    the options, on a host without CUDA too (the prefill graph backend is set to CUDA's)."""
    import tempfile

    from sglang.srt.model_executor import cuda_graph_config
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    cuda_graph_config.default_prefill_backend = lambda: cuda_graph_config.Backend.BREAKABLE
    folder = Path(tempfile.mkdtemp(prefix="bi-chunking-"))
    (folder / "config.json").write_text(json.dumps(_TINY))
    publish(ServerArgs(model_path=str(folder), device="cuda", enable_deterministic_inference=True,
                       attention_backend="flashinfer", chunked_prefill_size=chunk, skip_tokenizer_init=True),
            role="scheduler")


def _cache(pool_tokens: int):
    import torch
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    alloc = TokenToKVPoolAllocator(pool_tokens, torch.bfloat16, "cpu", None, False)
    r2t = ReqToTokenPool(size=256, max_context_len=32768, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(disable=True, req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=1)
    return alloc, ChunkCache(params)


def one_pass(queue: list[tuple[str, int]], chunk: int, align: int | None, ignore_eos: bool,
             max_new: int = 16) -> list[tuple[str, int]]:
    """What one prefill pass admits of ``queue`` ((name, prompt tokens), in order): (name, tokens it prefills
    now), a prompt cut short last."""
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
    from sglang.srt.sampling.sampling_params import SamplingParams

    alloc, cache = _cache(1 << 20)
    adder = PrefillAdder(1, cache, alloc, ScheduleBatch(reqs=[], device="cpu"), 1.0, 16384, chunk,
                         max_running_requests=4096)
    taken = []
    for name, length in queue:
        params = SamplingParams(max_new_tokens=max_new, ignore_eos=ignore_eos)
        params.normalize(None)
        req = Req(name, "", array("q", range(length)), params, vocab_size=49152)
        req.init_next_round_input(cache)
        result = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=align)
        if req in adder.can_run_list:
            taken.append((name, req.extend_range.length))
        if result != AddReqResult.CONTINUE or adder.new_chunked_req is not None:
            break
    return taken


def replay(queue: list[tuple[str, int]], chunk: int = CHUNK, align: int | None = ALIGN,
           ignore_eos: bool = True) -> dict:
    """Every pass until ``queue`` is prefilled, and the prompts split across passes."""
    publish_server_args(chunk)
    left = list(queue)
    passes, split = [], []
    while left:
        taken = one_pass(left, chunk, align, ignore_eos)
        if not taken:
            raise RuntimeError(f"a pass admitted nothing of {left[:3]}")
        passes.append(taken)
        name, tokens = taken[-1]
        length = dict(left)[name]
        left = left[len(taken):]
        if tokens < length:  # cut: what is left of it goes first in the next pass
            split.append(name)
            left.insert(0, (name, length - tokens))
    return {"passes": [{"seqs": len(p), "tokens": sum(t for _, t in p)} for p in passes],
            "split": sorted(set(split), key=split.index)}


def suite_queue(folder: Path, scenario: str = "a", arm: str = "deterministic") -> tuple[list, dict]:
    """The scenario's prompts (name, tokens) in the order the suite sends them, and the prompts its together
    run diverged on, by run."""
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines() if line]
    rows = [r for r in rows if r["arm"] == arm and r["scenario"] == scenario]
    queue = [(r["key"], r["prompt_tokens"]) for r in rows if r["run"] == "alone" and r["role"] == "reference"]
    queue.sort(key=lambda kv: int(kv[0].lstrip("p")))
    diverged: dict[str, list[str]] = {}
    for r in rows:
        if r["role"] == "compared" and r.get("first_divergence") is not None:
            diverged.setdefault(r["run"], []).append(r["key"])
    return queue, diverged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=Path("docs/results/suite/smollm2-bi-nocal"))
    ap.add_argument("--scenario", default="a")
    ap.add_argument("--from", dest="start", type=int, default=6,
                    help="the queue's first request once it is full (scenario a: the log's first two passes "
                         "took p0, then p1-p5, while the rest arrived)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    queue, diverged = suite_queue(args.suite, args.scenario)
    queue = queue[args.start:]
    result = {"suite": str(args.suite), "scenario": args.scenario, "from": args.start,
              "chunk": CHUNK, "align": ALIGN, "diverged": diverged,
              "ignore_eos": replay(queue, ignore_eos=True), "stop_at_eos": replay(queue, ignore_eos=False)}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("diverged",)} | {
        k: result[k]["split"] for k in ("ignore_eos", "stop_at_eos")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
