"""Thin hook adapters: each checks ``--corun`` and hands the decision to a pure function.

Every adapter here is named in ``hooks.HOOKS`` and is a pass-through when the
server runs without ``--corun``. Decisions live in ``policy`` (scheduling) and
``seeds``; adapters only read SGLang state and act.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref

import torch

from corun_sglang import decode_grid, kernel_probe, moe_padding, pack_record, packing, policy, requests_check, rng, seeds
from corun_sglang.startup import check_startup

logger = logging.getLogger(__name__)


class CorunContractError(RuntimeError):
    """SGLang was about to do something that breaks the CoRun contract; this is a bug, never skipped."""


def _corun(server_args) -> bool:
    return bool(getattr(server_args, "corun", False))


def _server_args():
    from sglang.srt.runtime_context import get_context

    try:
        return get_context().server_args
    except ValueError:  # not published: this process serves nothing
        return None


def _serving_corun() -> bool:
    """Whether this process serves with ``--corun`` (its published server args say so)."""
    return _corun(_server_args())


def _applies(mechanism: str) -> bool:
    """Whether this process applies ``mechanism``: under ``--corun``, or in a ``--corun-ablation``."""
    from corun_sglang.config import ablation_mechanisms

    args = _server_args()
    return _corun(args) or mechanism in ablation_mechanisms(getattr(args, "corun_ablation", None))


# ----------------------------------------------------------------- startup


def scheduler_init(original, self, server_args, *args, **kwargs):
    """Scheduler start: a ``--corun`` scheduler re-checks its own process before loading weights."""
    if _corun(server_args):
        check_startup()
        logger.info("corun scheduler: %s", server_args.corun_config.summary())
    return original(self, server_args, *args, **kwargs)


def decode_graph_runner_init(result, self, model_runner, *args, **kwargs):
    """After the decode CUDA-graph runner is built: it holds the graphs of N and of the decode tiers, no
    other, and every record served (decode tiers, prefill pack) was verified in this environment."""
    server_args = model_runner.server_args
    if not _corun(server_args):
        return result
    from corun_sglang import records

    cfg = server_args.corun_config
    if list(self.capture_bs) != cfg.decode_sizes:
        raise CorunContractError(
            f"decode CUDA graphs resolved to batch sizes {list(self.capture_bs)}, not {cfg.decode_sizes}: "
            f"the request pool holds {model_runner.req_to_token_pool.size} requests. "
            f"Fix: lower --max-running-requests to at most that, or give the KV cache "
            f"more memory (--mem-fraction-static)"
        )
    served = cfg.served_records()
    if not served:
        return result
    env = _tier_environment(model_runner)
    if any(item.record is None for item in served):  # unverified candidates: tell the verifier where they ran
        logger.warning(records.environment_line(env))
    if cfg.prefill_pack is not None and cfg.pack_record is None:
        logger.warning(pack_record.candidate_line(cfg.prefill_pack, cfg.prefill_pack_shortest, cfg.prefill_pack_kernel))
    problem = records.foreign(served, env)
    if problem:
        raise CorunContractError(problem)
    return result


def _tier_environment(model_runner) -> dict:
    from corun_sglang import records

    return records.environment(
        model_runner.model_config.hf_config.to_dict(), model_runner.model_config.dtype, model_runner.server_args,
        gpu=torch.cuda.get_device_name(torch.cuda.current_device()), cuda=torch.version.cuda,
        installed=records.versions(), blas=records.blas_setup(),
    )


# ----------------------------------------------------------------- isolated prefill, admission


def chunked_req_token_budget(original, self):
    """Next chunk of a chunked prefill: the configured chunk size, whatever memory is free."""
    if not _applies("isolated-prefill"):
        return original(self)
    return policy.chunk_budget(self.rem_chunk_tokens)


def _reserved(req, page_size: int) -> int:
    return policy.reserved_tokens(
        len(req.origin_input_ids), req.sampling_params.max_new_tokens, page_size
    )


def _pack() -> tuple[int, int] | None:
    """This server's prefill pack and shortest packable prompt, or None (isolated prefill)."""
    args = _server_args()
    if not _corun(args) or args.corun_config.prefill_pack is None:
        return None
    return args.corun_config.prefill_pack, args.corun_config.prefill_pack_shortest


def _prompt(req) -> tuple[int, int]:
    return len(req.origin_input_ids), len(req.prefix_indices)


def add_one_req(original, self, req, *args, **kwargs):
    """Admit a waiting request only under full-sequence admission (``policy.admits``), into an empty
    prefill batch or, with a prefill pack, into one of packable prompts it fits (``packing.joins``)."""
    if not _serving_corun():
        return original(self, req, *args, **kwargs)
    pack = _pack()
    if self.can_run_list and pack is None:  # this prefill batch is taken: SGLang's own limit refuses the request
        return original(self, req, *args, **kwargs)
    from sglang.srt.managers.schedule_policy import AddReqResult

    prompt = _prompt(req)
    if self.can_run_list and not (
        packing.joins([_prompt(r) for r in self.can_run_list], prompt, *pack)
        # whole, never chunked: its page-rounded length fits what is left of the chunk
        and (self.rem_chunk_tokens is None or self.ceil_paged_tokens(prompt[0]) <= self.rem_chunk_tokens)
    ):
        return AddReqResult.OTHER
    running = [*([] if self.running_batch is None else self.running_batch.reqs), *self.can_run_list]
    if not policy.admits(
        candidate=_reserved(req, self.page_size),
        running=[_reserved(r, self.page_size) for r in running],
        pool_tokens=self.token_to_kv_pool_allocator.size,
        max_running=self.max_running_requests,
    ):
        return AddReqResult.NO_TOKEN
    return original(self, req, *args, **kwargs)


def _pack_cut_short(scheduler, running_batch) -> bool:
    """``packing.cut_short`` for the scheduler's waiting queue and ``running_batch``."""
    page = scheduler.page_size
    return packing.cut_short(
        ((*_prompt(r), _reserved(r, page)) for r in scheduler.waiting_queue),
        [_reserved(r, page) for r in running_batch.reqs],
        scheduler.token_to_kv_pool_allocator.size, scheduler.max_running_requests, *_pack(),
    )


def prefill_wait(original, self, running_batch, *args, **kwargs):
    """With ``--corun-prefill-pack-wait W``: a prefill that full-sequence admission would cut short
    (``packing.cut_short``) is skipped for up to W passes in a row, each a decode step of ``running_batch``
    instead; then it runs as admission allows."""
    server_args = _server_args()
    wait = server_args.corun_config.prefill_pack_wait if _corun(server_args) else 0
    if not wait:
        return original(self, running_batch, *args, **kwargs)
    waited = getattr(self, "_corun_pack_waited", 0)
    if (waited < wait and self.chunked_req is None and self.waiting_queue
            and not running_batch.is_empty() and not running_batch.batch_is_full
            and _pack_cut_short(self, running_batch)):
        from sglang.srt.managers.schedule_batch import NextBatchPlan

        self._corun_pack_waited = waited + 1
        return NextBatchPlan(batch_to_run=None, running_batch=running_batch)
    self._corun_pack_waited = 0
    return original(self, running_batch, *args, **kwargs)


def retract_decode(original, self, server_args, *args, **kwargs):
    """Decode retraction never runs under ``--corun``: full-sequence admission rules it out."""
    if _corun(server_args):
        raise CorunContractError(
            f"decode retraction was about to run for a batch of {len(self.reqs)} requests "
            f"(KV available: {self.token_to_kv_pool_allocator.available_size()} tokens). "
            "Full-sequence admission should make this impossible; please report it"
        )
    return original(self, server_args, *args, **kwargs)


# ----------------------------------------------------------------- packed prefill


def prefill_graph_runner_init(result, self, model_runner, *args, **kwargs):
    """After the prefill CUDA-graph runner is built: with a prefill pack, its smallest graph is the pack's."""
    server_args = model_runner.server_args
    pack = server_args.corun_config.prefill_pack if _corun(server_args) else None
    if pack is not None and (not self.capture_num_tokens or self.capture_num_tokens[0] != pack):
        raise CorunContractError(
            f"prefill CUDA graphs resolved to token counts {list(self.capture_num_tokens)[:8]}...; a prefill "
            f"pack of {pack} tokens needs {pack} as the smallest. Fix: drop --corun-prefill-pack, or raise "
            "--chunked-prefill-size to at least the pack"
        )
    return result


def prefill_replay(original, self, *args, **kwargs):
    """A prefill of the shortest packable prompt's length up to the pack replays the pack's graph, however
    far below it lies (SGLang pads at most twofold otherwise)."""
    pack = _pack()
    if pack is not None and kwargs.get("num_tokens") is not None:
        kwargs["num_tokens"] = packing.replay_tokens(kwargs["num_tokens"], *pack)
    return original(self, *args, **kwargs)


def eager_prefill(original, self, forward_batch, *args, **kwargs):
    """A prefill of fresh prompts that should replay the pack's graph never runs eagerly at its own size."""
    pack = _pack()
    if pack is not None:
        tokens = len(forward_batch.input_ids)
        prefixes = forward_batch.extend_prefix_lens_cpu or []
        if packing.at_pack(tokens, *pack) and not any(prefixes):
            raise CorunContractError(
                f"a prefill of {forward_batch.batch_size} fresh prompts, {tokens} tokens, was about to run "
                f"eagerly instead of replaying the {pack[0]}-token prefill graph"
            )
    return original(self, forward_batch, *args, **kwargs)


def prefill_plan(original, self, *args, **kwargs):
    """With a prefill pack, every FlashInfer prefill plan runs without split-KV: a plan's KV split then
    follows no other request of its batch. A pack whose shortest prompt rests on FA3's fixed query tile
    (``packing.shortest``) stops the server at a prefill planned on another kernel, whose tile could
    follow the batch."""
    if _pack() is None:
        return original(self, *args, **kwargs)
    bound = _signature(original).bind(self, *args, **kwargs)
    wrappers = [w for w in (bound.arguments.get("wrapper_ragged"), bound.arguments.get("wrapper_paged"))
                if w is not None]
    own = [w.__dict__.get("begin_forward") for w in wrappers]  # an instance's own plan function, if any
    for w in wrappers:
        w.begin_forward = functools.partial(w.begin_forward, disable_split_kv=True)
    try:
        result = original(self, *args, **kwargs)
    finally:
        for w, fn in zip(wrappers, own):
            if fn is None:
                del w.begin_forward
            else:
                w.begin_forward = fn
    if _server_args().corun_config.prefill_pack_kernel == packing.FA3:
        kernel = kernel_probe.planned(bool(bound.arguments.get("use_ragged")),
                                      getattr(bound.arguments.get("wrapper_ragged"), "_backend", None))
        if kernel != packing.FA3:
            raise CorunContractError(
                f"a prefill was planned on FlashInfer's {kernel} kernel, but the prefill pack packs prompts "
                f"from {_pack()[1]} tokens, which only FA3's fixed query tile allows. Fix: set "
                "SGLANG_FLASHINFER_USE_PAGED=1 for the server and `corun-sglang verify-prefill-pack`, which then "
                "packs prompts only from the length that keeps FA2's query tile"
            )
    return result


def lm_head_rows(original, self, hidden_states, *args, **kwargs):
    """With a prefill pack, the LM head outside a CUDA graph (a prefill's logits) runs on ``packing.head_rows``
    rows, the states padded with zeros; the logits of the real rows are returned."""
    pack = _pack()
    rows = hidden_states.shape[0]
    if pack is None or (hidden_states.is_cuda and torch.cuda.is_current_stream_capturing()):
        # a decode graph's LM head has N rows
        return original(self, hidden_states, *args, **kwargs)
    padded_rows = packing.head_rows(rows, pack[0])
    if padded_rows == rows:
        return original(self, hidden_states, *args, **kwargs)
    padded = hidden_states.new_zeros((padded_rows, *hidden_states.shape[1:]))
    padded[:rows] = hidden_states
    return original(self, padded, *args, **kwargs)[:rows]


# ----------------------------------------------------------------- fixed-shape decode


def eager_decode(original, self, forward_batch, *args, **kwargs):
    """A decode step never runs eagerly under ``--corun``: it replays a captured decode graph or stops."""
    if _corun(self.model_runner.server_args):
        raise CorunContractError(
            f"a decode step of {forward_batch.batch_size} requests was about to run eagerly "
            "instead of replaying a captured decode CUDA graph"
        )
    return original(self, forward_batch, *args, **kwargs)


def use_tensor_core(original, *args, **kwargs):
    """FlashInfer decode on the tensor-core (prefill) kernels: the only decode plan that can turn split-KV off."""
    if _applies("splitkv-off"):
        return True
    return original(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def decode_plan(original, self, *args, **kwargs):
    """Every FlashInfer decode plan (graph capture, replay, eager) runs without split-KV; a CUDA-graph
    plan's surplus blocks recompute the batch's request with the fewest KV tokens (``decode_grid``)."""
    if not _applies("splitkv-off"):
        return original(self, *args, **kwargs)
    bound = _signature(original).bind(self, *args, **kwargs)
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


#: The request each CUDA-graph decode wrapper's surplus blocks point at now (fill only on a change).
_surplus_request: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fill_surplus(updater, wrapper, batch_size: int, request: int, planned: bool = False) -> bool:
    """Point the surplus blocks of a CUDA-graph decode wrapper's plan at ``request``; whether they are.

    False, with nothing done, for a wrapper outside a CUDA graph, or one not yet planned. A CUDA-graph
    wrapper that was ``planned`` and has no plan to fill, or a plan whose surplus ``decode_grid`` cannot
    fill, raises ``CorunContractError``: its surplus blocks would read outside the batch.
    """
    from corun_sglang.bindings import FIX

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


# ----------------------------------------------------------------- MoE padding rows


def _skips_moe_padding() -> bool:
    from corun_sglang.config import skips_moe_padding

    return skips_moe_padding(_server_args())


def count_real_tokens(original, *args, **kwargs):
    """SGLang keeps ``num_token_non_padded`` (a graph buffer each replay refills) where padding rows skip
    the experts, not only under expert parallelism."""
    if _skips_moe_padding():
        return True
    return original(*args, **kwargs)


def moe_model_forward(original, self, *args, **kwargs):
    """A forward of an MoE model: its padding rows, from SGLang's real token count (``moe_padding``).

    A quantized model's padding rows keep their experts: its MoE layers may run kernels other than
    the Triton ones, which alone give a row without an expert zeros (its tokens are the same either way)."""
    if not _skips_moe_padding() or getattr(self, "quant_config", None) is not None:
        return original(self, *args, **kwargs)
    bound = _signature(original).bind(self, *args, **kwargs)
    input_ids, forward_batch = bound.arguments["input_ids"], bound.arguments["forward_batch"]
    padding = moe_padding.rows(len(input_ids), forward_batch.num_token_non_padded) if input_ids is not None else None
    with moe_padding.forward(padding):
        return original(self, *args, **kwargs)


def topk_padding(original, self, *args, **kwargs):
    """The top-k of an MoE layer: the forward's padding rows get no expert."""
    out = original(self, *args, **kwargs)
    if _skips_moe_padding() and isinstance(getattr(out, "topk_ids", None), torch.Tensor):
        moe_padding.mask(out.topk_ids)
    return out


def fused_moe_filter(original, *args, **kwargs):
    """The fused-MoE kernels give an unrouted block zeros without reading expert weights."""
    if not _skips_moe_padding():
        return original(*args, **kwargs)
    return original(*args, **{**kwargs, "filter_expert": True})  # a keyword-only argument


# ----------------------------------------------------------------- request-bound RNG


def _ensure_seed(sampling_params, input_ids, random_seed) -> int:
    problem = requests_check.seed_problem(sampling_params.sampling_seed)
    if problem:  # the tokenizer's check refuses such a request; a scheduler never raises on one
        logger.error("corun: %s; the request is sampled from its derived seed instead", problem)
        sampling_params.sampling_seed = None
    if sampling_params.sampling_seed is None:
        sampling_params.sampling_seed = seeds.request_seed(
            random_seed, input_ids, seeds.params_of(sampling_params)
        )
    return sampling_params.sampling_seed


def batch_seeds(original, self, batch, vocab_size):
    """Every row of a ``--corun`` batch carries its request's seed (``seeds.request_seed`` if none was given)."""
    result = original(self, batch, vocab_size)
    server_args = _server_args()
    if _corun(server_args):
        values = [
            _ensure_seed(r.sampling_params, r.origin_input_ids, server_args.random_seed)
            for r in batch.reqs
        ]
        self.sampling_seed = rng.seeds_of(values, device=batch.device)
    return result


def _seed_request(manager, tokenized_obj) -> None:
    import copy

    sp = tokenized_obj.sampling_params
    if sp is None or not hasattr(sp, "sampling_seed"):
        return
    input_ids = list(tokenized_obj.input_ids) if tokenized_obj.input_ids is not None else []
    logical = manager.child_rid_to_logical_rid.get(tokenized_obj.rid)
    if logical is None or sp.max_new_tokens == 0:
        _ensure_seed(sp, input_ids, manager.server_args.random_seed)
        return
    # Sample i of an n > 1 request: children share one SamplingParams object, so
    # each gets its own copy with the child seed derived from (seed, i).
    index = _sample_index(manager, logical)
    child = copy.copy(sp)
    base = sp.sampling_seed
    if base is None:
        base = seeds.request_seed(manager.server_args.random_seed, input_ids, seeds.params_of(sp))
    child.sampling_seed = seeds.child_seed(base, index)
    tokenized_obj.sampling_params = child


def _sample_index(manager, logical: str) -> int:
    """The position of the next sample child of the logical request ``logical``: 0, 1, ... in the order
    SGLang sends them (``TokenizerManager._handle_batch_request``). The count lives on the logical
    request's own state, which SGLang creates for each request and drops once every child is sent, so
    the same request sent again counts from 0 whatever its rid."""
    state = manager.rid_to_state[logical]
    index = state.__dict__.get("_corun_samples_sent", 0)
    state._corun_samples_sent = index + 1
    return index


def send_one_request(original, self, tokenized_obj, *args, **kwargs):
    """Requests leave the tokenizer manager with their seed fixed."""
    if _corun(self.server_args):
        _seed_request(self, tokenized_obj)
    return original(self, tokenized_obj, *args, **kwargs)


def send_batch_request(original, self, tokenized_objs, *args, **kwargs):
    if _corun(self.server_args):
        for obj in tokenized_objs:
            _seed_request(self, obj)
    return original(self, tokenized_objs, *args, **kwargs)


# ----------------------------------------------------------------- reservations, metrics, contract stops


def default_max_new_tokens(original, self, req, *args, **kwargs):
    """A request without ``max_new_tokens`` (a chat completion without ``max_tokens``) gets
    ``--corun-default-max-new-tokens`` before SGLang caps it to the context and the pool, so the
    reservation admission makes for it is bounded; unset, it keeps SGLang's own, the rest of the context."""
    server_args = self.server_args
    bound = server_args.corun_default_max_new_tokens if _corun(server_args) else None
    if bound is not None and req.sampling_params.max_new_tokens is None:
        req.sampling_params.max_new_tokens = bound
    return original(self, req, *args, **kwargs)


def _admitted(scheduler) -> list:
    """The admitted, unfinished requests of ``scheduler``: running, in the batch it runs, a chunked prompt."""
    batches = (scheduler.running_batch, getattr(scheduler, "last_batch", None),
               getattr(scheduler, "cur_batch_for_debug", None))
    candidates = [r for b in batches if b is not None for r in b.reqs]
    if getattr(scheduler, "chunked_req", None) is not None:
        candidates.append(scheduler.chunked_req)
    seen, admitted = set(), []
    for req in candidates:
        if id(req) not in seen and not req.finished():
            seen.add(id(req))
            admitted.append(req)
    return admitted


def scheduler_reservations(result, self, *args, **kwargs):
    """A ``--corun`` scheduler, its KV pool known, logs how many requests without ``max_tokens`` run at once
    (``reservations.capacity_line``); with ``--enable-metrics`` it registers the ``corun_`` metrics under
    SGLang's scheduler labels, published whenever SGLang logs its own stats (``publish_reservations``)."""
    if not _corun(self.server_args):
        return result
    from corun_sglang import metrics, reservations

    logger.info(reservations.capacity_line(
        self.model_config.context_len, self.max_req_len, self.token_to_kv_pool_allocator.size, self.page_size,
        self.max_running_requests, self.server_args.corun_default_max_new_tokens,
    ))
    collector = self.metrics_collector
    if collector is not None:
        collector._corun_metrics = metrics.Metrics(collector.labels)
        collector._corun_scheduler = weakref.ref(self)
    return result


def publish_reservations(result, self, *args, **kwargs):
    """With SGLang's scheduler stats, the ``corun_`` gauges: reservations of the admitted and waiting requests
    and the KV pool of the scheduler this collector serves (``reservations.snapshot``)."""
    ref = self.__dict__.get("_corun_scheduler")
    scheduler = None if ref is None else ref()
    if scheduler is None:
        return result
    from corun_sglang import reservations

    page, pool = scheduler.page_size, scheduler.token_to_kv_pool_allocator
    self._corun_metrics.publish(reservations.snapshot(
        [_reserved(r, page) for r in _admitted(scheduler)],
        [_reserved(r, page) for r in scheduler.waiting_queue],
        pool.size, pool.available_size(),
    ))
    return result


def _in_flight(scheduler) -> list:
    """Every unfinished request ``scheduler`` holds: waiting, admitted."""
    return [r for r in scheduler.waiting_queue if not r.finished()] + _admitted(scheduler)


def event_loop(original, self, *args, **kwargs):
    """A ``--corun`` scheduler's event loop. A ``CorunContractError`` stops the server: it is counted
    (``corun_contract_stops_total``), its cause logged on one line (``stops.line``), every request the
    scheduler holds answered with ``stops.STATUS`` and that cause, and after ``stops.ANSWER_GRACE_S`` the
    error goes on to SGLang's scheduler-crash path, which stops the server's whole process tree."""
    if not _corun(self.server_args):
        return original(self, *args, **kwargs)
    try:
        return original(self, *args, **kwargs)
    except CorunContractError as error:
        _contract_stop(self, error)
        raise


def _contract_stop(scheduler, error: CorunContractError) -> None:
    import time

    from sglang.srt.managers.io_struct import AbortReq
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    from corun_sglang import stops

    counter = getattr(getattr(scheduler, "metrics_collector", None), "_corun_metrics", None)
    if counter is not None:
        counter.count_stop()
    logger.error(stops.line(error))
    reason = FINISH_ABORT(stops.client_message(error), stops.STATUS, type(error).__name__).to_json()
    try:
        held = _in_flight(scheduler)
        for req in held:
            scheduler.ipc_channels.send_to_tokenizer.send_output(AbortReq(finished_reason=reason, rid=req.rid), req)
    except Exception:  # the stop goes on; its clients then see the connection close
        logger.exception("corun contract stop: in-flight requests could not all be answered")
        return
    if held:
        time.sleep(stops.ANSWER_GRACE_S)


# ----------------------------------------------------------------- request check


def _fields(obj) -> dict:
    import dataclasses

    return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}


def check_request(original, self, obj, input_ids, *args, **kwargs):
    """Each generate request (each prompt of a batch, before its n > 1 children exist) is checked against
    ``requests_check`` before SGLang validates it and before anything reaches the scheduler; a refusal is
    a ``ValueError``, which SGLang's HTTP server answers with a 400."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    if _corun(self.server_args) and isinstance(obj, GenerateReqInput):
        requests_check.check(
            _fields(obj), obj.sampling_params, None if input_ids is None else len(input_ids),
            preferred=getattr(self, "preferred_sampling_params", None),
        )
    return original(self, obj, input_ids, *args, **kwargs)


def check_n(original, self, *args, **kwargs):
    """A generate request's ``n`` is an integer of 1 or more before SGLang expands it into children."""
    if _serving_corun():
        problem = requests_check.n_problem(self.sampling_params)
        if problem:
            raise requests_check.RequestRefused([problem])
    return original(self, *args, **kwargs)
