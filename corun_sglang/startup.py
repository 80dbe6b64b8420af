"""The fail-closed startup check of ``--corun``.

``check_startup()`` runs in every process that serves with ``--corun`` (the
server when it resolves its options, each scheduler when it starts). It
raises ``CorunStartupError`` naming the cause and the fix if the installed
SGLang or FlashInfer is not the one corun-sglang is written against, if any hook target
does not carry its adapter, or if a required patch is not applied. Never
silently nondeterministic.
"""

from __future__ import annotations

import importlib.metadata

from corun_sglang import FLASHINFER_VERSION, SGLANG_VERSION


class CorunStartupError(RuntimeError):
    pass


def problems(sglang_root=None) -> list[str]:
    """Every reason this process cannot serve ``--corun``, with its fix (empty when ready).

    ``sglang_root`` is the site-packages folder whose SGLang files are checked
    for patches (default: the installed one).
    """
    from corun_sglang import hooks, patches

    found_version = importlib.metadata.version("sglang")
    if found_version != SGLANG_VERSION:
        return [
            f"corun-sglang is written against SGLang {SGLANG_VERSION}, found SGLang "
            f"{found_version}. Fix: pip install sglang=={SGLANG_VERSION}"
        ]
    found = []
    try:
        flashinfer = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        flashinfer = None
    if flashinfer != FLASHINFER_VERSION:
        found.append(
            f"--corun serves attention through FlashInfer {FLASHINFER_VERSION} (the release SGLang "
            f"{SGLANG_VERSION} pins), found {flashinfer or 'none'}. "
            f"Fix: pip install flashinfer-python=={FLASHINFER_VERSION}"
        )
    unhooked = hooks.unhooked()
    if unhooked:
        found.append(
            "hook targets not hooked: "
            + "; ".join(unhooked)
            + ". Fix: make sure the 'corun' plugin loads (if SGLANG_PLUGINS is set it must "
            "include 'corun') and that corun-sglang and SGLang were installed together"
        )
    from corun_sglang import sampler

    if not sampler.registered():
        found.append(
            f"sampling backend '{sampler.BACKEND}' is not registered with SGLang. Fix: make "
            "sure the 'corun' plugin loads (if SGLANG_PLUGINS is set it must include 'corun')"
        )
    missing = patches.missing(sglang_root)
    if missing:
        found.append(
            "SGLang patches not applied: "
            + ", ".join(missing)
            + ". Fix: run `corun-sglang apply-patches` (or scripts/apply_patches.sh)"
        )
    return found


def check_startup(sglang_root=None) -> None:
    found = problems(sglang_root)
    if found:
        lines = "\n".join(f"  - {p}" for p in found)
        raise CorunStartupError(f"--corun cannot start:\n{lines}")
