"""Every SGLang hook target of corun-sglang, named once, with the reason it exists: the ledger of the
run-time patches (``docs/hooks.md``, written by ``ledger()``; the file patches have ``patches/README.md``).

``register()`` hands them to SGLang's ``HookRegistry`` (it runs from the
``sglang.srt.plugins`` entry point in the server and in every scheduler
subprocess). SGLang's loader only logs a target it cannot resolve, so
``unhooked()`` re-checks, in the calling process, that each target now
carries its adapter; ``--corun`` refuses to start otherwise.

Invariants:
- each ``Hook`` holds its adapter itself (this module imports the adapter modules), and says ``why`` (the
  CoRun invariant it serves), what ``sglang`` 0.5.17 does at the target that breaks or misses it, and what
  change ``upstream`` would let it go; none of the three is blank;
- ``Hook.adapter_name`` (``module:qualname``) names the object SGLang's registry is handed;
- one adapter is a name, ``Deferred``, imported only where its hook is registered: ``SYNTHETIC``'s, in
  ``tools/``, which the serving layer never imports. A process registers it only where its environment
  sets the synthetic-weights seed (``selected``), so a production process never imports ``tools/``;
- each adapter is a pass-through unless the server runs with ``--corun``.
"""

from __future__ import annotations

import dataclasses
import os
import pkgutil
from typing import Any

from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from corun_sglang.serving.adapters import (
    admission,
    contract,
    decode,
    logprobs,
    moe,
    operations,
    penalties,
    prefill,
    prefix,
    requests,
    seeds,
    startup,
    tp,
)
from corun_sglang.serving.server_args import CorunServerArgs


@dataclasses.dataclass(frozen=True)
class Deferred:
    """An adapter named ``"module:qualname"``, imported only when a process registers its hook: for an
    adapter in a layer the serving layer does not import."""

    name: str

    def resolve(self) -> Any:
        return pkgutil.resolve_name(self.name)


@dataclasses.dataclass(frozen=True)
class Hook:
    target: str  # dotted path in SGLang 0.5.17
    kind: HookType
    adapter: Any  # the hook callable or replacement class (a ``Deferred`` name only for ``SYNTHETIC``)
    _: dataclasses.KW_ONLY
    why: str  # the CoRun invariant the hook serves
    sglang: str  # what SGLang 0.5.17 does at the target that breaks or misses it
    upstream: str  # the change in SGLang that would let the hook go
    patch: str | None = None  # number of the patch that creates the target, if any

    def __post_init__(self):
        blank = [name for name in ("why", "sglang", "upstream") if not getattr(self, name).strip()]
        if blank:
            raise ValueError(f"hook on {self.target}: {', '.join(blank)} left blank")

    @property
    def adapter_name(self) -> str:
        """``module:qualname`` of the adapter."""
        if isinstance(self.adapter, Deferred):
            return self.adapter.name
        return f"{self.adapter.__module__}:{self.adapter.__qualname__}"

    def resolve(self) -> Any:
        """The object SGLang's registry is handed (a ``Deferred`` adapter is imported now)."""
        return self.adapter.resolve() if isinstance(self.adapter, Deferred) else self.adapter


# Texts shared by hooks that serve one invariant at several targets.
_SERVER_ARGS = dict(
    why="`--corun` and its options are fields of SGLang's own `ServerArgs`, so every entry point (CLI, "
        "`--config` YAML, `sgl.Engine`, `/server_info`, the pickled args of each scheduler) carries them, and "
        "`--corun` resolves the configuration, or refuses it, before any weights load.",
    upstream="Plugin-registered option groups on `ServerArgs` with a callback after SGLang resolves them, or a "
             "deterministic-serving mode in SGLang itself.",
)
_PREFIX = dict(
    why="`--corun-prefix-cache`: a cache hit gives the cold run's tokens and logprobs. The radix tree holds "
        "whole chunks of the fixed 1,024-token prefill grid only; a prompt identical up to its last token takes "
        "its stored tail; the pool's accounting counts the stored tails.",
    upstream="A prefix-cache policy interface: a match granularity (hits cut to a fixed chunk grid from the "
             "prompt's start) and a store of exact-prompt tails beside the tree, or a `RadixCache` subclass chosen "
             "by a server arg.",
)
_PREFIX_SGLANG = {
    "match_prefix": "Returns the longest cached prefix, ending at any token (page): the chunks a warm request "
                    "then prefills differ from its cold run's, and so do its bits.",
    "cache_unfinished_req": "Inserts each prefilled chunk into the tree wherever the chunk ended.",
    "cache_finished_req": "Inserts a finished request's whole sequence, prompt and decode KV, into the tree.",
    "evict": "Evicts the tree's leaves; it knows no KV outside the tree.",
    "evictable_size": "Counts the tree's unlocked tokens only.",
    "protected_size": "Counts the tree's locked tokens only.",
    "reset": "Empties the tree (`/flush_cache`, before it empties the KV pool); KV held outside the tree "
             "would outlive its slots.",
}
_MOE = dict(
    why="`--corun-moe-padding skip`: the padding rows of a decode graph get no expert, which saves their work "
        "and leaves every request's tokens and logprobs as they are with the padding routed.",
)
_SEND = dict(
    why="Request-bound RNG: every request leaves the tokenizer with its seed fixed, its own or one derived from "
        "`--random-seed`, its content and how many unseeded requests of that content came before; sample i of "
        "`n > 1` gets one derived from (seed, i).",
    sglang="Sends an unseeded request without a seed, and the `n > 1` children of a request share one "
           "`SamplingParams`, so they share its seed.",
    upstream="A seed policy in the tokenizer manager: derive a missing seed and a seed per `n > 1` sample.",
)
_TOP_LOGPROBS = dict(
    why="A request's top-k logprobs, ties included, depend on its own row: value descending, token id ascending, "
        "whatever k the batch's other rows ask for.",
    sglang="Runs one `torch.topk` at the largest k of the rows it holds and hands each request its first k: which "
           "of equal values comes first follows that k and the batch's shape.",
    upstream="A token-id tie-break in the top-k logprob helpers (a stable per-row top-k).",
)
_PENALTIES = dict(
    why="Under the overlap scheduler, a request's penalties at output k count exactly its outputs 0 .. k-1, "
        "whatever ran in between.",
    upstream="Feed the penalizers the step's resolved input ids at launch, as SGLang's non-overlap scheduler "
             "counts them.",
)
_FINGERPRINT = dict(
    why="Every response names the configuration it was computed in: each scheduler reports its weights digest, "
        "environment and resolved configuration, folded into one `system_fingerprint` (`/server_info`).",
    upstream="A `system_fingerprint` in SGLang (a digest of model, weights, GPU, software and configuration), or "
             "plugin fields in the scheduler's start handshake.",
)
_OPENAI = dict(
    why="Every OpenAI completion and chat completion, streamed or not, carries `system_fingerprint` and, on each "
        "choice, the seed its sample was drawn from, so a client can replay it.",
    sglang="Its OpenAI response models have no `system_fingerprint`, and their choices no seed.",
    upstream="Fill OpenAI's `system_fingerprint` and return each choice's seed.",
)
_METRICS = dict(
    upstream="A plugin metrics interface: extra gauges and counters published with the scheduler's stats.",
)
_REQUEST_CHECK = dict(
    upstream="A request-validation hook in the tokenizer manager that can refuse a request with a 400.",
)


HOOKS: tuple[Hook, ...] = (
    # the one switch and the start
    Hook(
        "sglang.srt.server_args.ServerArgs",
        HookType.REPLACE,
        CorunServerArgs,
        sglang="`ServerArgs` is a fixed dataclass whose fields make the CLI: a plugin can add no option and "
               "run no code when the options resolve.",
        **_SERVER_ARGS,
    ),
    Hook(
        "sglang.srt.entrypoints.engine.Engine.server_args_class",
        HookType.REPLACE,
        CorunServerArgs,
        sglang="`Engine.server_args_class` is bound to the original `ServerArgs` when `engine.py` is imported, so "
               "replacing the module's class does not reach `sgl.Engine(corun=True)`.",
        **_SERVER_ARGS,
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.__init__",
        HookType.AROUND,
        startup.scheduler_init,
        why="Every process that serves `--corun` passes the startup check (versions, patches, hooks, bindings) "
            "before it loads weights, not only the one that parsed the options, and runs its GEMMs through "
            "`--corun-gemm-library` (cuBLASLt by default), which decides the smallest verifiable decode tier.",
        sglang="A scheduler subprocess starts from the pickled `ServerArgs` and loads its plugins itself; nothing "
               "checks that this process carries their hooks.",
        upstream="A plugin check that SGLang runs in every scheduler process before loading the model, and that "
                 "can refuse the start.",
    ),
    Hook(
        "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.__init__",
        HookType.AFTER,
        startup.decode_graph_runner_init,
        why="Fixed-shape decode: the decode CUDA graphs are exactly N and the served tiers, and every record served "
            "(decode tiers, prefill pack) was verified in this environment.",
        sglang="Clamps the configured graph batch sizes to the request pool and its alignment "
               "(`get_batch_sizes_to_capture`), capturing other sizes than asked without a word.",
        upstream="A strict `--cuda-graph-bs` that refuses sizes it cannot capture, and a hook point after capture.",
    ),
    # isolated prefill, full-sequence admission, no retraction
    Hook(
        "sglang.srt.managers.schedule_policy.PrefillAdder.chunked_req_token_budget",
        HookType.AROUND,
        admission.chunked_req_token_budget,
        why="Isolated prefill: the chunks of a chunked prompt follow the chunk size alone, so its prefill "
            "numerics do not depend on its co-runners.",
        sglang="Sizes the next chunk as `min(rem_chunk_tokens, rem_total_tokens)`: free KV less what the running "
               "requests reserve, which follows the co-runners.",
        upstream="The hook point of patch 0001, with an option that makes chunk boundaries independent of free "
                 "memory.",
        patch="0001",
    ),
    Hook(
        "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req",
        HookType.AROUND,
        admission.add_one_req,
        why="Full-sequence admission: a request starts only when the KV pool holds its whole sequence beside every "
            "running one's, alone in its prefill batch or in a verified pack, so no decode step ever retracts.",
        sglang="Counts running requests' remaining outputs scaled by an adaptive `new_token_ratio` (retracting "
               "when the estimate falls short) and has no rule for which prompts may share a prefill beyond "
               "`--prefill-max-requests`.",
        upstream="A pluggable admission policy for `PrefillAdder`, with a full-reservation mode and a rule for "
                 "which prompts may share a prefill batch.",
    ),
    # the deterministic prefix cache (--corun-prefix-cache)
    *(Hook(f"sglang.srt.mem_cache.radix_cache.RadixCache.{name}", HookType.AROUND, getattr(prefix, name),
           sglang=does, **_PREFIX)
      for name, does in _PREFIX_SGLANG.items()),
    Hook(
        "sglang.srt.managers.schedule_policy.PrefillAdder.add_chunked_req",
        HookType.AROUND,
        prefix.add_chunked_req,
        why="`--corun-prefix-cache`: the next chunk of an in-flight prefill ends on the request's own grid "
            "boundary, as in its cold run, whatever its cache hit was.",
        sglang="Sizes the next chunk by the chunk budget alone, measured from wherever the cache hit ended.",
        upstream="Chunk boundaries from a scheduler policy (a fixed grid from the prompt's start).",
    ),
    # packed prefill (--corun-prefill-pack, --corun-prefill-pack-wait)
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill",
        HookType.AROUND,
        admission.prefill_wait,
        why="`--corun-prefill-pack-wait W`: a pack that full-sequence admission would cut short, or that the queue "
            "leaves underfilled while at least half of N run, waits up to W decode steps, so waiting prompts are "
            "admitted a pack at a time; tokens and logprobs are unaffected.",
        sglang="Runs a prefill as soon as one waiting request fits, admitting prompts one at a time as KV frees; "
               "its prefill delayer (`--enable-prefill-delayer`) waits on data-parallel balance, token usage and "
               "queue length only.",
        upstream="A pluggable criterion for the prefill delayer.",
    ),
    Hook(
        "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.__init__",
        HookType.AFTER,
        prefill.prefill_graph_runner_init,
        why="Packed prefill: the pack's token count is the smallest prefill graph, so every packable prefill "
            "replays one shape.",
        sglang="Captures the token counts its CUDA-graph configuration resolves to; nothing requires one of them.",
        upstream="A server arg naming prefill graph sizes that must be captured, refusing the start otherwise.",
    ),
    Hook(
        "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.can_replay_locally",
        HookType.AROUND,
        prefill.prefill_replay,
        why="Packed prefill: a prefill of the shortest packable prompt's length up to the pack replays the pack's "
            "graph, so a prompt runs at one shape alone or packed.",
        sglang="Pads a prefill to the nearest captured token count and runs it eagerly when that more than "
               "doubles it (`_MAX_PREFILL_CUDA_GRAPH_PADDING_FACTOR`), so a short prompt's shape follows its "
               "length.",
        upstream="A configurable padding limit for prefill graphs (pad up to a given capture, however far).",
    ),
    Hook(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_extend",
        HookType.AROUND,
        prefill.eager_prefill,
        why="Packed prefill: a prefill of fresh prompts that should replay the pack's graph never runs eagerly at "
            "its own size; the server stops instead.",
        sglang="Runs a prefill eagerly whenever no graph replays it, without a word.",
        upstream="A strict graph mode that raises instead of falling back to eager.",
    ),
    Hook(
        "sglang.srt.layers.attention.flashinfer_backend.FlashInferIndicesUpdaterPrefill.call_begin_forward",
        HookType.AROUND,
        prefill.prefill_plan,
        why="Packed prefill: every FlashInfer prefill plan runs without split-KV, so a prompt's KV split follows "
            "no other prompt of its pack; a pack resting on FA3's fixed query tile stops at a prefill planned on "
            "another kernel.",
        sglang="Plans prefill with split-KV (a fixed split size in deterministic mode); `call_begin_forward` takes "
               "no argument that reaches the plan's `disable_split_kv`, and nothing reports which kernel a plan "
               "chose.",
        upstream="A prefill `disable_split_kv` option in the FlashInfer backend, and the planned kernel exposed.",
    ),
    Hook(
        "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head",
        HookType.AROUND,
        prefill.lm_head_rows,
        why="Packed prefill: a prefill's LM head runs on at least the pack's rows (padded), so its GEMM's shape "
            "does not follow how many prompts or logprob positions share the batch.",
        sglang="Runs the LM head GEMM on exactly the rows the batch needs, so the kernel chosen, and a row's "
               "logits, change with the co-runners.",
        upstream="A minimum row count for the LM head GEMM outside CUDA graphs (and, for cross-TP invariance, "
                 "an LM head GEMM per vocabulary shard).",
    ),
    Hook(
        "sglang.srt.managers.schedule_batch.ScheduleBatch.retract_decode",
        HookType.AROUND,
        admission.retract_decode,
        why="No retraction: full-sequence admission rules it out, and if it would run the server stops rather "
            "than prefill a request again among other co-runners.",
        sglang="Retracts decode requests when KV runs short and queues them again, to be prefilled again later.",
        upstream="A server arg that turns decode retraction off (with full-reservation admission).",
    ),
    # fixed-shape decode without split-KV
    Hook(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_decode",
        HookType.AROUND,
        decode.eager_decode,
        why="Fixed-shape decode: every decode step replays a captured graph of N slots (or a verified tier), "
            "never runs eagerly at the batch's own size.",
        sglang="Runs a decode step eagerly whenever no captured graph holds it, without a word.",
        upstream="A strict graph mode that raises instead of falling back to eager.",
    ),
    Hook(
        "sglang.srt.layers.attention.flashinfer_backend.should_use_tensor_core",
        HookType.AROUND,
        decode.use_tensor_core,
        why="Decode attention without split-KV: FlashInfer decode runs on its tensor-core (prefill) kernels, the "
            "only decode plan that can turn split-KV off.",
        sglang="Picks tensor cores from the GQA group size and KV dtype (or `SGLANG_FLASHINFER_USE_TENSOR_CORE`), "
               "so models with small query groups decode on the CUDA-core kernels.",
        upstream="A backend option that forces the tensor-core decode plan (deterministic mode sets it, only "
                 "together with its batch-invariant split sizes).",
    ),
    Hook(
        "sglang.srt.layers.attention.flashinfer_backend.FlashInferIndicesUpdaterDecode.call_begin_forward",
        HookType.AROUND,
        decode.decode_plan,
        why="Every FlashInfer decode plan (capture, replay, eager) runs without split-KV, so a request's attention "
            "reduction does not follow the batch; a graph plan's surplus blocks recompute the batch's cheapest "
            "request.",
        sglang="Plans decode with split-KV (deterministic mode turns it off in CUDA graphs only), and leaves the "
               "surplus blocks of a graph's fixed grid, unmasked without split-KV, pointing outside the batch.",
        upstream="A decode `disable_split_kv` option for every path, and a FlashInfer plan that keeps a graph's "
                 "surplus blocks inside the batch.",
    ),
    # padding rows of a CUDA graph skip the MoE experts (--corun-moe-padding skip)
    Hook(
        "sglang.srt.model_executor.forward_batch_info.enable_num_token_non_padded",
        HookType.AROUND,
        moe.count_real_tokens,
        sglang="Keeps the real token count of a graph replay (`num_token_non_padded`) only under expert "
               "parallelism.",
        upstream="Keep `num_token_non_padded` wherever padding rows may skip the experts.",
        **_MOE,
    ),
    Hook(
        "sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM.forward",
        HookType.AROUND,
        moe.moe_model_forward,
        sglang="Qwen3-MoE hands its MoE layers the padded-token count on the DeepEP path only.",
        upstream="Models hand the real token count to every MoE layer's router.",
        **_MOE,
    ),
    Hook(
        "sglang.srt.layers.moe.topk.TopK.forward_cuda",
        HookType.AROUND,
        moe.topk_padding,
        sglang="Routes padding rows to their top-k experts like requests.",
        upstream="A `TopK` option that gives rows past the real token count expert id -1.",
        **_MOE,
    ),
    Hook(
        "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe._fused_moe_kernel_sequence",
        HookType.AROUND,
        moe.fused_moe_filter,
        sglang="Turns the fused-MoE kernels' expert filter on only where experts are sharded, so an unrouted block "
               "still reads expert weights.",
        upstream="The filter on whenever any row may have no expert.",
        **_MOE,
    ),
    # the same bits at every TP size dividing K (--corun-tp-invariant K): parallel GEMMs as K fixed shards
    Hook(
        "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
        HookType.AFTER,
        tp.shard_model,
        why="Cross-TP invariance: once the weights load, each parallel linear layer's rows or columns are laid out "
            "as the K/t shards this rank computes, each shard the weight a rank of a TP-K server holds.",
        sglang="Holds one weight per rank, of the rank's 1/t of the layer, which the rank multiplies in one GEMM.",
        upstream="A load-time layout hook for parallel linear layers, or a TP-invariant linear method.",
    ),
    Hook(
        "sglang.srt.layers.linear.ColumnParallelLinear.forward",
        HookType.AROUND,
        tp.column_forward,
        why="Cross-TP invariance: a column-parallel layer (QKV, gate-up) runs one GEMM per shard, of the shape a "
            "TP-K rank runs, whatever this server's TP size.",
        sglang="Runs one GEMM over the rank's rows, whose shape, and so kernel and reduction, follow the TP size.",
        upstream="A linear method that splits a GEMM into a fixed number of shards (the TBIK approach).",
    ),
    Hook(
        "sglang.srt.layers.linear.RowParallelLinear.forward",
        HookType.AROUND,
        tp.row_forward,
        why="Cross-TP invariance: a row-parallel layer (attention output, MLP down) runs one GEMM partial per "
            "shard, gathers all K partials and sums them in float32 in shard order on every rank.",
        sglang="Runs one GEMM over the rank's input columns, then an all-reduce whose number of terms and order "
               "follow the TP size (a single GEMM at TP 1).",
        upstream="A reduction with a fixed shard count and order, independent of the TP size, as an all-reduce "
                 "option.",
    ),
    Hook(
        "sglang.srt.model_executor.model_runner_components.weight_updater._unsupported_derived_weight_cache_error",
        HookType.AROUND,
        tp.weight_updates,
        why="Cross-TP invariance: an online weight update is refused while a rank holds weights regrouped into "
            "shards (TP size below K), which SGLang's loaders would overwrite in their own layout.",
        sglang="Writes an update in place through each layer's weight loader, in the layout it loaded.",
        upstream="A post-update hook (SGLang already asks this check of derived-weight caches), so the shards "
                 "can be laid out again after an update.",
    ),
    # (the LM head's vocabulary shards: prefill.lm_head_rows runs each head GEMM through tp.lm_head)
    # request-bound RNG
    Hook(
        "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.adjusted_from_schedule_batch",
        HookType.AROUND,
        seeds.batch_seeds,
        why="Request-bound RNG: every row of a batch is sampled from its request's seed (its content's derived "
            "seed if none), so its draw depends on its seed and position only.",
        sglang="Builds per-row seeds only in deterministic mode, 42 for every unseeded row; elsewhere its samplers "
               "draw from the device's generator, whose state follows the batch.",
        upstream="Per-request seeds in every mode, derived rather than constant for an unseeded request, and a "
                 "sampler option that draws from them.",
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._send_one_request",
        HookType.AROUND,
        seeds.send_one_request,
        **_SEND,
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._send_batch_request",
        HookType.AROUND,
        seeds.send_batch_request,
        **_SEND,
    ),
    # per-request logits transforms: top-k logprobs in a row-fixed order, penalties fed the request's own outputs
    Hook(
        "sglang.srt.layers.logprob_processor.get_top_logprobs_raw",
        HookType.AROUND,
        logprobs.ranked_top_logprobs,
        **_TOP_LOGPROBS,
    ),
    Hook(
        "sglang.srt.layers.logprob_processor.get_top_logprobs_chunk",
        HookType.AROUND,
        logprobs.ranked_top_logprobs,
        **_TOP_LOGPROBS,
    ),
    Hook(
        "sglang.srt.layers.logprob_processor.get_token_ids_logprobs",
        HookType.AROUND,
        logprobs.tensor_token_ids_logprobs,
        why="A request's `token_ids_logprob` values are a gather from its own logprob row, served whatever its "
            "co-runners ask for; a batch that mixes requests asking for them with requests that do not is served.",
        sglang="Keeps each asking row's values as a device tensor and writes a bare `[]` for each other row; "
               "`move_logprobs_to_cpu` and the decode result path then call `.tolist()` on every entry, and the "
               "scheduler dies on the first mixed batch (sglang#35705, sglang#34719).",
        upstream="Call `.tolist()` only on tensors in the result processors (sglang#35852, sglang#35052), or write "
                 "an empty tensor for a row that asked for nothing.",
    ),
    Hook(
        "sglang.srt.managers.schedule_batch.ScheduleBatch.cumulate_penalty_output_tokens",
        HookType.AROUND,
        penalties.prepared_feed,
        sglang="With the overlap scheduler, feeds `req.output_ids[-1]` while the step is prepared, before the "
               "previous step's result is processed: the token of two steps back, or of one when a co-runner's "
               "prefill ran in between.",
        **_PENALTIES,
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler._forward_isolation",
        HookType.AROUND,
        penalties.launch_feed,
        sglang="Feeds no penalizer at a step's launch (`_forward_isolation`, entered once the step's input ids "
               "are resolved), the one point where each row's previous output is known.",
        **_PENALTIES,
    ),
    # the contract as clients see it: system_fingerprint and each sample's seed on every response
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.get_init_info",
        HookType.AFTER,
        contract.scheduler_info,
        sglang="A scheduler's start info holds its status, token limits and start time only.",
        **_FINGERPRINT,
    ),
    Hook(
        "sglang.srt.entrypoints.engine.Engine._set_startup_time",
        HookType.AFTER,
        contract.hand_over,
        sglang="Hands the schedulers' start infos to the tokenizer process with no step for a plugin; "
               "`_set_startup_time` is the first call that holds them and the tokenizer manager together.",
        **_FINGERPRINT,
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._wait_one_response",
        HookType.AROUND,
        contract.stamp_outputs,
        why="Every output of a generate request carries the server's `system_fingerprint` and the seed the request "
            "was sent with.",
        sglang="An output's `meta_info` carries neither.",
        upstream="`system_fingerprint` and the sampling seed in `meta_info`.",
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._build_completion_response",
        HookType.AROUND,
        contract.completion_response,
        **_OPENAI,
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._build_chat_response",
        HookType.AROUND,
        contract.chat_response,
        **_OPENAI,
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._generate_completion_stream",
        HookType.AROUND,
        contract.completion_stream,
        **_OPENAI,
    ),
    Hook(
        "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._generate_chat_stream",
        HookType.AROUND,
        contract.chat_stream,
        **_OPENAI,
    ),
    # reservations made visible (--corun-default-max-new-tokens, corun_ metrics), contract stops
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.init_req_max_new_tokens",
        HookType.AROUND,
        admission.default_max_new_tokens,
        why="Full-sequence admission reserves KV for prompt + `max_new_tokens`: "
            "`--corun-default-max-new-tokens` bounds the reservation of a request that sets none, so more of "
            "them run at once.",
        sglang="Gives a request without `max_new_tokens` the rest of the context, capped by the pool.",
        upstream="A server arg for the default `max_new_tokens`.",
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.init_metrics_reporter",
        HookType.AFTER,
        operations.scheduler_reservations,
        why="Full-sequence admission's cost is visible: a scheduler logs how many requests without `max_tokens` "
            "run at once and registers the `corun_` metrics.",
        sglang="Knows nothing of full-sequence reservations; `init_metrics_reporter` is its override point for a "
               "specialized reporter.",
        **_METRICS,
    ),
    Hook(
        "sglang.srt.observability.metrics_collector.SchedulerMetricsCollector.log_stats",
        HookType.AFTER,
        operations.publish_reservations,
        why="The `corun_` gauges (reservations of admitted and waiting requests, the KV pool, the step tally) are "
            "published whenever SGLang publishes its own scheduler stats.",
        sglang="Publishes its own stats only.",
        **_METRICS,
    ),
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.run_event_loop",
        HookType.AROUND,
        operations.event_loop,
        why="Never silently nondeterministic: a `CorunContractError` stops the server, after it is counted, "
            "logged on one line and answered with its cause to every request the scheduler holds.",
        sglang="A scheduler exception logs a traceback and kills the process tree; requests in flight see their "
               "connection close.",
        upstream="A fatal-error hook in the scheduler that answers the requests in flight before the crash path.",
    ),
    # every request checked in the tokenizer process (``requests_check``)
    Hook(
        "sglang.srt.managers.io_struct.GenerateReqInput.normalize_batch_and_arguments",
        HookType.AROUND,
        requests.check_n,
        why="Fail closed per request: `n` is an integer of 1 or more before SGLang expands a request into its "
            "samples.",
        sglang="Expands a request by its `n` as given, whatever its type or value.",
        **_REQUEST_CHECK,
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request",
        HookType.AROUND,
        requests.check_request,
        why="Fail closed per request: every generate request is checked against the request table "
            "(`requests_check`) before it reaches the scheduler; a parameter not verified under `--corun` or a "
            "malformed seed gets a 400 that names it and the fix.",
        sglang="Checks the prompt and output lengths against the context; every sampling parameter it parses is "
               "served.",
        **_REQUEST_CHECK,
    ),
    # step shapes counted for the corun_ metrics (decode graph sizes, padding, prefill kinds)
    Hook(
        "sglang.srt.managers.scheduler.Scheduler.run_batch",
        HookType.AFTER,
        operations.count_step,
        why="The `corun_` metrics count the shapes fixed-shape decode and packed prefill run: decode steps by "
            "graph size with their padding slots, prefills by kind.",
        sglang="Counts no graph sizes, padding slots or prefill kinds.",
        **_METRICS,
    ),
)

#: Seeded random-normal weights drawn in place by SGLang's dummy loader (tests and
#: benchmarks). Registered only in a process whose environment sets
#: ``probes.launch.SEED_ENV`` (``selected``): a production server registers no
#: testing hook, and never imports ``tools/``. Outside the ``--corun`` contract, so
#: ``unhooked()`` does not check it; ``probes.launch.Server`` checks that a server
#: started with that variable logged its draw.
SYNTHETIC = Hook(
    "sglang.srt.model_loader.loader.DummyModelLoader.load_model",
    HookType.AFTER,
    Deferred("corun_sglang.tools.synthetic:fill_dummy_model"),
    why="Tests and benchmarks run on seeded random-normal weights, whose logits have the spread that lets "
        "batch-dependent numerics reach the tokens and logprobs; outside the `--corun` contract.",
    sglang="`--load-format dummy` fills every weight with uniform(-1e-3, 1e-3): the logits come out nearly flat.",
    upstream="`--model-loader-extra-config` for the dummy loader (a seed and a distribution per kind of "
             "parameter), which it refuses today.",
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
        adapter = hook.resolve()
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
        if not _carries(current, hook.resolve()):
            problems.append(f"{hook.target}: resolved but not hooked")
    return problems


# ------------------------------------------------------------------------------------------- docs/hooks.md


def _section(hook: Hook) -> list[str]:
    lines = [
        f"### `{hook.target}`",
        "",
        f"- **Kind:** {hook.kind.value}",
        f"- **Adapter:** `{hook.adapter_name}`",
    ]
    if hook.patch is not None:
        lines.append(f"- **Patch:** {hook.patch}, which creates the target ([ledger](../patches/README.md))")
    return lines + [
        f"- **Why:** {hook.why}",
        f"- **SGLang 0.5.17:** {hook.sglang}",
        f"- **Upstream:** {hook.upstream}",
        "",
    ]


def ledger() -> str:
    """``docs/hooks.md``: every hook of ``HOOKS`` and ``SYNTHETIC``, with its adapter, why, what SGLang does at
    its target and what would let it go upstream. Names every adapter without importing a ``Deferred`` one."""
    from corun_sglang.probes.launch import SEED_ENV

    lines = [
        "# SGLang hooks: the ledger of the run-time patches",
        "",
        "Generated by `python -m corun_sglang.serving.hooks > docs/hooks.md` from `corun_sglang/serving/hooks.py`;",
        "a CPU test fails when this file and the table differ.",
        "",
        "corun-sglang changes SGLang 0.5.17 at run time through SGLang's plugin hooks (`HookRegistry`): the",
        "`corun` plugin registers every hook below in every SGLang process (the server, `sgl.Engine` and each",
        "scheduler), and `--corun` refuses to start where a target does not carry its adapter. Without `--corun`",
        "each adapter is a pass-through: SGLang computes what it computes without corun-sglang. The one change no",
        "hook reaches is a file patch, with its own ledger: [patches/README.md](../patches/README.md).",
        "",
        "Each hook says **why** it exists (the CoRun invariant it serves), what **SGLang 0.5.17** does at its",
        "target that breaks or misses that invariant, and what change **upstream** would let it go. Kinds: `around`",
        "wraps the target (the adapter calls the original), `after` sees its result, `replace` substitutes a class.",
        "",
        f"## Hooks ({len(HOOKS)})",
        "",
        "| target | kind | adapter |",
        "| --- | --- | --- |",
        *[f"| `{h.target}` | {h.kind.value} | `{h.adapter_name}` |" for h in HOOKS],
        "",
    ]
    for hook in HOOKS:
        lines += _section(hook)
    lines += [
        "## Testing only",
        "",
        f"Registered only in a process whose environment sets `{SEED_ENV}` (tests and benchmarks on seeded",
        "random-normal weights); its adapter lives in `corun_sglang/tools/`, which a production process never",
        "imports, so the table names it and imports it only where it is registered.",
        "",
        *_section(SYNTHETIC),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(ledger(), end="")
