"""Packed prefill adapters (``--corun-prefill-pack``): a packable prefill runs at the pack's shape.

Invariants, with a prefill pack:
- the prefill graph runner's smallest graph is the pack's;
- a prefill of the shortest packable prompt's length up to the pack replays the pack's graph
  (``packing.replay_tokens``) and never runs eagerly at its own size;
- every FlashInfer prefill plan runs without split-KV; a pack resting on FA3's fixed query tile stops the
  server at a plan on another kernel (``kernel_probe.planned``);
- a prefill's LM head runs on ``packing.head_rows`` rows.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from corun_sglang.core import packing
from corun_sglang.serving import kernel_probe
from corun_sglang.serving.adapters import state, tp
from corun_sglang.core.stops import CorunContractError


def prefill_graph_runner_init(result, self, model_runner, *args, **kwargs):
    """After the prefill CUDA-graph runner is built: with a prefill pack, its smallest graph is the pack's."""
    cfg = state.config()
    pack = None if cfg is None else cfg.prefill_pack
    if pack is not None and (not self.capture_num_tokens or self.capture_num_tokens[0] != pack):
        raise CorunContractError(
            f"prefill CUDA graphs resolved to token counts {list(self.capture_num_tokens)[:8]}...; a prefill "
            f"pack of {pack} tokens needs {pack} as the smallest. Fix: drop --corun-prefill-pack, or raise "
            "--chunked-prefill-size to at least the pack"
        )
    return result


def _packing() -> tuple[int, int] | None:
    """This server's prefill pack and shortest packable prompt, or None (isolated prefill, or no ``--corun``)."""
    cfg = state.config()
    return None if cfg is None else cfg.packing


def prefill_replay(original, self, *args, **kwargs):
    """A prefill of the shortest packable prompt's length up to the pack replays the pack's graph, however
    far below it lies (SGLang pads at most twofold otherwise)."""
    pack = _packing()
    if pack is not None and kwargs.get("num_tokens") is not None:
        kwargs["num_tokens"] = packing.replay_tokens(kwargs["num_tokens"], *pack)
    return original(self, *args, **kwargs)


def eager_prefill(original, self, forward_batch, *args, **kwargs):
    """A prefill of fresh prompts that should replay the pack's graph never runs eagerly at its own size."""
    pack = _packing()
    if pack is not None:
        tokens = len(forward_batch.input_ids)
        prefixes = forward_batch.extend_prefix_lens_cpu or []
        if packing.at_pack(tokens, *pack) and not any(prefixes):
            raise CorunContractError(
                f"a prefill of {forward_batch.batch_size} fresh prompts, {tokens} tokens, was about to run "
                f"eagerly instead of replaying the {pack[0]}-token prefill graph"
            )
    return original(self, forward_batch, *args, **kwargs)


@contextlib.contextmanager
def _without_split_kv(wrappers):
    """Within the block, each FlashInfer prefill wrapper of ``wrappers`` plans with ``disable_split_kv=True``;
    after it, each has its own ``begin_forward`` back, however the block ends.

    SGLang's ``call_begin_forward`` takes no argument that reaches the plan's ``disable_split_kv``, so the
    wrapper's ``begin_forward`` (the class's plan, or an instance's own, such as SGLang's
    ``fast_prefill_plan`` partial, which the partial below flattens so SGLang still recognizes it) is bound
    to it on the instance for the duration of the call.
    """
    own = [w.__dict__.get("begin_forward") for w in wrappers]  # an instance's own plan function, if any
    for w in wrappers:
        w.begin_forward = functools.partial(w.begin_forward, disable_split_kv=True)
    try:
        yield
    finally:
        for w, fn in zip(wrappers, own):
            if fn is None:
                del w.begin_forward
            else:
                w.begin_forward = fn


def prefill_plan(original, self, *args, **kwargs):
    """With a prefill pack or ``--corun-tp-invariant``, every FlashInfer prefill plan runs without split-KV: a
    plan's KV split then follows no other request of its batch, and no count of heads a rank holds. A pack whose shortest prompt rests on FA3's fixed query tile
    (``packing.shortest``) stops the server at a prefill planned on another kernel, whose tile could
    follow the batch."""
    cfg = state.config()
    if cfg is None or (cfg.packing is None and cfg.tp_invariant is None):
        return original(self, *args, **kwargs)
    bound = state.bind(original, self, *args, **kwargs)
    wrappers = [w for w in (bound.arguments.get("wrapper_ragged"), bound.arguments.get("wrapper_paged"))
                if w is not None]
    with _without_split_kv(wrappers):
        result = original(self, *args, **kwargs)
    if cfg.prefill_pack_kernel == packing.FA3:
        kernel = kernel_probe.planned(bool(bound.arguments.get("use_ragged")),
                                      getattr(bound.arguments.get("wrapper_ragged"), "_backend", None))
        if kernel != packing.FA3:
            raise CorunContractError(
                f"a prefill was planned on FlashInfer's {kernel} kernel, but the prefill pack packs prompts "
                f"from {cfg.prefill_pack_shortest} tokens, which only FA3's fixed query tile allows. Fix: set "
                "SGLANG_FLASHINFER_USE_PAGED=1 for the server and `corun-sglang verify-prefill-pack`, which then "
                "packs prompts only from the length that keeps FA2's query tile"
            )
    return result


def lm_head_rows(original, self, hidden_states, *args, **kwargs):
    """With a prefill pack, the LM head outside a CUDA graph (a prefill's logits) runs on ``packing.head_rows``
    rows, the states padded with zeros; the logits of the real rows are returned. Every head GEMM goes
    through ``tp.lm_head`` (a head laid out in vocabulary shards runs one per shard)."""
    head = functools.partial(tp.lm_head, original)
    pack = _packing()
    rows = hidden_states.shape[0]
    if pack is None or (hidden_states.is_cuda and torch.cuda.is_current_stream_capturing()):
        # a decode graph's LM head has N rows
        return head(self, hidden_states, *args, **kwargs)
    padded_rows = packing.head_rows(rows, pack[0])
    if padded_rows == rows:
        return head(self, hidden_states, *args, **kwargs)
    padded = hidden_states.new_zeros((padded_rows, *hidden_states.shape[1:]))
    padded[:rows] = hidden_states
    return head(self, padded, *args, **kwargs)[:rows]
