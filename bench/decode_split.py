"""Decode attention with a fixed KV split: a request's bits among co-runners, and what the split buys.

``--corun`` decodes on FlashInfer's tensor-core kernels without split-KV, so each request's attention runs
in one thread block per KV head however long its KV is; with few requests running most of the GPU idles
(profile-dense-steps on an H100: 1.45 ms of attention a step at 8 requests of 544 KV tokens, where FA3,
which splits the KV, takes 0.53). A fixed split size S cuts each request's KV into chunks of S tokens, a
function of the request alone, and merges the chunks in their order, so the split may keep a request's
bits whatever runs beside it. This measures that on one attention layer of a shape (seeded random KV in
a paged cache, page size 1, bf16), eagerly planned and run as SGLang's FlashInfer backend does:

- bits: for each split, needles of several KV lengths alone and among co-runner batches (7 to 255
  others, short ones that never split and mixed ones up to 4,096 tokens that do, the needle at a
  random position); FlashInfer's own split heuristic (``auto``, sized by the batch) is the negative
  control, no split (``off``, what ``--corun`` runs) the positive one;
- time: the layer's attention for B requests of L KV tokens each, per split, with the chunks the split
  makes and whether they fit a CUDA-graph plan of G slots (FlashInfer refuses a fixed-split plan whose
  chunks exceed the grid it sized for G: ``graph_grid``);
- on a GPU, then the same in CUDA graphs of the ``--graphs`` sizes (``bench.decode_split_graph``), each
  stage written to ``--out`` as it ends.

``--kernel fa3`` measures FA3's paged decode instead (SGLang's default attention on Hopper), whose split is a
count of KV splits per request (``Fa3Decode``); FA3 may size a request's splits by the batch, which is what
its bits tell.

    python -m bench.decode_split --shape qwen3-8b --out decode_split.json

Splits are given as ``off`` (0), ``auto`` (-1) or a size in tokens.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from typing import Callable, Sequence

import torch

from bench import common
from corun_sglang.tools import synthetic

OFF, AUTO = 0, -1

#: Attention over a paged KV cache: (q [B, Hq, D], k and v [pool, 1, Hkv, D], each request's pool slots,
#: split) -> out [B, Hq, D], or a tuple of per-request tensors (out and its log-sum-exp).
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Sequence[torch.Tensor], int],
                  torch.Tensor | tuple[torch.Tensor, ...]]


def _row(result, i: int) -> tuple[torch.Tensor, ...]:
    return tuple(r[i] for r in result) if isinstance(result, tuple) else (result[i],)


def parse_splits(text: str) -> list[int]:
    """``"off,auto,256"`` -> ``[0, -1, 256]``."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        out.append(OFF if part == "off" else AUTO if part == "auto" else int(part))
        if out[-1] < AUTO:
            raise ValueError(f"split '{part}': give off, auto or a size in tokens")
    return out


def parse_batches(text: str) -> list[tuple]:
    """``"short:7:16:64,mixed:63:16:4096"`` -> ``[("short", 7, 16, 64), ("mixed", 63, 16, 4096)]``."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, others, shortest, longest = part.split(":")
        out.append((name, int(others), int(shortest), int(longest)))
    return out


def split_name(split: int) -> str:
    return "off" if split == OFF else "auto" if split == AUTO else str(split)


def chunks(kv_len: int, split: int) -> int:
    """Thread-block chunks one request's KV takes under a fixed split (1 without one)."""
    return 1 if split <= 0 else max(1, math.ceil(kv_len / split))


def graph_grid(slots: int, group: int, sms: int, kv_heads: int, tile_q: int = 16) -> int:
    """The work tiles a FlashInfer CUDA-graph prefill-kernel plan of ``slots`` one-token requests holds
    (``PrefillSplitQOKVIndptr``: the larger of two blocks per SM per KV head and the query tiles the slots
    can take); a fixed-split plan whose chunks exceed it is refused."""
    return max(2 * sms // kv_heads, math.ceil(slots * group / tile_q) + slots - 1)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: Sequence[torch.Tensor],
              split: int) -> torch.Tensor:
    """Attention in float32 on any device, a request's KV in chunks merged in order: fixed chunks of
    ``split`` tokens, the whole KV for ``off``, and for ``auto`` chunks sized by the batch (as a split
    heuristic that fills the GPU would size them)."""
    group = q.shape[1] // k.shape[2]
    out = torch.empty_like(q)
    for i, s in enumerate(slots):
        kk = k[s, 0].float().repeat_interleave(group, dim=1)  # [L, Hq, D]
        vv = v[s, 0].float().repeat_interleave(group, dim=1)
        size = (len(s) if split == OFF else split if split > 0
                else max(1, math.ceil(len(s) * len(slots) / 64)))
        m = torch.full((q.shape[1],), -math.inf)
        lse_sum = torch.zeros(q.shape[1])
        acc = torch.zeros(q.shape[1], q.shape[2])
        for start in range(0, len(s), size):
            scores = torch.einsum("hd,lhd->hl", q[i].float(), kk[start:start + size]) / math.sqrt(q.shape[2])
            m_new = torch.maximum(m, scores.max(dim=1).values)
            scale = torch.exp(m - m_new)
            p = torch.exp(scores - m_new[:, None])
            acc = acc * scale[:, None] + torch.einsum("hl,lhd->hd", p, vv[start:start + size])
            lse_sum = lse_sum * scale + p.sum(dim=1)
            m = m_new
        out[i] = (acc / lse_sum[:, None]).to(q.dtype)
    return out


class Fa3Decode:
    """FA3's paged decode (``sgl_kernel.flash_attn.flash_attn_with_kvcache``, SGLang's default attention on
    Hopper), where a split is a count of KV splits per request rather than a size: ``off`` is one split
    (SGLang's batch-invariant mode), ``auto`` FA3's own heuristic (0), K > 0 asks for K."""

    def __init__(self, heads_q: int, heads_kv: int, head_dim: int, device: str):
        from sgl_kernel.flash_attn import flash_attn_with_kvcache

        self.attention, self.dims, self.device = flash_attn_with_kvcache, (heads_q, heads_kv, head_dim), device

    def plan(self, slots: Sequence[torch.Tensor], split: int) -> None:
        longest = max(len(s) for s in slots)
        self.table = torch.zeros((len(slots), longest), dtype=torch.int32, device=self.device)
        for i, s in enumerate(slots):
            self.table[i, :len(s)] = s.to(torch.int32)
        self.lens = torch.tensor([len(s) for s in slots], dtype=torch.int32, device=self.device)
        self.cu_q = torch.arange(len(slots) + 1, dtype=torch.int32, device=self.device)
        self.splits = 1 if split == OFF else 0 if split == AUTO else split

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, return_lse: bool = False):
        """As SGLang's FA3 backend decodes: q [B, Hq, D] with one query token per request (varlen)."""
        out, lse, *_ = self.attention(q=q, k_cache=k, v_cache=v, page_table=self.table, cache_seqlens=self.lens,
                                      cu_seqlens_q=self.cu_q, max_seqlen_q=1, softmax_scale=self.dims[2] ** -0.5,
                                      causal=True, return_softmax_lse=True, num_splits=self.splits)
        # a varlen call's log-sum-exp is [heads, tokens]
        lse = lse.transpose(0, 1) if lse.dim() == 2 else lse.reshape(len(q), -1)
        return (out, lse) if return_lse else out

    def __call__(self, q, k, v, slots, split):
        self.plan(slots, split)
        return self.run(q, k, v, return_lse=True)


class FlashInferDecode:
    """FlashInfer's batch decode on its tensor-core (prefill) kernels, as SGLang's FlashInfer backend plans
    it under ``--corun``; ``split`` becomes ``disable_split_kv`` (off), nothing (auto) or
    ``fixed_split_size``."""

    def __init__(self, heads_q: int, heads_kv: int, head_dim: int, device: str, workspace_mb: int = 2048):
        import flashinfer

        self.dims = (heads_q, heads_kv, head_dim)
        self.device = device
        self.workspace = torch.zeros(workspace_mb << 20, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD", use_tensor_cores=True)

    def plan(self, slots: Sequence[torch.Tensor], split: int) -> None:
        lengths = torch.tensor([0] + [len(s) for s in slots], dtype=torch.int32)
        indptr = torch.cumsum(lengths, 0, dtype=torch.int32).to(self.device)
        indices = torch.cat(list(slots)).to(torch.int32).to(self.device)
        last = torch.ones(len(slots), dtype=torch.int32, device=self.device)
        options = ({"disable_split_kv": True} if split == OFF else {} if split == AUTO
                   else {"fixed_split_size": split})
        self.wrapper.plan(indptr, indices, last, *self.dims, 1, q_data_type=torch.bfloat16,
                          kv_data_type=torch.bfloat16, **options)

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, return_lse: bool = False):
        return self.wrapper.run(q, (k, v), return_lse=return_lse)

    def __call__(self, q, k, v, slots, split):
        """The output and its float32 log-sum-exp, in which a moved sum shows even where the bf16 output
        rounds it away."""
        self.plan(slots, split)
        return self.run(q, k, v, return_lse=True)


def pool(tokens: int, heads_kv: int, head_dim: int, device: str, seed: int = 0,
         dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random KV pool of ``tokens`` one-token pages: (k, v), each [tokens, 1, Hkv, D]."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (tokens, 1, heads_kv, head_dim)
    return (torch.randn(shape, generator=gen, device=device, dtype=dtype),
            torch.randn(shape, generator=gen, device=device, dtype=dtype))


#: Co-runner batches for the bits: (name, others, shortest, longest KV tokens).
BATCHES = (("short", 7, 16, 64), ("mixed", 7, 16, 4096), ("short", 63, 16, 64), ("mixed", 63, 16, 4096),
           ("mixed", 255, 16, 4096))


def bits_capacity(needles: Sequence[int], batches: Sequence[tuple]) -> int:
    """The KV pool ``compare_bits`` needs: every needle's own slots, then the largest batch's co-runners."""
    return sum(needles) + max(b[1] for b in batches) * max([*needles, *(b[3] for b in batches)])


def compare_bits(attend: Attend, heads_q: int, heads_kv: int, head_dim: int, splits: Sequence[int],
                 needles: Sequence[int], batches: Sequence[tuple] = BATCHES, device: str = "cpu",
                 seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                 kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, dict]:
    """Per split: each needle's output among each co-runner batch against the needle alone, bit for bit
    (on ``kv``, a pool of at least ``bits_capacity`` tokens, where given;
    ``compared``, ``divergent``: any tensor ``attend`` returns differs, ``output_divergent``: the output
    itself, and the divergent cases). Every needle has its own KV slots and query
    row, the same in every batch; co-runners take other slots."""
    rnd = random.Random(seed)
    k, v = kv or pool(bits_capacity(needles, batches), heads_kv, head_dim, device, seed, dtype)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    queries = torch.randn((len(needles), heads_q, head_dim), generator=gen, device=device, dtype=dtype)
    own, start = [], 0
    for n in needles:
        own.append(torch.arange(start, start + n, device=device))
        start += n
    plans = []  # (needle, batch name, others, the batch's slots, the needle's place, co-runner queries)
    for i, _ in enumerate(needles):
        for name, others, shortest, top in batches:
            lengths = [rnd.randint(shortest, top) for _ in range(others)]
            slots, at = [], start
            for n in lengths:
                slots.append(torch.arange(at, at + n, device=device))
                at += n
            place = rnd.randint(0, others)
            slots.insert(place, own[i])
            q_others = torch.randn((others, heads_q, head_dim), generator=gen, device=device, dtype=dtype)
            plans.append((i, name, others, slots, place, q_others))
    out = {}
    for split in splits:
        try:
            alone = [_row(attend(queries[i:i + 1], k, v, [own[i]], split), 0) for i in range(len(needles))]
        except (RuntimeError, ValueError) as exc:
            out[split_name(split)] = {"compared": 0, "divergent": 0, "output_divergent": 0, "cases": [],
                                      "error": str(exc)[-500:]}
            continue
        cases = []
        for i, name, others, slots, place, q_others in plans:
            q = torch.cat([q_others[:place], queries[i:i + 1], q_others[place:]])
            try:
                got = _row(attend(q, k, v, slots, split), place)
            except (RuntimeError, ValueError) as exc:  # a plan the library refuses: counted, not compared
                cases.append({"needle_kv": needles[i], "batch": name, "others": others, "equal": True,
                              "output_equal": True, "error": str(exc)[-500:]})
                continue
            cases.append({"needle_kv": needles[i], "batch": name, "others": others,
                          "longest_other": max((len(s) for j, s in enumerate(slots) if j != place), default=0),
                          "equal": all(torch.equal(a, b) for a, b in zip(got, alone[i])),
                          "output_equal": bool(torch.equal(got[0], alone[i][0]))})
        done = [c for c in cases if "error" not in c]
        out[split_name(split)] = {"compared": len(done), "divergent": sum(not c["equal"] for c in done),
                                  "output_divergent": sum(not c["output_equal"] for c in done),
                                  "cases": [c for c in cases if not c["equal"] or "error" in c]}
    return out


def time_attend(decode, heads_q: int, heads_kv: int, head_dim: int, loads: Sequence[int], kv_lens: Sequence[int],
                splits: Sequence[int], device: str, iters: int = 20, trials: int = 5) -> list[dict]:
    """Milliseconds of one layer's decode attention for ``load`` requests of ``kv_len`` tokens, per split:
    the plan once, then ``iters`` runs between two CUDA events, the median of ``trials``."""
    rows = []
    cuda = device.startswith("cuda")
    k, v = pool(max(loads) * max(kv_lens), heads_kv, head_dim, device)
    gen = torch.Generator(device=device).manual_seed(2)
    for load in loads:
        q = torch.randn((load, heads_q, head_dim), generator=gen, device=device, dtype=torch.bfloat16)
        for kv_len in kv_lens:
            slots = [torch.arange(i * kv_len, (i + 1) * kv_len, device=device) for i in range(load)]
            for split in splits:
                row = {"load": load, "kv_len": kv_len, "split": split_name(split), "chunks": load * chunks(kv_len, split)}
                try:
                    decode.plan(slots, split)
                    for _ in range(iters):
                        decode.run(q, k, v)
                except (RuntimeError, ValueError) as exc:  # a plan the library refuses is a finding, not the end
                    rows.append({**row, "ms": None, "error": str(exc)[-500:]})
                    continue
                rows.append({**row, "ms": common.median_ms(lambda: decode.run(q, k, v), iters, trials, cuda)})
    return rows


class _Eager:
    """``reference`` behind ``plan``/``run`` (for ``time_attend`` off the GPU)."""

    def plan(self, slots, split):
        self.slots, self.split = slots, split

    def run(self, q, k, v):
        return reference(q, k, v, self.slots, self.split)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-8b", choices=sorted(synthetic.SHAPES))
    parser.add_argument("--kernel", choices=("flashinfer", "fa3"), default="flashinfer",
                        help="flashinfer: splits are sizes in tokens; fa3: counts of splits per request")
    parser.add_argument("--splits", default="off,auto,128,256,512,1024,2048")
    parser.add_argument("--needles", default="37,544,1500,4000", help="needle KV lengths for the bits")
    parser.add_argument("--batches", default=",".join(":".join(map(str, b)) for b in BATCHES),
                        help="co-runner batches for the bits: name:others:shortest:longest, comma-separated")
    parser.add_argument("--loads", default="8,64,256")
    parser.add_argument("--kv-lens", default="544,2048")
    parser.add_argument("--graphs", default="128,256", help="CUDA-graph sizes whose plan capacity is reported")
    parser.add_argument("--graph-splits", default="off,512,1024",
                        help="splits tried in CUDA graphs of the --graphs sizes (GPU only)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    c = synthetic.hf_config(args.shape)
    dims = (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
    group = dims[0] // dims[1]
    splits = parse_splits(args.splits)
    cuda = args.device.startswith("cuda")
    fa3 = args.kernel == "fa3"
    decode = (Fa3Decode if fa3 else FlashInferDecode)(*dims, args.device) if cuda else _Eager()
    attend = decode if cuda else reference
    needles, batches = [int(n) for n in args.needles.split(",")], parse_batches(args.batches)
    kv_lens = [int(n) for n in args.kv_lens.split(",")]
    bits = compare_bits(attend, *dims, splits, needles, batches, device=args.device)
    rows = time_attend(decode, *dims, [int(n) for n in args.loads.split(",")], kv_lens, splits, args.device,
                       **({} if cuda else {"iters": 1, "trials": 1}))
    sms = torch.cuda.get_device_properties(0).multi_processor_count if cuda else 0
    grids = {int(g): graph_grid(int(g), group, sms, dims[1]) for g in args.graphs.split(",")}
    for row in rows:
        if fa3:  # a count of splits: no chunk size, and FA3 sizes no grid to outgrow
            row.pop("chunks")
        else:
            row["fits"] = {g: row["chunks"] <= grid for g, grid in grids.items() if row["load"] <= g}
    result = {
        "shape": args.shape, "kernel": args.kernel, "heads": dims,
        "device": torch.cuda.get_device_name() if cuda else args.device,
        "sms": sms, "torch": torch.__version__, "flashinfer": _version("flashinfer"),
        "sglang-kernel": _version("sglang-kernel"),
        "graph_grid": grids, "bits": bits, "timing": rows, "command": " ".join([sys.executable, *sys.argv]),
    }
    summary = {"bits": {s: f"{b['divergent']} / {b['compared']} (output {b['output_divergent']})"
                        for s, b in bits.items()},
               "ms": {f"{r['load']}x{r['kv_len']} {r['split']}": r["ms"] and round(r["ms"], 4) for r in rows}}
    if cuda and not fa3:  # written first, so a graph stage that takes the process down leaves the eager results
        common.save(result, args.out)
        from bench.decode_split_graph import graph_summary, graphs

        result["graph"], result["graph_timing"] = graphs(dims, sorted(grids), parse_splits(args.graph_splits),
                                                         needles, batches, kv_lens, args.device, args.out, result)
        summary["graph"] = graph_summary(result["graph"])
        summary["graph ms"] = {f"{r['slots']}: {r['load']}x{r['kv_len']} {r['split']}": r["ms"] and round(r["ms"], 4)
                               for r in result["graph_timing"]}
    return common.finish(result, summary, args.out)


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(f"{name}-python" if name == "flashinfer" else name)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
