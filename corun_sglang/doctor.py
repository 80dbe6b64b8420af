"""``corun-sglang doctor``: is this environment ready to serve ``--corun``?

Each check reports ok / missing with a detail line. The environment is ready
when every required check passes; the GPU check alone may be waived
(``--allow-no-gpu``) to validate an install on a machine without one, such as
an image build or CI.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Callable

from corun_sglang import SGLANG_VERSION


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    gpu: bool = False  # waivable with --allow-no-gpu


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _guard(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as exc:  # a broken install must be reported, not crash the report
        return Check(name, False, f"{type(exc).__name__}: {exc}")


def _sglang() -> Check:
    found = _version("sglang")
    return Check("sglang", found == SGLANG_VERSION,
                 f"{found} (needs {SGLANG_VERSION})" if found != SGLANG_VERSION else found)


def _flashinfer() -> Check:
    found = _version("flashinfer-python") or _version("flashinfer")
    return Check("flashinfer", found is not None, found or "not installed (pip install flashinfer-python)")


def _patches() -> Check:
    from corun_sglang import patches

    rows = patches.check(patches.sglang_root())
    bad = [p.name for p, state in rows if state is not patches.Status.APPLIED]
    detail = ", ".join(f"{p.name}: {s.value}" for p, s in rows)
    return Check("patches", not bad, detail + ("" if not bad else "; run `corun-sglang apply-patches`"))


def _hooks() -> Check:
    from sglang.srt.plugins import load_plugins

    from corun_sglang import hooks, sampler

    load_plugins()
    problems = hooks.unhooked()
    if not sampler.registered():
        problems.append(f"sampling backend '{sampler.BACKEND}' not registered")
    return Check("hooks", not problems,
                 f"{len(hooks.HOOKS)} targets hooked, sampler '{sampler.BACKEND}' registered"
                 if not problems else "; ".join(problems))


def _gpu() -> Check:
    import torch

    if not torch.cuda.is_available():
        return Check("gpu", False, "no CUDA device visible", gpu=True)
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return Check("gpu", major >= 8, f"{name}, compute capability {major}.{minor} (needs >= 8.0)", gpu=True)


def _configuration(model_path: str | None) -> Check:
    from sglang.srt.server_args import ServerArgs

    from corun_sglang import config

    if model_path is None:
        base = ServerArgs.__mro__[1] if "corun" in ServerArgs.__dataclass_fields__ else ServerArgs
        defaults = {f.name: f.default for f in dataclasses.fields(base)}
        chosen = config.defaults(type("Defaults", (), defaults)())
        return Check("configuration", True,
                     "--corun sets " + ", ".join(f"{k}={v}" for k, v in chosen.items()))
    args = ServerArgs(model_path=model_path, corun=True, device="cuda")
    return Check("configuration", True, args.corun_config.summary())


def checks(model_path: str | None = None) -> list[Check]:
    return [
        _guard("sglang", _sglang),
        _guard("flashinfer", _flashinfer),
        _guard("patches", _patches),
        _guard("hooks", _hooks),
        _guard("gpu", _gpu),
        _guard("configuration", lambda: _configuration(model_path)),
    ]


def ready(found: list[Check], allow_no_gpu: bool = False) -> bool:
    return all(c.ok or (allow_no_gpu and c.gpu) for c in found)


def render(found: list[Check], allow_no_gpu: bool = False) -> str:
    lines = []
    for c in found:
        mark = "ok" if c.ok else ("waived" if allow_no_gpu and c.gpu else "MISSING")
        lines.append(f"{mark:>7}  {c.name:<13} {c.detail}")
    lines.append("ready for --corun" if ready(found, allow_no_gpu) else "NOT ready for --corun")
    return "\n".join(lines)
