"""Fixed-shape decode adapters: every decode step replays a captured graph, planned without split-KV.

Invariants:
- under ``--corun`` a decode step never runs eagerly;
- FlashInfer decode runs on its tensor-core kernels, and every decode plan (capture, replay, eager) turns
  split-KV off (also under a ``splitkv-off`` ablation);
- a CUDA-graph plan's surplus blocks recompute the batch's cheapest request (``decode_grid``), or the server
  stops; which request each wrapper's surplus points at lives in ``_surplus_request``.
"""

from __future__ import annotations

import weakref

from corun_sglang.core import decode_grid
from corun_sglang.serving.adapters import state
from corun_sglang.core.stops import CorunContractError

#: The request each CUDA-graph decode wrapper's surplus blocks point at now (fill only on a change).
_surplus_request: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@state.corun_only
def eager_decode(original, self, forward_batch, *args, **kwargs):
    """A decode step never runs eagerly under ``--corun``: it replays a captured decode graph or stops."""
    raise CorunContractError(
        f"a decode step of {forward_batch.batch_size} requests was about to run eagerly "
        "instead of replaying a captured decode CUDA graph"
    )


def use_tensor_core(original, *args, **kwargs):
    """FlashInfer decode on the tensor-core (prefill) kernels: the only decode plan that can turn split-KV off."""
    if state.applies("splitkv-off"):
        return True
    return original(*args, **kwargs)


def decode_plan(original, self, *args, **kwargs):
    """Every FlashInfer decode plan (graph capture, replay, eager) runs without split-KV; a CUDA-graph
    plan's surplus blocks recompute the batch's request with the fewest KV tokens (``decode_grid``)."""
    if not state.applies("splitkv-off"):
        return original(self, *args, **kwargs)
    bound = state.bind(original, self, *args, **kwargs)
    bound.arguments["fixed_split_size"] = None
    bound.arguments["disable_split_kv"] = True
    wrapper, batch_size = bound.arguments["wrapper"], len(bound.arguments["req_pool_indices"])
    request = decode_grid.cheapest(bound.arguments.get("seq_lens_cpu"), batch_size)
    # laid out as this graph's previous plan, which this plan repeats and copies to the GPU
    filled = _fill_surplus(self, wrapper, batch_size, request)
    result = original(*bound.args, **bound.kwargs)
    if not filled:  # the graph's first plan
        _fill_surplus(self, wrapper, batch_size, request, planned=True)
    return result


def _fill_surplus(updater, wrapper, batch_size: int, request: int, planned: bool = False) -> bool:
    """Point the surplus blocks of a CUDA-graph decode wrapper's plan at ``request``; whether they are.

    False, with nothing done, for a wrapper outside a CUDA graph, or one not yet planned. A CUDA-graph
    wrapper that was ``planned`` and has no plan to fill, or a plan whose surplus ``decode_grid`` cannot
    fill, raises ``CorunContractError``: its surplus blocks would read outside the batch.
    """
    from corun_sglang.serving.bindings import FIX

    if not getattr(wrapper, "is_cuda_graph_enabled", False):
        return False
    plan = getattr(wrapper, "_plan_info", None)
    buffer = getattr(wrapper, "_pin_memory_int_workspace_buffer", None)
    if plan is None or buffer is None:
        if not planned:
            return False
        raise CorunContractError(
            f"the CUDA-graph decode plan of {type(wrapper).__name__} for {batch_size} requests left no "
            f"{'_plan_info' if plan is None else '_pin_memory_int_workspace_buffer'}, so its surplus blocks "
            f"cannot be pointed inside the batch. {FIX}"
        )
    if _surplus_request.get(wrapper) == request:
        return True
    group = updater.num_qo_heads // updater.num_kv_heads
    if decode_grid.fill(buffer, list(plan), batch_size, group, request) == 0:
        if decode_grid.surplus(list(plan), batch_size, group) is None:
            raise CorunContractError(
                f"the CUDA-graph decode plan for {batch_size} requests (query heads per KV head: {group}) "
                f"is not one whose surplus blocks corun can point inside the batch: plan {list(plan)}, "
                f"fields {list(decode_grid.PLAN_FIELDS)}. {FIX}"
            )
        return True  # the grid holds no surplus block
    _surplus_request[wrapper] = request
    return True
