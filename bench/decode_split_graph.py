"""Decode attention with a fixed KV split inside CUDA graphs: what a ``--corun`` decode graph would need.

``bench.decode_split`` measures the split eagerly; a ``--corun`` server decodes only in captured graphs,
where FlashInfer 0.6.15 stands in the way twice. A fixed-split plan whose chunks exceed the grid it sizes
for the graph (two blocks per SM per KV head, or the slots' query tiles: ``decode_split.graph_grid``) is
refused, so ``GraphDecode`` asks for a larger grid through the plan's ``num_colocated_ctas``. And a plan
splits only where a request's KV exceeds the split, so a batch of short requests replays a graph captured
with the merge stage on another plan's merge arrays; ``merge_fix`` says what to write then. ``graph_trial``
checks both on the GPU, against the needle alone eagerly and alone in the graph, with the unfixed graph as
the control; ``time_graph`` times a replay.
"""

from __future__ import annotations

from typing import Sequence

import torch

from bench import common
from bench.decode_split import (AUTO, OFF, FlashInferDecode, bits_capacity, chunks, compare_bits, pool,
                                split_name)


def merge_fix(captured: Sequence[int], replayed: Sequence[int], rows: int) -> dict[str, tuple[int, str, list[int]]]:
    """What a CUDA graph captured with split-KV needs written after a replay plan that did not split.

    A fixed-split plan splits only where a request's KV exceeds the split size, so a batch of short
    requests plans without the merge stage's arrays (``merge_indptr``, ``block_valid_mask``), while the
    graph still runs the merge kernel on whatever the capture's plan left there. Each row then holds one
    chunk: ``merge_indptr`` is 0..rows and the first ``rows`` blocks are valid. Returns {array: (byte
    offset into the int workspace, dtype: IdType int32 or C++ bool, values)}, empty where the replay plan
    split itself (nothing to write) or the graph was captured without split-KV; ``ValueError`` where the
    two plans' shared arrays do not sit at the same offsets (the graph would read another plan's layout)."""
    from corun_sglang.core.decode_grid import PLAN_FIELDS

    cap, rep = dict(zip(PLAN_FIELDS, captured)), dict(zip(PLAN_FIELDS, replayed))
    if not cap["split_kv"] or rep["split_kv"]:
        return {}
    shared = ("padded_batch_size", "request_indices_offset", "qo_tile_indices_offset", "kv_tile_indices_offset",
              "o_indptr_offset", "kv_chunk_size_ptr_offset")
    moved = [f for f in shared if cap[f] != rep[f]]
    if moved:
        raise ValueError(f"the replay plan moved {moved} from where the captured graph reads them")
    padded = int(cap["padded_batch_size"])
    return {"merge_indptr": (int(cap["merge_indptr_offset"]), "int32", list(range(rows + 1))),
            "block_valid_mask": (int(cap["block_valid_mask_offset"]), "bool", [1] * rows + [0] * (padded - rows))}


class GraphDecode:
    """``FlashInferDecode`` in a CUDA graph of ``slots`` rows, as a ``--corun`` decode graph would run it:
    batches padded with one-token rows after the real ones, the plan's grid sized for ``grid`` blocks per
    KV head (FlashInfer sizes it for two blocks per SM per KV head; a fixed split that makes more chunks
    than that is refused, so a larger grid is asked for through the plan's ``num_colocated_ctas``, which
    it subtracts from the blocks it may use), captured with split-KV where ``split`` > 0 (its first row
    one token longer than the split), and with ``fix`` the merge arrays written after a replay plan that
    did not split (``merge_fix``). ``split`` off: the plan without split-KV, its surplus blocks pointed at
    a padding row, as ``--corun`` points them at the batch's cheapest request."""

    def __init__(self, heads_q: int, heads_kv: int, head_dim: int, slots: int, max_tokens: int, split: int,
                 device: str, grid: int | None = None, fix: bool = True, workspace_mb: int = 2048):
        import flashinfer

        self.dims, self.slots, self.split, self.device, self.fix = (heads_q, heads_kv, head_dim), slots, split, device, fix
        self.colocated = 0
        if grid is not None:
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            self.colocated = 2 * sms - grid * heads_kv  # negative: more blocks than FlashInfer would take
        self.workspace = torch.zeros(workspace_mb << 20, dtype=torch.uint8, device=device)
        self.indptr = torch.zeros(slots + 1, dtype=torch.int32, device=device)
        # a batch's tokens, its one-token padding rows, and the capture's row one token past the split
        self.indices = torch.zeros(max_tokens + slots + max(split, 0) + 1, dtype=torch.int32, device=device)
        self.last = torch.ones(slots, dtype=torch.int32, device=device)
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True, paged_kv_indptr_buffer=self.indptr,
            paged_kv_indices_buffer=self.indices, paged_kv_last_page_len_buffer=self.last)
        self.wrapper._pin_memory_int_workspace_buffer.zero_()
        self.q = torch.zeros((slots, heads_q, head_dim), dtype=torch.bfloat16, device=device)
        self.out = torch.empty_like(self.q)
        self.lse = torch.empty((slots, heads_q), dtype=torch.float32, device=device)
        self.graph = None
        self.captured: list[int] = []
        self.fixes = 0

    def _plan(self, slots: Sequence[torch.Tensor]) -> list[int]:
        import flashinfer.decode as fd

        padded = list(slots) + [torch.zeros(1, dtype=torch.int64, device=self.device)] * (self.slots - len(slots))
        lengths = torch.tensor([0] + [len(s) for s in padded], dtype=torch.int32)
        indptr = torch.cumsum(lengths, 0, dtype=torch.int32).to(self.device)
        indices = torch.cat(padded).to(torch.int32).to(self.device)
        options = ({"disable_split_kv": True} if self.split == OFF else {} if self.split == AUTO
                   else {"fixed_split_size": self.split})
        original = fd.get_batch_prefill_module
        colocated = self.colocated

        class Module:  # the plan's last argument is num_colocated_ctas
            def __init__(self, module):
                self._module = module

            def plan(self, *args):
                return self._module.plan(*args[:-1], colocated)

            def __getattr__(self, name):
                return getattr(self._module, name)

        fd.get_batch_prefill_module = lambda *a, **k: Module(original(*a, **k))
        try:
            for _ in range(2):  # the second plan's copy carries the surplus pointed at a padding row
                self.wrapper.plan(indptr, indices, self.last, *self.dims, 1, q_data_type=torch.bfloat16,
                                  kv_data_type=torch.bfloat16, **options)
                if self.split != OFF or len(slots) >= self.slots:
                    break
                from corun_sglang.core import decode_grid
                decode_grid.fill(self.wrapper._pin_memory_int_workspace_buffer, list(self.wrapper._plan_info),
                                 self.slots, self.dims[0] // self.dims[1], self.slots - 1)
        finally:
            fd.get_batch_prefill_module = original
        return [int(v) for v in self.wrapper._plan_info]

    def capture(self, k: torch.Tensor, v: torch.Tensor) -> None:
        first = torch.zeros(max(1, self.split + 1), dtype=torch.int64, device=self.device)
        self.captured = self._plan([first])
        for _ in range(2):
            self.wrapper.run(self.q, (k, v), out=self.out, lse=self.lse, return_lse=True)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.wrapper.run(self.q, (k, v), out=self.out, lse=self.lse, return_lse=True)

    def plan(self, slots, split=None) -> None:
        replayed = self._plan(slots)
        fixes = merge_fix(self.captured, replayed, self.slots) if self.fix and self.captured else {}
        for offset, dtype, values in fixes.values():
            data = torch.tensor(values, dtype=getattr(torch, dtype), device=self.device).view(torch.uint8)
            self.wrapper._int_workspace_buffer[offset:offset + data.numel()].copy_(data)
            self.fixes += 1

    def run(self, q: torch.Tensor, k=None, v=None, return_lse: bool = False):
        self.q[:len(q)].copy_(q)
        self.q[len(q):].zero_()
        self.graph.replay()
        rows = (self.out[:len(q)].clone(), self.lse[:len(q)].clone())
        return rows if return_lse else rows[0]

    def __call__(self, q, k, v, slots, split=None):
        self.plan(slots)
        return self.run(q, return_lse=True)


def graph_trial(heads_q: int, heads_kv: int, head_dim: int, slots: int, split: int, grid: int | None,
                needles: Sequence[int], batches: Sequence[tuple], device: str) -> dict:
    """One split in a CUDA graph of ``slots`` rows: each needle among ``batches`` in the graph against the
    needle alone eagerly with the same split (``FlashInferDecode``), with the merge arrays fixed
    (``merge_fix``; also against the needle alone in the graph, ``fixed_graph_alone``, which tells a
    difference between the graph's merge of one chunk and the eager plan's direct write from one the
    co-runners make) and, for a split, without (``unfixed``, the control: a batch of short requests
    then merges with the captured plan's arrays); and a full batch of ``slots`` requests long enough
    that the split's chunks exceed FlashInfer's own grid."""
    eager = FlashInferDecode(heads_q, heads_kv, head_dim, device)
    fitted = [b for b in batches if b[1] < slots]
    result = {"slots": slots, "split": split_name(split), "grid": grid}
    capacity = bits_capacity(needles, fitted)
    k, v = pool(capacity, heads_kv, head_dim, device)
    for fix in ((True, False) if split > 0 else (True,)):
        decode = GraphDecode(heads_q, heads_kv, head_dim, slots, capacity, split, device, grid=grid, fix=fix)
        decode.capture(k, v)  # the graph reads this pool: compare_bits runs on it

        for alone in (("eager", "graph") if fix else ("eager",)):
            def attend(q, k, v, slots_, split_, decode=decode, alone=alone):
                if len(slots_) == 1 and alone == "eager":  # the reference: the needle alone, eagerly
                    return eager(q, k, v, slots_, split_)
                return decode(q, k, v, slots_)

            bits = compare_bits(attend, heads_q, heads_kv, head_dim, [split], needles, fitted, device=device,
                                kv=(k, v))
            name = ("fixed" if fix else "unfixed") + ("" if alone == "eager" else "_graph_alone")
            result[name] = {**bits[split_name(split)], "merge_fixes": decode.fixes}
    if split > 0:
        full = [torch.arange(i * 4 * split, (i + 1) * 4 * split, device=device) for i in range(slots)]
        result["full_4x_split"] = {}
        for name, asked in (("FlashInfer's grid", None), (f"grid {grid}", grid)):
            try:
                GraphDecode(heads_q, heads_kv, head_dim, slots, 4 * split * slots, split, device, grid=asked).plan(full)
                result["full_4x_split"][name] = "planned"
            except (RuntimeError, ValueError) as exc:
                result["full_4x_split"][name] = f"refused: {str(exc)[-300:]}"
    return result


def grid_for(slots: int, split: int, needles: Sequence[int], batches: Sequence[tuple]) -> int:
    """Blocks per KV head that every batch ``graph_trial`` plans fits: each row's chunks at the longest KV,
    and a full graph of rows four splits long."""
    longest = max([*needles, *(b[3] for b in batches)])
    return slots * max(chunks(longest, split), 4)


def time_graph(heads_q: int, heads_kv: int, head_dim: int, slots: int, load: int, kv_len: int, split: int,
               device: str, grid: int | None = None, iters: int = 50, trials: int = 5) -> float:
    """Milliseconds of one replay of a ``slots``-row decode graph holding ``load`` requests of ``kv_len``
    tokens (the rest one-token padding), the median of ``trials`` over ``iters`` replays."""
    decode = GraphDecode(heads_q, heads_kv, head_dim, slots, load * kv_len + slots, split, device, grid=grid)
    k, v = pool(load * kv_len + 1, heads_kv, head_dim, device)
    decode.capture(k, v)
    decode.plan([torch.arange(1 + i * kv_len, 1 + (i + 1) * kv_len, device=device) for i in range(load)])
    for _ in range(iters):
        decode.graph.replay()
    return common.median_ms(decode.graph.replay, iters, trials)


def graph_summary(trials: Sequence[dict]) -> dict[str, dict]:
    """Per graph size and split: "divergent / compared" for each comparison ``graph_trial`` made, what the
    full graph's plan did, and the error where the trial failed."""
    out = {}
    for g in trials:
        line = {k: f"{g[k]['divergent']} / {g[k]['compared']}" for k in ("fixed", "fixed_graph_alone", "unfixed")
                if isinstance(g.get(k), dict)}
        line.update({k: g[k] for k in ("full_4x_split", "error") if k in g})
        out[f"{g['slots']} {g['split']}"] = line
    return out


def graphs(dims: tuple, sizes: Sequence[int], splits: Sequence[int], needles: Sequence[int],
           batches: Sequence[tuple], kv_lens: Sequence[int], device: str, out: str | None,
           result: dict) -> tuple[list[dict], list[dict]]:
    """The CUDA-graph stage: ``graph_trial`` per graph size and split, then ``time_graph`` for 8 requests and a
    full graph at each KV length; each result written to ``out`` as it comes."""
    trials, times = [], []
    result["graph"], result["graph_timing"] = trials, times
    for slots in sizes:
        for split in splits:
            try:
                trials.append(graph_trial(*dims, slots, split, grid_for(slots, split, needles, batches)
                                          if split > 0 else None, needles, batches, device))
            except Exception as exc:  # a finding to record; the other sizes and splits still run
                trials.append({"slots": slots, "split": split_name(split), "error": str(exc)[-500:]})
            common.save(result, out)
    for slots in sizes:
        for load in sorted({min(8, slots), slots}):
            for kv_len in kv_lens:
                for split in splits:
                    row = {"slots": slots, "load": load, "kv_len": kv_len, "split": split_name(split)}
                    try:
                        row["ms"] = time_graph(*dims, slots, load, kv_len, split, device,
                                               grid=grid_for(slots, split, [kv_len], []) if split > 0 else None)
                    except Exception as exc:
                        row.update(ms=None, error=str(exc)[-500:])
                    times.append(row)
            common.save(result, out)
    return trials, times
