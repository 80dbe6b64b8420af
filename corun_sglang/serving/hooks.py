"""Every SGLang hook target of corun-sglang, named once.

``register()`` hands them to SGLang's ``HookRegistry`` (it runs from the
``sglang.srt.plugins`` entry point in the server and in every scheduler
subprocess). SGLang's loader only logs a target it cannot resolve, so
``unhooked()`` re-checks, in the calling process, that each target now
carries its adapter; ``--corun`` refuses to start otherwise.

Each adapter is a pass-through unless the server runs with ``--corun``.
"""

from __future__ import annotations

import dataclasses
import os
import pkgutil

from sglang.srt.plugins.hook_registry import HookRegistry, HookType


@dataclasses.dataclass(frozen=True)
class Hook:
    target: str  # dotted path in SGLang 0.5.17
    kind: HookType
    adapter: str  # "module:attribute" of the hook callable or replacement class
    patch: str | None = None  # number of the patch that creates the target, if any

    def load(self):
        return pkgutil.resolve_name(self.adapter)


HOOKS: tuple[Hook, ...] = (
    Hook(
        "sglang.srt.server_args.ServerArgs",
        HookType.REPLACE,
        "corun_sglang.serving.server_args:CorunServerArgs",
    ),
    Hook(
        "sglang.srt.entrypoints.engine.Engine.server_args_class",
        HookType.REPLACE,
        "corun_sglang.serving.server_args:CorunServerArgs",
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.__init__",
        HookType.AROUND,
        "corun_sglang.serving.adapters.startup:scheduler_init",
    ),
    Hook(
        "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.__init__",
        HookType.AFTER,
        "corun_sglang.serving.adapters.startup:decode_graph_runner_init",
    ),
    # isolated prefill, full-sequence admission, no retraction
    Hook(
        "sglang.srt.managers.schedule_policy.PrefillAdder.chunked_req_token_budget",
        HookType.AROUND,
        "corun_sglang.serving.adapters.admission:chunked_req_token_budget",
        patch="0001",
    ),
    Hook(
        "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req",
        HookType.AROUND,
        "corun_sglang.serving.adapters.admission:add_one_req",
    ),
    # the deterministic prefix cache (--corun-prefix-cache)
    *(Hook(f"sglang.srt.mem_cache.radix_cache.RadixCache.{name}", HookType.AROUND,
           f"corun_sglang.serving.adapters.prefix:{name}")
      for name in ("match_prefix", "cache_unfinished_req", "cache_finished_req", "evict", "evictable_size",
                   "protected_size", "reset")),
    Hook(
        "sglang.srt.managers.schedule_policy.PrefillAdder.add_chunked_req",
        HookType.AROUND,
        "corun_sglang.serving.adapters.prefix:add_chunked_req",
    ),
    # packed prefill (--corun-prefill-pack, --corun-prefill-pack-wait)
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill",
        HookType.AROUND,
        "corun_sglang.serving.adapters.admission:prefill_wait",
    ),
    Hook(
        "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.__init__",
        HookType.AFTER,
        "corun_sglang.serving.adapters.prefill:prefill_graph_runner_init",
    ),
    Hook(
        "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.can_replay_locally",
        HookType.AROUND,
        "corun_sglang.serving.adapters.prefill:prefill_replay",
    ),
    Hook(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_extend",
        HookType.AROUND,
        "corun_sglang.serving.adapters.prefill:eager_prefill",
    ),
    Hook(
        "sglang.srt.layers.attention.flashinfer_backend.FlashInferIndicesUpdaterPrefill.call_begin_forward",
        HookType.AROUND,
        "corun_sglang.serving.adapters.prefill:prefill_plan",
    ),
    Hook(
        "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head",
        HookType.AROUND,
        "corun_sglang.serving.adapters.prefill:lm_head_rows",
    ),
    Hook(
        "sglang.srt.managers.schedule_batch.ScheduleBatch.retract_decode",
        HookType.AROUND,
        "corun_sglang.serving.adapters.admission:retract_decode",
    ),
    # fixed-shape decode without split-KV
    Hook(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_decode",
        HookType.AROUND,
        "corun_sglang.serving.adapters.decode:eager_decode",
    ),
    Hook(
        "sglang.srt.layers.attention.flashinfer_backend.should_use_tensor_core",
        HookType.AROUND,
        "corun_sglang.serving.adapters.decode:use_tensor_core",
    ),
    Hook(
        "sglang.srt.layers.attention.flashinfer_backend.FlashInferIndicesUpdaterDecode.call_begin_forward",
        HookType.AROUND,
        "corun_sglang.serving.adapters.decode:decode_plan",
    ),
    # padding rows of a CUDA graph skip the MoE experts (--corun-moe-padding skip)
    Hook(
        "sglang.srt.model_executor.forward_batch_info.enable_num_token_non_padded",
        HookType.AROUND,
        "corun_sglang.serving.adapters.moe:count_real_tokens",
    ),
    Hook(
        "sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM.forward",
        HookType.AROUND,
        "corun_sglang.serving.adapters.moe:moe_model_forward",
    ),
    Hook(
        "sglang.srt.layers.moe.topk.TopK.forward_cuda",
        HookType.AROUND,
        "corun_sglang.serving.adapters.moe:topk_padding",
    ),
    Hook(
        "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe._fused_moe_kernel_sequence",
        HookType.AROUND,
        "corun_sglang.serving.adapters.moe:fused_moe_filter",
    ),
    # the same bits at every TP size dividing K (--corun-tp-invariant K): parallel GEMMs as K fixed shards
    Hook(
        "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
        HookType.AFTER,
        "corun_sglang.serving.adapters.tp:shard_model",
    ),
    Hook(
        "sglang.srt.layers.linear.ColumnParallelLinear.forward",
        HookType.AROUND,
        "corun_sglang.serving.adapters.tp:column_forward",
    ),
    Hook(
        "sglang.srt.layers.linear.RowParallelLinear.forward",
        HookType.AROUND,
        "corun_sglang.serving.adapters.tp:row_forward",
    ),
    # (the LM head's vocabulary shards: prefill:lm_head_rows runs each head GEMM through tp:lm_head)
    # request-bound RNG
    Hook(
        "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.adjusted_from_schedule_batch",
        HookType.AROUND,
        "corun_sglang.serving.adapters.seeds:batch_seeds",
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._send_one_request",
        HookType.AROUND,
        "corun_sglang.serving.adapters.seeds:send_one_request",
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._send_batch_request",
        HookType.AROUND,
        "corun_sglang.serving.adapters.seeds:send_batch_request",
    ),
    # per-request logits transforms: top-k logprobs in a row-fixed order, penalties fed the request's own outputs
    Hook(
        "sglang.srt.layers.logprob_processor.get_top_logprobs_raw",
        HookType.AROUND,
        "corun_sglang.serving.adapters.logprobs:ranked_top_logprobs",
    ),
    Hook(
        "sglang.srt.layers.logprob_processor.get_top_logprobs_chunk",
        HookType.AROUND,
        "corun_sglang.serving.adapters.logprobs:ranked_top_logprobs",
    ),
    Hook(
        "sglang.srt.managers.schedule_batch.ScheduleBatch.cumulate_penalty_output_tokens",
        HookType.AROUND,
        "corun_sglang.serving.adapters.penalties:prepared_feed",
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler._forward_isolation",
        HookType.AROUND,
        "corun_sglang.serving.adapters.penalties:launch_feed",
    ),
    # the contract as clients see it: system_fingerprint and each sample's seed on every response
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.get_init_info",
        HookType.AFTER,
        "corun_sglang.serving.adapters.contract:scheduler_info",
    ),
    Hook(
        "sglang.srt.entrypoints.engine.Engine._set_startup_time",
        HookType.AFTER,
        "corun_sglang.serving.adapters.contract:hand_over",
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._wait_one_response",
        HookType.AROUND,
        "corun_sglang.serving.adapters.contract:stamp_outputs",
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._build_completion_response",
        HookType.AROUND,
        "corun_sglang.serving.adapters.contract:completion_response",
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._build_chat_response",
        HookType.AROUND,
        "corun_sglang.serving.adapters.contract:chat_response",
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._generate_completion_stream",
        HookType.AROUND,
        "corun_sglang.serving.adapters.contract:completion_stream",
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._generate_chat_stream",
        HookType.AROUND,
        "corun_sglang.serving.adapters.contract:chat_stream",
    ),
    # reservations made visible (--corun-default-max-new-tokens, corun_ metrics), contract stops
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.init_req_max_new_tokens",
        HookType.AROUND,
        "corun_sglang.serving.adapters.admission:default_max_new_tokens",
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.init_metrics_reporter",
        HookType.AFTER,
        "corun_sglang.serving.adapters.operations:scheduler_reservations",
    ),
    Hook(
        "sglang.srt.observability.metrics_collector.SchedulerMetricsCollector.log_stats",
        HookType.AFTER,
        "corun_sglang.serving.adapters.operations:publish_reservations",
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.run_event_loop",
        HookType.AROUND,
        "corun_sglang.serving.adapters.operations:event_loop",
    ),
    # every request checked in the tokenizer process (``requests_check``)
    Hook(
        "sglang.srt.managers.io_struct.GenerateReqInput.normalize_batch_and_arguments",
        HookType.AROUND,
        "corun_sglang.serving.adapters.requests:check_n",
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request",
        HookType.AROUND,
        "corun_sglang.serving.adapters.requests:check_request",
    ),
    # step shapes counted for the corun_ metrics (decode graph sizes, padding, prefill kinds)
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.run_batch",
        HookType.AFTER,
        "corun_sglang.serving.adapters.operations:count_step",
    ),
)

#: Seeded random-normal weights drawn in place by SGLang's dummy loader (tests and
#: benchmarks). Registered only in a process whose environment sets
#: ``probes.launch.SEED_ENV`` (``selected``): a production server registers no
#: testing hook. Outside the ``--corun`` contract, so ``unhooked()`` does not check
#: it; ``tools.launch.Server`` checks that a server started with that variable
#: logged its draw.
SYNTHETIC = Hook(
    "sglang.srt.model_loader.loader.DummyModelLoader.load_model",
    HookType.AFTER,
    "corun_sglang.tools.synthetic:fill_dummy_model",
)


def selected(environ=None) -> tuple[Hook, ...]:
    """The hooks a process registers: ``HOOKS``, and ``SYNTHETIC`` only where ``environ`` (default: this
    process's) sets the synthetic-weights seed."""
    from corun_sglang.probes.launch import SEED_ENV

    environ = os.environ if environ is None else environ
    return HOOKS + ((SYNTHETIC,) if SEED_ENV in environ else ())


def register() -> None:
    """Register every hook with SGLang's registry (applied by ``load_plugins``).

    Idempotent: a hook already registered is not registered again. A hook
    whose target a patch creates is left out while that patch is not applied
    (the ``--corun`` startup check then names the patch to apply).
    """
    from corun_sglang.serving import patches

    from corun_sglang.serving import sampler

    sampler.register()
    absent = {name[:4] for name in patches.missing()}
    for hook in selected():
        if hook.patch in absent:
            continue
        adapter = hook.load()
        registered = HookRegistry._hooks.get(hook.target, ())
        if any(kind is hook.kind and fn is adapter for kind, fn, _ in registered):
            continue
        HookRegistry.register(hook.target, adapter, hook.kind)


def _carries(obj, adapter) -> bool:
    """Whether ``obj`` is ``adapter`` or a registry wrapper chain that calls it."""
    seen = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        if obj is adapter:
            return True
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                if cell.cell_contents is adapter:
                    return True
            except ValueError:  # empty cell
                continue
        obj = getattr(obj, "__wrapped__", None)
    return False


def unhooked(selected: tuple[Hook, ...] | None = None) -> list[str]:
    """Targets (default: all of ``HOOKS``) that do not carry their adapter in this process."""
    problems = []
    for hook in HOOKS if selected is None else selected:
        try:
            current = pkgutil.resolve_name(hook.target)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{hook.target}: not found in this SGLang ({exc})")
            continue
        if not _carries(current, hook.load()):
            problems.append(f"{hook.target}: resolved but not hooked")
    return problems
