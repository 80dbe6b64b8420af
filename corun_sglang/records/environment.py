"""Verified records: the environment a record holds for, and reading a record file against its schema.

``corun-sglang verify-tiers`` and ``verify-prefill-pack`` each write a record of what they verified
on one model, GPU and software stack. A ``--corun`` server serves a record only in the environment
it was verified in: ``environment()`` is everything a GEMM, attention or MoE kernel (its choice or
its numerics) can depend on besides the batch, and ``mismatches()`` names each field that differs.

Invariants:
- the environment is a flat mapping of str to str, int, float, bool or None (``Environment``), with
  the value of every ``NUMERIC_OPTIONS`` server option, ``dtype`` being the resolved torch dtype;
- a record file is read only through its schema (``read``): a strict pydantic model that refuses
  unknown keys, wrong types (no string, float or bool where an integer belongs) and values out of
  range, with an error naming the file, each field, the cause and the fix; nothing is coerced.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Iterable, Mapping, Union

import pydantic

from corun_sglang.core.errors import RecordError

#: Distributions whose versions are part of a record's environment (absent ones are left out).
DISTRIBUTIONS = (
    "corun-sglang", "sglang", "sgl-kernel", "flashinfer-python", "torch", "triton",
    "nvidia-cublas", "nvidia-cublas-cu12", "nvidia-cublas-cu13",
)

#: Environment variables that steer which GEMM kernels cuBLAS and cuBLASLt pick (their workspace sizes).
BLAS_ENV = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")

#: SGLang ``ServerArgs`` options that can change which kernel a GEMM, attention or MoE layer runs, or
#: its numerics: the model's weights and dtypes, the kernel backends, how layers are split across GPUs
#: and the collectives that finish a split GEMM, and the expert layout. Options ``--corun`` refuses are
#: listed too, so that lifting a refusal keeps the environment whole. The CUDA graph options are not: a
#: decode tiers record compares one server's decode graphs with each other, every step's input coming
#: from that server's one prefill path (eager, or its prefill graph), so the prefill graph changes no
#: verdict; and a served pack needs the prefill graph, which ``config`` requires by itself.
#: ``--corun`` options that change which GEMMs a layer runs; part of the environment only where set.
CORUN_NUMERIC_OPTIONS = ("corun_tp_invariant",)

NUMERIC_OPTIONS = (
    # the model, its weights and dtypes
    "json_model_override_args", "model_impl", "load_format", "dtype", "quantization",
    "quantization_param_path", "modelopt_quant", "quantize_and_serve", "rl_quant_profile", "torchao_config",
    "kv_cache_dtype", "mamba_ssm_dtype", "enable_fp32_lm_head", "enable_tf32_matmul",
    "enable_precise_embedding_interpolation",
    # GEMM kernels
    "bf16_gemm_backend", "fp8_gemm_runner_backend", "fp4_gemm_runner_backend", "disable_flashinfer_autotune",
    "flashinfer_autotune_skip_ops", "enable_fused_qk_norm_rope", "enable_torch_compile", "torch_compile_max_bs",
    "enable_deterministic_inference", "rl_on_policy_target", "enable_lora", "lora_backend",
    # attention kernels and the KV cache they read
    "attention_backend", "decode_attention_backend", "prefill_attention_backend", "mm_attention_backend",
    "page_size", "enable_page_major_kv_layout", "triton_attention_reduce_in_fp32",
    "triton_attention_num_kv_splits", "triton_attention_split_tile_size", "flashinfer_mla_disable_ragged",
    "dsa_prefill_backend", "dsa_decode_backend", "dsa_paged_mqa_logits_backend", "dsa_topk_backend",
    "enable_deepseek_v4_fp4_indexer", "mamba_backend", "linear_attn_backend", "linear_attn_decode_backend",
    "linear_attn_prefill_backend", "enable_mis",
    # how layers are split across GPUs, and the collectives that finish a split GEMM
    "tp_size", "dp_size", "enable_dp_attention", "enable_dp_lm_head", "attn_cp_size", "dcp_size", "dwdp_size",
    "moe_dp_size", "moe_dense_tp_size", "enable_prefill_context_parallel", "prefill_cp_mode",
    "enable_attn_tp_input_scattered", "enable_scattered_sconv", "enable_two_batch_overlap",
    "enable_single_batch_overlap", "disable_custom_all_reduce", "enable_nccl_nvls", "enable_symm_mem",
    "enable_mscclpp", "enable_torch_symm_mem", "enable_quant_communications",
    "enable_flashinfer_allreduce_fusion", "enforce_disable_flashinfer_allreduce_fusion",
    "flashinfer_allreduce_fusion_backend", "enable_aiter_allreduce_fusion",
    # MoE kernels and the expert layout
    "moe_runner_backend", "moe_a2a_backend", "ep_size", "flashinfer_mxfp4_moe_precision", "deepep_mode",
    "deepep_config", "deepep_dispatcher_output_dtype", "ep_num_redundant_experts", "ep_dispatch_algorithm",
    "init_expert_location", "enable_eplb", "disable_shared_experts_fusion", "enforce_shared_experts_fusion",
    "disable_flashinfer_cutlass_moe_fp4_allgather", "enable_fused_moe_sum_all_reduce", "kt_method",
    "kt_num_gpu_experts",
    # speculative decoding's forward passes and draft model
    "speculative_algorithm", "speculative_moe_runner_backend", "speculative_moe_a2a_backend",
    "speculative_draft_model_quantization",
)

#: Model config keys that name or date a checkpoint without changing what it computes.
_NOT_THE_MODEL = ("_name_or_path", "name_or_path", "transformers_version", "_commit_hash")

#: The server log line prefix that carries a candidate server's environment to ``verify-tiers`` and
#: ``verify-prefill-pack``.
ENVIRONMENT_LOG = "corun decode tiers environment: "


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (str, int)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    raise ValueError("an environment field holds a string, a finite number, a boolean or null")


#: A value of an environment field.
Value = Annotated[Union[str, bool, int, float, None], pydantic.BeforeValidator(_scalar)]

#: A record's environment: flat, one JSON scalar per field.
Environment = dict[str, Value]

#: The largest N, pack or prompt length a record may name.
MAX_SIZE = 65536

#: A size a record names: an integer from 1 to ``MAX_SIZE``.
Size = Annotated[int, pydantic.Field(ge=1, le=MAX_SIZE)]

#: What a record file's schema refuses: unknown keys, and any value not already of the field's type.
STRICT = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


def read(path: str | Path, schema: type[pydantic.BaseModel], option: str, what: str, fix: str,
         error: type[RecordError] = RecordError) -> pydantic.BaseModel:
    """The record in ``path`` parsed by ``schema``; ``error`` naming ``option``, the file, each refused field,
    its cause and ``fix``."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{option} {path}: cannot read it ({exc.strerror}). Fix: {fix}") from None
    try:
        return schema.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise error(f"{option} {path}: not a {what} ({refusals(exc)}). Fix: {fix}") from None


def refusals(exc: pydantic.ValidationError) -> str:
    """One clause per refused field: where it is, what it holds, why it is refused."""
    out = []
    for err in exc.errors(include_url=False):
        if err["type"] == "json_invalid":
            out.append(f"not JSON: {err['ctx']['error']}" if "ctx" in err else "not JSON")
            continue
        where = ".".join(str(part) for part in err["loc"]) or "the record"
        if err["type"] == "missing":
            out.append(f"{where}: missing")
        elif err["type"] == "extra_forbidden":
            out.append(f"{where}: not a field of this record")
        else:
            cause = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
            out.append(f"{where} {_short(err['input'])}: {cause[0].lower()}{cause[1:]}")
    return "; ".join(out)


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def model_digest(config: Mapping[str, Any]) -> str:
    """A digest of a model config (``PretrainedConfig.to_dict()``) that ignores its name and path."""
    kept = {k: v for k, v in config.items() if k not in _NOT_THE_MODEL}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def versions(names: Iterable[str] = DISTRIBUTIONS) -> dict[str, str]:
    """Installed versions of ``names`` (those installed)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def blas_setup(environ: Mapping[str, str] | None = None, library: str | None = None) -> dict[str, Any]:
    """The BLAS library PyTorch runs unquantized GEMMs through and the ``BLAS_ENV`` settings (None where unset).
    The library is this process's (``torch.backends.cuda.preferred_blas_library``, which
    ``TORCH_BLAS_PREFER_CUBLASLT`` sets and a ``--corun`` scheduler sets to ``--corun-gemm-library``), or
    ``library`` where given: the one a launcher's schedulers will run."""
    import torch

    environ = os.environ if environ is None else environ
    library = library or torch.backends.cuda.preferred_blas_library().name.lower()
    return {"library": library, **{name: environ.get(name) for name in BLAS_ENV}}


def flat(value: Any) -> Value:
    """``value`` as an environment field: a JSON scalar as it is (a non-finite float as its text), an enum as
    its value, anything else as its sorted JSON text."""
    value = getattr(value, "value", value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def environment(model_config: Mapping[str, Any], dtype: Any, server_args: Any, gpu: str, cuda: str | None,
                installed: Mapping[str, str], blas: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a GEMM, attention or MoE kernel can depend on besides the batch, as a flat JSON-able
    mapping: the model, every ``NUMERIC_OPTIONS`` option of ``server_args`` (``dtype`` the model's resolved
    one), the GPU and CUDA, ``blas`` (``blas_setup()``: the library and its workspace choose the GEMM
    kernels) and the ``installed`` versions."""
    return {
        "model": model_digest(model_config),
        **{name: flat(getattr(server_args, name, None)) for name in NUMERIC_OPTIONS},
        **{name: flat(getattr(server_args, name)) for name in CORUN_NUMERIC_OPTIONS
           if getattr(server_args, name, None) is not None},
        "dtype": str(dtype),
        "gpu": gpu,
        "cuda": cuda,
        **{f"blas {k}": flat(v) for k, v in sorted(blas.items())},
        **{f"version {k}": v for k, v in sorted(installed.items())},
    }


def mismatches(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """One line per environment field that differs between a record and this server, and one naming the
    fields this server has that the record does not hold (a record written before they were recorded)."""
    out = [
        f"{key}: verified with {recorded[key]!r}, " + (f"this server has {current[key]!r}" if key in current
                                                       else "this server does not have it")
        for key in sorted(recorded) if key not in current or recorded[key] != current[key]
    ]
    unheld = [f"{key}={current[key]!r}" for key in sorted(set(current) - set(recorded))]
    if unheld:
        out.append(f"the record does not hold {len(unheld)} field(s) this server has: " + ", ".join(unheld))
    return out


def environment_line(env: Mapping[str, Any]) -> str:
    """The log line a candidate server writes for ``verify-tiers`` to read back."""
    return ENVIRONMENT_LOG + json.dumps(dict(env), sort_keys=True)


def logged(text: str, marker: str) -> dict[str, Any] | None:
    """The JSON object after ``marker`` on the first log line that holds it (a candidate server's first TP
    rank's), or None."""
    for line in text.splitlines():
        at = line.find(marker)
        if at >= 0:
            return json.loads(line[at + len(marker):])
    return None


def environment_from_log(text: str) -> dict[str, Any]:
    """The environment a candidate server logged (its first TP rank's); ``RecordError`` if none."""
    env = logged(text, ENVIRONMENT_LOG)
    if env is None:
        raise RecordError("the server logged no environment: was it started with --corun and "
                          "--corun-decode-tier-candidates or --corun-prefill-pack-candidate?")
    return env


def foreign(served: Iterable[Any], env: Mapping[str, Any]) -> str | None:
    """Why a server in ``env`` cannot serve ``served`` (``config.Served``): the first record verified in another
    environment,
    each differing field (``mismatches``) and the fix; None when every record holds here."""
    for item in served:
        differ = [] if item.record is None else mismatches(item.record.environment, env)
        if differ:
            library = item.record.environment.get("blas library")
            serve_it = (f", serve it with --corun-gemm-library {library}"
                        if library in ("cublas", "cublaslt") and library != env.get("blas library") else "")
            return (f"{item.option} {item.record.source} was verified in another environment ("
                    + "; ".join(differ) + f"). Fix: run `corun-sglang {item.command}` here{serve_it}, "
                    f"or drop {item.option}")
    return None
