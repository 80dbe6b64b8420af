"""Every SGLang 0.5.17 server option, classified once for ``--corun``: an allowlist.

Each field of SGLang's ``ServerArgs`` is in exactly one group of ``GROUPS``:

- ``free``: it cannot change what a request computes or which shapes it runs at (ports, paths, logging,
  metrics, keys, timeouts, the model and its template, how weights are loaded); any value serves;
- ``corun``: ``--corun`` chooses it, or checks the value itself (``config.defaults`` and
  ``refusals.REFUSALS``, with their own messages);
- ``verified``: the values the GPU determinism suite served (``Group.allows``); any other is refused;
- ``refused``: not verified under ``--corun``; refused whenever it differs from SGLang's default.

Invariants: a field of a newer SGLang that no group names is refused (``refusals``) and fails the CPU test
that enumerates the fields; every refusal names the option, says "not verified under --corun" and gives
the fix. Pure functions: SGLang's defaults come in as a mapping (``defaults_of``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class Group:
    """Options that ``--corun`` treats alike, and why."""

    kind: str  # "free", "corun", "verified" or "refused"
    why: str
    names: tuple[str, ...]
    allows: Callable[[Any], bool] | None = None  # verified: the values served
    values: str = ""  # verified: those values, in words


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


GROUPS: tuple[Group, ...] = (
    # ------------------------------------------------------------------ free
    Group("free", "the model, its tokenizer, template and weights: the deployment the contract is stated for", _split("""
        model_path tokenizer_path tokenizer_mode tokenizer_backend skip_tokenizer_init load_format
        model_loader_extra_config trust_remote_code context_length revision json_model_override_args
        served_model_name weight_version chat_template hf_chat_template_name completion_template
        default_chat_template_kwargs allow_auto_truncate download_dir model_checksum delete_ckpt_after_loading
        decrypted_config_file custom_weight_loader weight_loader_disable_mmap weight_loader_prefetch_checkpoints
        weight_loader_prefetch_num_threads weight_loader_drop_cache_after_load
        remote_instance_weight_loader_seed_instance_ip remote_instance_weight_loader_seed_instance_service_port
        remote_instance_weight_loader_send_weights_group_ports remote_instance_weight_loader_backend
        remote_instance_weight_loader_start_seed_via_transfer_engine modelexpress_config
        checkpoint_engine_wait_weights_before_ready disable_outlines_disk_cache
    """)),
    Group("free", "serving plumbing: addresses, keys, TLS, timeouts, processes, warm-up", _split("""
        host port fastapi_root_path enable_http2 ssl_keyfile ssl_certfile ssl_ca_certs ssl_keyfile_password
        enable_ssl_refresh api_key admin_api_key file_storage_path nccl_port dist_timeout dist_init_addr
        base_gpu_id gpu_id_step watchdog_timeout soft_watchdog_timeout sleep_on_idle custom_sigquit_handler
        numa_node gc_threshold skip_server_warmup warmups enable_p2p_check pre_warm_nccl max_queued_requests
        engine_info_bootstrap_port weight_cache_socket weight_cache_timeout asr_max_buffer_seconds
        asr_max_concurrent_sessions
    """)),
    Group("free", "how outputs are sent and parsed: streaming, reasoning and tool-call parsing of the request's own text", _split("""
        stream_interval batch_notify_size stream_response_default_include_usage incremental_streaming_output
        reasoning_parser tool_call_parser enable_cache_report constrained_json_whitespace_pattern
        constrained_json_disable_any_whitespace
    """)),
    Group("free", "logs, metrics and traces", _split("""
        log_level log_level_http log_requests log_requests_level log_requests_format log_requests_target
        uvicorn_access_log_exclude_prefixes crash_dump_folder show_time_cost enable_metrics enable_mfu_metrics
        enable_metrics_for_all_schedulers load_snapshot_publish_interval tokenizer_metrics_custom_labels_header
        tokenizer_metrics_allowed_custom_labels extra_metric_labels bucket_time_to_first_token
        bucket_inter_token_latency bucket_e2e_request_latency prompt_tokens_buckets generation_tokens_buckets
        gc_warning_threshold_secs decode_log_interval enable_request_time_stats_logging kv_events_config
        enable_forward_pass_metrics forward_pass_metrics_worker_id forward_pass_metrics_ipc_name enable_trace
        trace_modules otlp_traces_endpoint export_metrics_to_file export_metrics_to_file_dir stat_loggers
        enable_profile_cuda_graph enable_cudagraph_gc enable_layerwise_nvtx_marker
    """)),
    # ------------------------------------------------------------------ corun
    Group("corun", "set or checked by --corun itself (config.defaults, refusals.REFUSALS)", _split("""
        max_running_requests prefill_max_requests disable_radix_cache enable_mixed_chunk attention_backend
        decode_attention_backend prefill_attention_backend sampling_backend random_seed cuda_graph_config
        cuda_graph_backend_decode cuda_graph_backend_prefill cuda_graph_max_bs_decode cuda_graph_bs_decode
        cuda_graph_bs_prefill disable_prefill_cuda_graph disable_decode_cuda_graph disable_cuda_graph
        disable_cuda_graph_padding enable_deterministic_inference rl_on_policy_target speculative_algorithm
        enable_dp_attention dp_size disaggregation_mode pp_size tp_size enable_nccl_nvls enable_symm_mem
        enable_mscclpp enable_torch_symm_mem enable_quant_communications enable_fused_moe_sum_all_reduce
        disable_custom_all_reduce enforce_disable_flashinfer_allreduce_fusion enable_two_batch_overlap
        enable_single_batch_overlap enable_pdmux enable_dynamic_chunking enable_lora lora_paths
        enable_return_hidden_states enable_torch_compile enable_hierarchical_cache
    """)),
    # ------------------------------------------------------------------ verified
    Group("verified", "the weights' dtype the suite ran", ("dtype",),
          lambda v: v in ("auto", "bfloat16"), "auto, bfloat16"),
    Group("verified", "the platform the suite ran", ("device",), lambda v: v in (None, "cuda"), "unset, cuda"),
    Group("verified", "the KV pool's size decides which requests run together, never a request's shapes; "
          "the suite ran roomy and congested pools", ("mem_fraction_static", "max_total_tokens"),
          lambda v: True, "any"),
    Group("verified", "a chunked prompt's chunks follow the chunk size alone (patch 0001); a prefill pack "
          "checks it against the pack", ("chunked_prefill_size",), lambda v: True, "any"),
    Group("verified", "the waiting queue's order the suite ran", ("schedule_policy",),
          lambda v: v == "fcfs", "fcfs"),
    Group("verified", "the MoE kernels the suite ran (SGLang's Triton fused MoE)", ("moe_runner_backend",),
          lambda v: v in ("auto", "triton"), "auto, triton"),
    Group("verified", "the grammar backend the suite's grammar scenarios run (a per-row bitmask, filled after the "
          "row's previous token is accepted; docs/requests.md)", ("grammar_backend",),
          lambda v: v in (None, "xgrammar"), "unset, xgrammar"),
    # ------------------------------------------------------------------ refused
    Group("refused", "quantization, KV-cache and GEMM precision or kernel choices", _split("""
        quantization quantization_param_path kv_cache_dtype enable_fp32_lm_head modelopt_quant
        modelopt_checkpoint_restore_path modelopt_checkpoint_save_path modelopt_export_path quantize_and_serve
        rl_quant_profile enable_tf32_matmul fp8_gemm_runner_backend fp4_gemm_runner_backend bf16_gemm_backend
        torchao_config disable_flashinfer_autotune flashinfer_autotune_skip_ops enable_fused_qk_norm_rope
        enable_precise_embedding_interpolation model_impl model_config_parser
    """)),
    Group("refused", "scheduling that preempts, delays or reorders running work", _split("""
        enable_priority_scheduling disable_priority_preemption default_priority_value
        abort_on_priority_when_disabled schedule_low_priority_values_first priority_scheduling_preemption_threshold
        retraction_policy schedule_conservativeness max_prefill_tokens num_continuous_decode_steps
        scheduler_recv_interval disable_overlap_schedule enable_prefill_delayer prefill_delayer_max_delay_passes
        prefill_delayer_token_usage_low_watermark prefill_delayer_forward_passes_buckets
        prefill_delayer_wait_seconds_buckets prefill_delayer_queue_min_ratio prefill_delayer_max_delay_ms
        min_free_slots_delay optimistic_prefill_attempts
    """)),
    Group("refused", "KV layouts, caches and offloading beside the plain KV pool", _split("""
        page_size swa_full_tokens_ratio disable_hybrid_swa_memory radix_eviction_policy
        prefill_only_disable_kv_cache enable_page_major_kv_layout enable_unified_memory disable_chunked_prefix_cache
        radix_cache_backend enable_streaming_session enable_session_radix_cache strip_thinking_cache
        hicache_ratio hicache_size hicache_write_policy hicache_io_backend hicache_mem_layout hicache_storage_backend
        hicache_storage_prefetch_policy hicache_storage_backend_extra_config enable_hisparse hisparse_config
        cpu_offload_gb offload_group_size offload_num_in_group offload_prefetch_step offload_mode enable_lmcache
        lmcache_config_file enable_flexkv flexkv_config_file kv_canary kv_canary_real_data kv_canary_sweep_interval
        enable_memory_saver enable_weights_cpu_backup enable_draft_weights_cpu_backup weight_cache_mode
    """)),
    Group("refused", "parallelism and collectives other than the verified TP sizes on NCCL's tree", _split("""
        nnodes node_rank dcp_size pp_max_micro_batch_size pp_async_batch_depth load_balance_method attn_cp_size
        moe_dp_size dwdp_size dcp_comm_backend dcp_replicate_q_proj enable_prefill_cp cp_strategy
        enable_dsa_cache_layer_split enable_dsa_prefill_context_parallel dsa_prefill_cp_mode
        enable_prefill_context_parallel prefill_cp_mode enable_cp_decode_attn_tp
        enable_dp_attention_local_control_broadcast enable_dp_lm_head enable_attn_tp_input_scattered
        disable_attn_tp_gather use_ray enable_flashinfer_allreduce_fusion flashinfer_allreduce_fusion_backend
        enable_aiter_allreduce_fusion enable_scattered_sconv
    """)),
    Group("refused", "expert parallelism and MoE variants", _split("""
        ep_size moe_a2a_backend flashinfer_mxfp4_moe_precision deepep_mode fuseep_mode deepep_dispatcher_output_dtype
        ep_num_redundant_experts ep_dispatch_algorithm init_expert_location enable_eplb eplb_algorithm
        eplb_rebalance_num_iterations eplb_rebalance_layers_per_chunk eplb_min_rebalancing_utilization_threshold
        expert_distribution_recorder_mode expert_distribution_recorder_buffer_size enable_expert_distribution_metrics
        deepep_config moe_dense_tp_size elastic_ep_backend enable_elastic_expert_backup mooncake_ib_device
        enable_waterfill ep_join_mode ep_join_rank_offset elastic_ep_initial_size max_ep_size elastic_ep_scale_timeout
        elastic_ep_rejoin disable_flashinfer_cutlass_moe_fp4_allgather disable_shared_experts_fusion
        enforce_shared_experts_fusion kt_weight_path kt_method kt_cpuinfer kt_threadpool_count kt_num_gpu_experts
        kt_max_deferred_experts_per_token
    """)),
    Group("refused", "speculative decoding", _split("""
        speculative_draft_model_path speculative_draft_model_revision speculative_draft_load_format
        speculative_num_steps speculative_eagle_topk speculative_num_draft_tokens speculative_dflash_block_size
        speculative_dspark_block_size speculative_dspark_sps_table_path speculative_dspark_confidence_sts_path
        speculative_dspark_align_verify_tokens_to_graph_tier speculative_accept_threshold_single
        speculative_accept_threshold_acc speculative_use_rejection_sampling speculative_token_map
        speculative_attention_mode speculative_draft_attention_backend speculative_draft_window_size
        speculative_moe_runner_backend speculative_moe_a2a_backend speculative_draft_model_quantization
        speculative_skip_dp_mlp_sync enable_multi_layer_eagle speculative_adaptive speculative_adaptive_config
        decoupled_spec_bind_endpoint decoupled_spec_connect_endpoints decoupled_spec_rank decoupled_spec_role
        spec_trace_dir speculative_ngram_min_bfs_breadth speculative_ngram_max_bfs_breadth
        speculative_ngram_match_type speculative_ngram_max_trie_depth speculative_ngram_capacity
        speculative_ngram_external_corpus_path speculative_ngram_external_sam_budget
        speculative_ngram_external_corpus_max_tokens decrypted_draft_config_file
    """)),
    Group("refused", "other attention, state-space and diffusion kernels and their graphs", _split("""
        mm_attention_backend dsa_prefill_backend dsa_decode_backend dsa_paged_mqa_logits_backend dsa_topk_backend
        mamba_backend triton_attention_reduce_in_fp32 triton_attention_num_kv_splits triton_attention_split_tile_size
        flashinfer_mla_disable_ragged enable_deepseek_v4_fp4_indexer cuda_graph_max_bs_prefill cuda_graph_tc_compiler
        debug_cuda_graph enable_torch_compile_debug_mode torch_compile_max_bs max_mamba_cache_size mamba_ssm_dtype
        mamba_max_states_per_path enable_mamba_cache_stochastic_rounding mamba_cache_philox_rounds
        mamba_full_memory_ratio mamba_radix_cache_strategy uses_mamba_radix_cache mamba_track_interval
        enable_int8_mamba_checkpoint int8_mamba_ckpt_size linear_attn_backend linear_attn_decode_backend
        linear_attn_prefill_backend linear_attn_verify_backend enable_linear_replayssm linear_replayssm_cache_len
        enable_linear_replayssm_spec dllm_algorithm dllm_algorithm_config dllm_fdfo enable_mis
    """)),
    Group("refused", "multimodal inputs, embeddings and encoder disaggregation", _split("""
        is_embedding enable_multimodal enable_broadcast_mm_inputs_process enable_prefix_mm_cache mm_enable_dp_encoder
        mm_process_config mm_processor_worker_num mm_io_worker_num limit_mm_data_per_request enable_mm_global_cache
        disable_fast_image_processor mm_feature_transport keep_mm_feature_on_device encoder_only language_only
        encoder_transfer_backend encoder_urls encoder_bootstrap_port encoder_register_urls
        enable_adaptive_dispatch_to_encoder
    """)),
    Group("refused", "prefill-decode disaggregation and multiplexing", _split("""
        disaggregation_transfer_backend disaggregation_bootstrap_port disaggregation_ib_device
        disaggregation_decode_enable_radix_cache disaggregation_decode_enable_offload_kvcache
        num_reserved_decode_tokens disaggregation_decode_extra_slots disaggregation_decode_polling_interval
        pdmux_config_path sm_group_num tbo_token_distribution_threshold
    """)),
    Group("refused", "LoRA adapters", _split("""
        enable_lora_overlap_loading max_lora_rank lora_target_modules max_loaded_loras max_loras_per_batch
        lora_eviction_policy lora_backend max_lora_chunk_size experts_shared_outer_loras lora_use_virtual_experts
        lora_strict_loading lora_drain_wait_threshold
    """)),
    Group("refused", "front ends and tokenizer paths that bypass the request check, and request defaults "
          "the suite did not run", _split("""
        tokenizer_worker_num detokenizer_worker_num smg_grpc_mode grpc_mode grpc_port sidecar sidecar_args
        smg_http_sidecar_port tool_server enable_strict_thinking sampling_defaults preferred_sampling_params
        enable_dynamic_batch_tokenizer dynamic_batch_tokenizer_batch_size dynamic_batch_tokenizer_batch_timeout
        enable_tokenizer_batch_encode disable_tokenizer_batch_decode
    """)),
    Group("refused", "code or outputs inside the forward pass: custom logit processors, hooks, returned "
          "internals, tensor dumps", _split("""
        enable_custom_logit_processor return_hidden_states_mode enable_return_routed_experts
        enable_return_indexer_topk forward_hooks msprobe_dump_config debug_tensor_dump_output_folder
        debug_tensor_dump_layers debug_tensor_dump_input_file
    """)),
)

KINDS = ("free", "corun", "verified", "refused")


def group_of(name: str) -> Group | None:
    """The group that classifies option ``name`` (a ``ServerArgs`` field), or None."""
    return _BY_NAME.get(name)


_BY_NAME: dict[str, Group] = {name: g for g in GROUPS for name in g.names}


def flag(name: str) -> str:
    """The command-line spelling of a ``ServerArgs`` field."""
    return "--" + name.replace("_", "-")


def defaults_of(args_class: type) -> dict[str, Any]:
    """SGLang's default for each field of the dataclass ``args_class`` (a field without one is left out)."""
    out = {}
    for f in dataclasses.fields(args_class):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def unclassified(names: Iterable[str]) -> list[str]:
    """The fields among ``names`` that no group classifies."""
    return [n for n in names if n not in _BY_NAME]


def refusals(args: Any, defaults: Mapping[str, Any]) -> list[str]:
    """One message per option of ``args`` that ``--corun`` does not serve: a refused or unclassified option
    that differs from SGLang's default (``defaults``), or a verified option outside its verified values.
    Options of the ``corun`` group are ``refusals.refusals``' to judge; ``free`` ones pass."""
    out = []
    for name, default in defaults.items():
        value = getattr(args, name, default)
        group = _BY_NAME.get(name)
        if group is None or group.kind == "refused":
            if value != default:
                why = group.why if group else "an option this release of corun-sglang does not know"
                out.append(f"{flag(name)} {value!r}: not verified under --corun ({why}). "
                           f"Fix: drop {flag(name)}, or serve without --corun")
        elif group.kind == "verified" and not group.allows(value):
            out.append(f"{flag(name)} {value!r}: not verified under --corun (verified: {group.values}). "
                       f"Fix: use one of those values, or serve without --corun")
    return out


def markdown(refusal_rows: Iterable[tuple[str, str]] = ()) -> str:
    """``docs/options.md``: every option by group; ``refusal_rows`` are ``refusals.REFUSALS``' (option, why)."""
    lines = [
        "# Server options under `--corun`",
        "",
        "Generated by `python -m corun_sglang.core.options > docs/options.md` from `corun_sglang/core/options.py`;",
        "a CPU test fails when this file and the table differ, or when SGLang has an option the table",
        "does not classify. Every option of SGLang 0.5.17's `ServerArgs` is in one group:",
        "",
        "- **free**: it cannot change what a request computes or the shapes it runs at; any value serves.",
        "- **set or checked by `--corun`**: chosen by `--corun`, or checked with the rules below.",
        "- **verified**: the values the GPU determinism suite served; any other value is refused.",
        "- **refused**: not verified under `--corun`; refused whenever it differs from SGLang's default,",
        "  with a message that names it and the fix. An option the table does not know is refused too.",
        "",
        "## Set or checked by `--corun`",
        "",
        ", ".join(f"`{flag(n)}`" for g in GROUPS if g.kind == "corun" for n in g.names) + ":",
        "`--corun` chooses these, or refuses them by these rules (checked again after SGLang resolves its options):",
        "",
        "| refuses | why |",
        "| --- | --- |",
        *[f"| {option} | {why} |" for option, why in refusal_rows],
        "",
        "## Verified values",
        "",
        "| option | served values | why |",
        "| --- | --- | --- |",
    ]
    for g in GROUPS:
        if g.kind == "verified":
            lines += [f"| `{flag(n)}` | {g.values} | {g.why} |" for n in g.names]
    for kind, title in (("free", "Free"), ("refused", "Refused unless left at SGLang's default")):
        lines += ["", f"## {title}", ""]
        for g in GROUPS:
            if g.kind == kind:
                lines += [f"- {g.why}: " + ", ".join(f"`{flag(n)}`" for n in g.names)]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    from corun_sglang.core.refusals import REFUSALS

    print(markdown((r.option, r.why) for r in REFUSALS), end="")
