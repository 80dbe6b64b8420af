"""``corun-sglang doctor``: is this environment ready to serve ``--corun``?

Each check reports ok / missing with a detail line. The install checks are the
parts of ``startup.parts()``, the very check ``--corun`` runs at startup, so
doctor never calls ready what ``--corun`` refuses; doctor adds the GPU and the
resolved configuration. The environment is ready when every required check
passes; the GPU check alone may be waived (``--allow-no-gpu``) to validate an
install on a machine without one, such as an image build or CI.
"""

from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    gpu: bool = False  # waivable with --allow-no-gpu


def _guard(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as exc:  # a broken install must be reported, not crash the report
        return Check(name, False, f"{type(exc).__name__}: {exc}")


def _startup() -> list[Check]:
    """``startup.parts()``, the check ``--corun`` runs, one line a part, with SGLang's plugins loaded."""
    from sglang.srt.plugins import load_plugins

    from corun_sglang.serving import startup

    load_plugins()
    return [Check(part.name, not part.problems, "; ".join(part.problems) or part.detail)
            for part in startup.parts()]


def _gpu() -> Check:
    import torch

    if not torch.cuda.is_available():
        return Check("gpu", False, "no CUDA device visible", gpu=True)
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return Check("gpu", major >= 8, f"{name}, compute capability {major}.{minor} (needs >= 8.0)", gpu=True)


def _configuration(model_path: str | None) -> Check:
    from sglang.srt.server_args import ServerArgs

    from corun_sglang.core import config

    if model_path is None:
        base = ServerArgs.__mro__[1] if "corun" in ServerArgs.__dataclass_fields__ else ServerArgs
        defaults = {f.name: f.default for f in dataclasses.fields(base)}
        chosen = config.defaults(type("Defaults", (), defaults)(), config.Records())
        return Check("configuration", True,
                     "--corun sets " + ", ".join(f"{k}={v}" for k, v in chosen.items()))
    args = ServerArgs(model_path=model_path, corun=True, device="cuda")
    return Check("configuration", True, args.corun_config.summary())


def checks(model_path: str | None = None) -> list[Check]:
    try:
        found = _startup()
    except Exception as exc:  # a broken install must be reported, not crash the report
        found = [Check("startup", False, f"{type(exc).__name__}: {exc}")]
    return [
        *found,
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
