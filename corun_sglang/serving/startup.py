"""The fail-closed startup check of ``--corun``.

``check_startup()`` runs in every process that serves with ``--corun`` (the
server when it resolves its options, each scheduler when it starts), and
``corun-sglang doctor`` reports the same ``parts()``, so doctor never calls
ready what ``--corun`` refuses. It raises ``CorunStartupError`` naming each
cause and its fix if the installed SGLang or FlashInfer is not the one
corun-sglang is written against, if a required patch is not applied, if any
hook target does not carry its adapter, or if a name the adapters rely on
(``bindings``) is missing. One cause is one problem: a hook whose target a
missing patch creates is reported as that patch. Never silently
nondeterministic.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata

from corun_sglang import FLASHINFER_VERSION, SGLANG_VERSION


class CorunStartupError(RuntimeError):
    """This process cannot serve ``--corun``; ``problems`` names each cause and its fix."""

    def __init__(self, problems):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"--corun cannot start:\n{lines}")


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of the startup check: what it found when it passes, else its problems."""

    name: str
    problems: tuple[str, ...]
    detail: str = ""


def _sglang() -> Part:
    found = importlib.metadata.version("sglang")
    if found == SGLANG_VERSION:
        return Part("sglang", (), found)
    return Part("sglang", (
        f"corun-sglang is written against SGLang {SGLANG_VERSION}, found SGLang "
        f"{found}. Fix: pip install sglang=={SGLANG_VERSION}",
    ))


def _flashinfer() -> Part:
    try:
        found = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found == FLASHINFER_VERSION:
        return Part("flashinfer", (), found)
    return Part("flashinfer", (
        f"--corun serves attention through FlashInfer {FLASHINFER_VERSION} (the release SGLang "
        f"{SGLANG_VERSION} pins), found {found or 'none'}. "
        f"Fix: pip install flashinfer-python=={FLASHINFER_VERSION}",
    ))


def _patches(missing: list[str]) -> Part:
    from corun_sglang.serving import patches

    if not missing:
        return Part("patches", (), ", ".join(p.name for p in patches.series()) + ": applied")
    return Part("patches", (
        "SGLang patches not applied: "
        + ", ".join(missing)
        + ". Fix: run `corun-sglang apply-patches` (or scripts/apply_patches.sh)",
    ))


def _hooks(missing_patches: list[str]) -> Part:
    from corun_sglang.serving import hooks, sampler

    absent = {name[:4] for name in missing_patches}
    # a target that a missing patch creates is reported as that patch
    unhooked = hooks.unhooked(tuple(h for h in hooks.HOOKS if h.patch not in absent))
    found = []
    if unhooked:
        found.append(
            "hook targets not hooked: "
            + "; ".join(unhooked)
            + ". Fix: make sure the 'corun' plugin loads (if SGLANG_PLUGINS is set it must "
            "include 'corun') and that corun-sglang and SGLang were installed together"
        )
    if not sampler.registered():
        found.append(
            f"sampling backend '{sampler.BACKEND}' is not registered with SGLang. Fix: make "
            "sure the 'corun' plugin loads (if SGLANG_PLUGINS is set it must include 'corun')"
        )
    return Part("hooks", tuple(found), f"{len(hooks.HOOKS)} targets hooked, sampler '{sampler.BACKEND}' registered")


def _bindings() -> Part:
    from corun_sglang.serving import bindings

    return Part("bindings", tuple(bindings.problems()),
                f"the {len(bindings.BINDINGS)} SGLang/FlashInfer signatures and attributes relied on: all present")


def parts(sglang_root=None) -> list[Part]:
    """The startup check, part by part (only ``sglang`` when SGLang is another release).

    ``sglang_root`` is the site-packages folder whose SGLang files are checked
    for patches (default: the installed one).
    """
    from corun_sglang.serving import patches

    version = _sglang()
    if version.problems:
        return [version]
    missing = patches.missing(sglang_root)
    return [version, _flashinfer(), _patches(missing), _hooks(missing), _bindings()]


def problems(sglang_root=None) -> list[str]:
    """Every reason this process cannot serve ``--corun``, with its fix (empty when ready)."""
    return [p for part in parts(sglang_root) for p in part.problems]


def check_startup(sglang_root=None) -> None:
    found = problems(sglang_root)
    if found:
        raise CorunStartupError(found)
