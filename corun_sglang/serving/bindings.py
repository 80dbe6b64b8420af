"""Every SGLang and FlashInfer name corun-sglang relies on beyond its hook targets, named once.

The adapters bind arguments of SGLang and FlashInfer functions by name, pass
keyword arguments to them, and read private attributes; ``sampler`` calls
private ``Sampler`` methods. A renamed parameter or attribute would make an
adapter fail, or worse, quietly do nothing, mid-serving. ``problems()``
checks them all up front, as part of the ``--corun`` startup check:

- ``Parameters``: the callable accepts each name as a named parameter (a
  ``**kwargs`` catch-all does not count: it may drop the name);
- ``Attributes``: the class or module has each name;
- ``Assigns``: the function's source assigns ``self.<name>`` (an attribute
  only instances carry, set by that function).

Each mismatch is one problem naming the target, the missing name, which part
of corun-sglang relies on it, and the fix. A hook target that does not
resolve is left to the hook check (``hooks.unhooked``): one problem per cause.
"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
import re

from corun_sglang import FLASHINFER_VERSION, SGLANG_VERSION

FIX = (
    f"Fix: corun-sglang is written against SGLang {SGLANG_VERSION} / FlashInfer {FLASHINFER_VERSION}; "
    f"reinstall them (pip install --force-reinstall --no-deps sglang=={SGLANG_VERSION} "
    f"flashinfer-python=={FLASHINFER_VERSION}, then `corun-sglang apply-patches`)"
)


@dataclasses.dataclass(frozen=True)
class Parameters:
    """``target`` (a callable) has a parameter of each of ``names``."""

    target: str
    names: tuple[str, ...]
    user: str  # the part of corun-sglang that relies on them

    def missing(self, obj) -> list[str]:
        params = inspect.signature(obj).parameters
        named = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        return [n for n in self.names if n not in named]

    def describe(self, name: str) -> str:
        return f"has no parameter '{name}'"


@dataclasses.dataclass(frozen=True)
class Attributes:
    """``target`` (a class or module) has each of ``names``."""

    target: str
    names: tuple[str, ...]
    user: str

    def missing(self, obj) -> list[str]:
        return [n for n in self.names if not hasattr(obj, n)]

    def describe(self, name: str) -> str:
        return f"has no attribute '{name}'"


@dataclasses.dataclass(frozen=True)
class Assigns:
    """The source of ``target`` (a function or method) assigns ``self.<name>`` (annotated or not) for each of
    ``names``."""

    target: str
    names: tuple[str, ...]
    user: str

    def missing(self, obj) -> list[str]:
        source = inspect.getsource(obj)
        return [n for n in self.names if not re.search(rf"\bself\.{re.escape(n)}\s*(:[^=\n]*)?=(?!=)", source)]

    def describe(self, name: str) -> str:
        return f"no longer assigns 'self.{name}'"


Binding = Parameters | Attributes | Assigns

_FI_BACKEND = "sglang.srt.layers.attention.flashinfer_backend"
_DECODE_WRAPPER = "flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper"
_PAGED_PREFILL = "flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper"
_RAGGED_PREFILL = "flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper"

BINDINGS: tuple[Binding, ...] = (
    # startup, admission, retraction
    Parameters("sglang.srt.managers.scheduler.Scheduler.__init__", ("server_args",), "adapters.startup.scheduler_init"),
    Parameters("sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.__init__",
               ("model_runner",), "adapters.startup.decode_graph_runner_init"),
    Parameters("sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req", ("req",), "adapters.admission.add_one_req"),
    Parameters("sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill", ("running_batch",),
               "adapters.admission.prefill_wait"),
    Parameters("sglang.srt.managers.schedule_batch.ScheduleBatch.retract_decode", ("server_args",),
               "adapters.admission.retract_decode"),
    # the deterministic prefix cache
    Parameters("sglang.srt.mem_cache.radix_cache.RadixCache.cache_finished_req", ("req", "is_insert", "kv_len_to_handle"),
               "adapters.prefix.cache_finished_req"),
    Parameters("sglang.srt.mem_cache.radix_cache.RadixKey.__init__", ("token_ids", "extra_key", "is_bigram", "limit"),
               "adapters.prefix.match_prefix"),
    Parameters("sglang.srt.mem_cache.base_prefix_cache.MatchPrefixParams.__init__", ("key", "req"),
               "adapters.prefix.match_prefix"),
    Attributes("sglang.srt.mem_cache.base_prefix_cache.MatchResult", ("device_indices", "cache_protected_len"),
               "adapters.prefix.match_prefix"),
    Attributes("sglang.srt.mem_cache.base_prefix_cache.EvictParams", ("num_tokens",), "adapters.prefix.evict"),
    Assigns("sglang.srt.mem_cache.radix_cache.RadixCache.__init__",
            ("disable", "req_to_token_pool", "token_to_kv_pool_allocator", "is_eagle", "disable_finished_insert"),
            "adapters.prefix"),
    Assigns("sglang.srt.mem_cache.radix_cache.RadixCache.reset", ("root_node",), "adapters.prefix.newly_shared"),
    Assigns("sglang.srt.mem_cache.radix_cache.TreeNode.__init__", ("key", "parent", "lock_ref"),
            "adapters.prefix.newly_shared"),
    Assigns("sglang.srt.managers.schedule_batch.Req.__init__",
            ("origin_input_ids", "extra_key", "cache_protected_len", "prefix_indices", "last_node"), "adapters.prefix"),
    # packed prefill
    Parameters("sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.__init__",
               ("model_runner",), "adapters.prefill.prefill_graph_runner_init"),
    Parameters("sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner"
               ".can_replay_locally", ("num_tokens",), "adapters.prefill.prefill_replay"),
    Parameters("sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_extend", ("forward_batch",),
               "adapters.prefill.eager_prefill"),
    Parameters(f"{_FI_BACKEND}.FlashInferIndicesUpdaterPrefill.call_begin_forward",
               ("wrapper_ragged", "wrapper_paged", "use_ragged"), "adapters.prefill.prefill_plan"),
    Attributes(_PAGED_PREFILL, ("begin_forward",), "adapters.prefill.prefill_plan"),
    Attributes(_RAGGED_PREFILL, ("begin_forward",), "adapters.prefill.prefill_plan"),
    Parameters(f"{_PAGED_PREFILL}.plan", ("disable_split_kv",), "adapters.prefill.prefill_plan"),
    Parameters(f"{_RAGGED_PREFILL}.plan", ("disable_split_kv",), "adapters.prefill.prefill_plan"),
    Assigns(f"{_RAGGED_PREFILL}.__init__", ("_backend",), "adapters.prefill.prefill_plan"),
    Parameters("sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head", ("hidden_states",),
               "adapters.prefill.lm_head_rows"),
    Parameters("flashinfer.utils.determine_attention_backend", ("head_dim_qk", "head_dim_vo"),
               "kernel_probe.prefill_kernel"),
    Attributes("sglang.srt.utils", ("is_sm100_supported",), "kernel_probe.prefill_kernel"),
    # fixed-shape decode
    Parameters("sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_decode", ("forward_batch",),
               "adapters.decode.eager_decode"),
    Parameters(f"{_FI_BACKEND}.FlashInferIndicesUpdaterDecode.call_begin_forward",
               ("wrapper", "req_pool_indices", "seq_lens_cpu", "fixed_split_size", "disable_split_kv"),
               "adapters.decode.decode_plan"),
    # the plan a decode CUDA graph captures (the wrapper's own) and replays (SGLang's fast_decode_plan)
    Parameters(f"{_DECODE_WRAPPER}._plan_impl", ("fixed_split_size", "disable_split_kv"), "adapters.decode.decode_plan"),
    Parameters("flashinfer.decode.fast_decode_plan", ("fixed_split_size", "disable_split_kv"),
               "adapters.decode.decode_plan"),
    Attributes(_DECODE_WRAPPER, ("is_cuda_graph_enabled",), "adapters.decode._fill_surplus"),
    Assigns(f"{_DECODE_WRAPPER}.__init__", ("_pin_memory_int_workspace_buffer",), "adapters.decode._fill_surplus"),
    Assigns(f"{_DECODE_WRAPPER}._plan_impl", ("_plan_info",), "adapters.decode._fill_surplus"),
    Assigns("flashinfer.decode.fast_decode_plan", ("_plan_info",), "adapters.decode._fill_surplus"),
    # MoE padding rows
    Parameters("sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM.forward", ("input_ids", "forward_batch"),
               "adapters.moe.moe_model_forward"),
    Assigns("sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM.__init__", ("quant_config",),
            "adapters.moe.moe_model_forward"),
    Attributes("sglang.srt.layers.moe.topk.StandardTopKOutput", ("topk_ids",), "adapters.moe.topk_padding"),
    Parameters("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe._fused_moe_kernel_sequence",
               ("filter_expert",), "adapters.moe.fused_moe_filter"),
    # request-bound RNG
    Parameters("sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.adjusted_from_schedule_batch",
               ("batch", "vocab_size"), "adapters.seeds.batch_seeds"),
    Attributes("sglang.srt.sampling.sampling_params.SamplingParams", ("sampling_seed",), "adapters.seeds._seed_request"),
    Parameters("sglang.srt.managers.tokenizer_manager.TokenizerManager._send_one_request", ("tokenized_obj",),
               "adapters.seeds.send_one_request"),
    Parameters("sglang.srt.managers.tokenizer_manager.TokenizerManager._send_batch_request", ("tokenized_objs",),
               "adapters.seeds.send_batch_request"),
    Parameters("sglang.srt.layers.sampler.Sampler.forward",
               ("logits_output", "sampling_info", "return_logprob", "top_logprobs_nums", "token_ids_logprobs",
                "positions"), "sampler.CorunSampler"),
    Attributes("sglang.srt.layers.sampler.Sampler",
               ("_preprocess_logits", "_attach_sampling_mask_to_output", "_compute_sampling_mask_from_probs",
                "_sync_token_ids_across_tp"), "sampler.CorunSampler"),
    Assigns("sglang.srt.layers.sampler.Sampler.__init__", ("output_logprob_processor",), "sampler.CorunSampler"),
    Attributes("sglang.srt.layers.sampler", ("_CUSTOM_SAMPLER_FACTORIES", "register_sampler_backend"),
               "sampler.register"),
    # top-k logprobs and penalties
    Parameters("sglang.srt.layers.logprob_processor.get_top_logprobs_raw", ("logprobs", "top_logprobs_nums"),
               "adapters.logprobs.ranked_top_logprobs"),
    Parameters("sglang.srt.layers.logprob_processor.get_top_logprobs_chunk", ("logprobs", "top_k_nums"),
               "adapters.logprobs.ranked_top_logprobs"),
    Parameters("sglang.srt.layers.logprob_processor.get_token_ids_logprobs", ("logprobs", "no_copy_to_cpu"),
               "adapters.logprobs.tensor_token_ids_logprobs"),
    Parameters("sglang.srt.managers.scheduler.Scheduler._forward_isolation", ("batch", "overlap"),
               "adapters.penalties.launch_feed"),
    Attributes("sglang.srt.managers.schedule_batch.ScheduleBatch",
               ("enable_overlap", "input_ids", "forward_mode", "sampling_info"), "adapters.penalties"),
    Attributes("sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo", ("penalizer_orchestrator",),
               "adapters.penalties.feed_step_inputs"),
    Attributes("sglang.srt.sampling.penaltylib.orchestrator.BatchedPenalizerOrchestrator",
               ("cumulate_output_tokens",), "adapters.penalties.feed_step_inputs"),
    # the contract as clients see it
    Assigns("sglang.srt.managers.scheduler.Scheduler.init_tp_model_worker", ("tp_worker",),
            "adapters.contract.scheduler_info"),
    Assigns("sglang.srt.managers.scheduler.Scheduler.__init__", ("ps",), "adapters.contract.scheduler_info"),
    Attributes("sglang.srt.managers.tp_worker.TpModelWorker", ("model_runner",), "adapters.contract.scheduler_info"),
    Parameters("sglang.srt.entrypoints.engine.Engine._set_startup_time", ("tokenizer_manager", "scheduler_init_result"),
               "adapters.contract.hand_over"),
    Parameters("sglang.srt.managers.tokenizer_manager.TokenizerManager._wait_one_response", ("obj",),
               "adapters.contract.stamp_outputs"),
    Parameters("sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._build_completion_response",
               ("request", "ret"), "adapters.contract.completion_response"),
    Parameters("sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._build_chat_response",
               ("request", "ret"), "adapters.contract.chat_response"),
    # step metrics
    Parameters("sglang.srt.managers.scheduler.Scheduler.run_batch", ("batch",), "adapters.operations.count_step"),
    Attributes("sglang.srt.managers.schedule_batch.ScheduleBatch",
               ("forward_mode", "prefix_lens", "extend_lens", "batch_size"), "adapters.operations.count_step"),
    # hook registration
    Attributes("sglang.srt.plugins.hook_registry.HookRegistry", ("_hooks",), "hooks.register"),
)


def _hook_targets() -> frozenset[str]:
    from corun_sglang.serving import hooks

    return frozenset(h.target for h in hooks.HOOKS + (hooks.SYNTHETIC,))


def check(binding: Binding, hook_targets: frozenset[str] = frozenset()) -> list[str]:
    """The problems of one binding (empty when it holds)."""
    try:
        obj = pkgutil.resolve_name(binding.target)
    except (ImportError, AttributeError) as exc:
        if binding.target in hook_targets:
            return []
        return [f"{binding.target}: not found ({exc}), which {binding.user} relies on. {FIX}"]
    try:
        missing = binding.missing(obj)
    except (TypeError, ValueError, OSError) as exc:  # no signature or no source to read
        return [f"{binding.target}: cannot be checked ({type(exc).__name__}: {exc}), "
                f"which {binding.user} relies on. {FIX}"]
    return [f"{binding.target}: {binding.describe(name)}, which {binding.user} relies on. {FIX}"
            for name in missing]


def problems(bindings: tuple[Binding, ...] | None = None) -> list[str]:
    """Every mismatch between ``bindings`` (default: ``BINDINGS``) and the installed SGLang / FlashInfer."""
    hook_targets = _hook_targets()
    return [p for b in (BINDINGS if bindings is None else bindings) for p in check(b, hook_targets)]
