"""Decode tiers: decode CUDA graphs smaller than N that give a request the bits of the size-N graph.

Without tiers a ``--corun`` server replays one decode graph of N slots, however few requests run.
``--corun-decode-tiers FILE`` adds the sizes a record in FILE lists. ``corun-sglang verify-tiers``
writes such a record after checking, on one model, GPU and software stack, that a request decoding
in an M-slot graph gets, bit for bit, the tokens and logprobs it gets in the N-slot graph. SGLang pads
a decode batch to the smallest captured size that holds it, so a lighter load replays a smaller graph.

Invariants:
- a server captures exactly ``capture_sizes(record.tiers, N)``: every tier below N, then N;
- it serves a record only when the record's N is its N and the record's environment equals its own
  (``environment()``) field by field; otherwise it refuses to start and names each field that differs;
- ``--corun-decode-tier-candidates`` captures unverified sizes for ``verify-tiers`` alone; such a
  server logs that it makes no determinism promise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

#: Distributions whose versions are part of a record's environment (absent ones are left out).
DISTRIBUTIONS = (
    "corun-sglang", "sglang", "sgl-kernel", "flashinfer-python", "torch", "triton",
    "nvidia-cublas", "nvidia-cublas-cu12", "nvidia-cublas-cu13",
)

#: Environment variables that steer which GEMM kernels cuBLAS and cuBLASLt pick (their workspace sizes).
BLAS_ENV = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")

#: Model config keys that name or date a checkpoint without changing what it computes.
_NOT_THE_MODEL = ("_name_or_path", "name_or_path", "transformers_version", "_commit_hash")

#: The server log line prefix that carries a candidate server's environment to ``verify-tiers`` and
#: ``verify-prefill-pack``.
ENVIRONMENT_LOG = "corun decode tiers environment: "


class TiersError(ValueError):
    """A decode tiers record that cannot be served; the message names the cause and the fix."""


@dataclasses.dataclass(frozen=True)
class Record:
    """A ``verify-tiers`` result: the verified ``tiers`` below ``n``, and where they hold."""

    n: int
    tiers: tuple[int, ...]
    environment: Mapping[str, Any]
    rejected: Mapping[int, int] = dataclasses.field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict:
        return {
            "n": self.n, "tiers": list(self.tiers), "environment": dict(self.environment),
            "rejected": {str(k): v for k, v in sorted(self.rejected.items())},
        }


def parse_sizes(text: str) -> list[int]:
    """``"72,128"`` -> ``[72, 128]``; ``TiersError`` for anything but positive integers."""
    try:
        sizes = [int(s) for s in str(text).replace(" ", ",").split(",") if s]
    except ValueError:
        raise TiersError(f"decode tier sizes '{text}': not a comma-separated list of integers") from None
    if not sizes or min(sizes) < 1:
        raise TiersError(f"decode tier sizes '{text}': give one or more positive integers")
    return sorted(set(sizes))


def capture_sizes(tiers: Iterable[int], n: int) -> list[int]:
    """The decode graph sizes to capture: each tier below ``n``, ascending, then ``n``."""
    return sorted({int(t) for t in tiers if int(t) < n}) + [n]


def problems(record: Record, n: int) -> list[str]:
    """What keeps ``record`` from being served by a server of ``n`` slots (empty: nothing)."""
    out = []
    if record.n != n:
        out.append(f"it was verified against a {record.n}-slot decode graph; this server's N "
                   f"(--max-running-requests) is {n}")
    bad = [t for t in record.tiers if not 0 < t < n]
    if bad:
        out.append(f"tiers {bad} are not between 1 and N - 1 = {n - 1}")
    return out


def load(path: str | Path) -> Record:
    """The record in ``path``; ``TiersError`` naming the file, the cause and the fix."""
    fix = "write it with `corun-sglang verify-tiers` on this machine, or drop --corun-decode-tiers"
    try:
        data = json.loads(Path(path).read_text())
        record = Record(
            n=int(data["n"]), tiers=tuple(parse_sizes(",".join(map(str, data["tiers"])))) if data["tiers"] else (),
            environment=dict(data["environment"]),
            rejected={int(k): v for k, v in (data.get("rejected") or {}).items()}, source=str(path),
        )
    except OSError as exc:
        raise TiersError(f"--corun-decode-tiers {path}: cannot read it ({exc.strerror}). Fix: {fix}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise TiersError(f"--corun-decode-tiers {path}: not a decode tiers record ({exc}). Fix: {fix}") from None
    return record


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


def blas_setup(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The BLAS library PyTorch runs unquantized GEMMs through (``torch.backends.cuda.preferred_blas_library``,
    which ``TORCH_BLAS_PREFER_CUBLASLT`` sets) and the ``BLAS_ENV`` settings (None where unset)."""
    import torch

    environ = os.environ if environ is None else environ
    return {"library": torch.backends.cuda.preferred_blas_library().name.lower(),
            **{name: environ.get(name) for name in BLAS_ENV}}


def environment(model_config: Mapping[str, Any], dtype: Any, server_args: Any, gpu: str, cuda: str | None,
                installed: Mapping[str, str], blas: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a decode graph's kernels can depend on besides N, as a flat JSON-able mapping:
    ``blas`` is ``blas_setup()``, since the library and its workspace choose the GEMM kernels."""
    return {
        "model": model_digest(model_config),
        "dtype": str(dtype),
        "quantization": server_args.quantization,
        "kv_cache_dtype": server_args.kv_cache_dtype,
        "tp_size": server_args.tp_size,
        "page_size": server_args.page_size,
        "attention_backend": server_args.attention_backend,
        "gpu": gpu,
        "cuda": cuda,
        **{f"blas {k}": v for k, v in sorted(blas.items())},
        **{f"version {k}": v for k, v in sorted(installed.items())},
    }


def mismatches(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """One line per environment field that differs between a record and this server."""
    return [
        f"{key}: verified with {recorded.get(key)!r}, this server has {current.get(key)!r}"
        for key in sorted(set(recorded) | set(current)) if recorded.get(key) != current.get(key)
    ]


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
    """The environment a candidate server logged (its first TP rank's); ``TiersError`` if none."""
    env = logged(text, ENVIRONMENT_LOG)
    if env is None:
        raise TiersError("the server logged no environment: was it started with --corun and "
                         "--corun-decode-tier-candidates or --corun-prefill-pack-candidate?")
    return env
