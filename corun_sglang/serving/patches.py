"""The patch series against the installed SGLang: status, apply, revert.

The series is the numbered ``*.patch`` files of ``patches/`` (shipped inside
the package as ``corun_sglang/serving/patches``), each against SGLang
``SGLANG_VERSION`` with paths relative to site-packages (``sglang/srt/...``),
applied in number order. ``patches/README.md`` is the ledger: target, why,
how, upstream plan.

Invariants:
- ``apply()`` refuses any SGLang version but ``SGLANG_VERSION`` and is
  idempotent: applied patches are skipped, so a second run changes nothing;
- a patch that neither applies nor is already applied is a conflict, reported
  by name, and no later patch is touched;
- ``missing()`` (used by the ``--corun`` startup check) needs no tool but
  Python: each patch adds a line carrying its marker, ``corun-sglang patch
  NNNN``, to every file it changes.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

from corun_sglang import SGLANG_VERSION


class PatchError(RuntimeError):
    pass


class Status(enum.Enum):
    APPLIED = "applied"
    UNAPPLIED = "not applied"
    CONFLICT = "conflict"


def series_dir() -> Path:
    """The folder holding the series: the installed package's copy, else the source tree's."""
    package = Path(__file__).resolve().parents[1]  # corun_sglang
    for candidate in (package / "patches", package.parent / "patches"):
        if any(candidate.glob("[0-9][0-9][0-9][0-9]-*.patch")):
            return candidate
    return package / "patches"


@dataclasses.dataclass(frozen=True)
class Patch:
    path: Path

    @property
    def number(self) -> str:
        return self.path.name[:4]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def marker(self) -> str:
        return f"corun-sglang patch {self.number}"

    def files(self) -> list[str]:
        """The files the patch changes, relative to site-packages."""
        return re.findall(r"^\+\+\+ b/(\S+)", self.path.read_text(), flags=re.M)


def series(folder: Path | None = None) -> list[Patch]:
    return [Patch(p) for p in sorted((folder or series_dir()).glob("[0-9][0-9][0-9][0-9]-*.patch"))]


def sglang_root() -> Path:
    """site-packages folder holding the ``sglang`` package (found without importing it)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise PatchError("SGLang is not installed in this Python environment")
    return Path(spec.origin).resolve().parent.parent


def installed_version(root: Path) -> str:
    """Version of the SGLang distribution installed in ``root`` (from its dist-info)."""
    found = [
        importlib.metadata.Distribution.at(d).version
        for d in root.glob("sglang-*.dist-info")
        if d.is_dir()
    ]
    return found[0] if len(found) == 1 else "unknown"


def _git_apply(root: Path, patch: Patch, *flags: str) -> bool:
    git = shutil.which("git")
    if git is None:
        raise PatchError("git is needed to apply or revert patches (git apply); install git")
    result = subprocess.run(
        [git, "apply", "--unsafe-paths", f"--directory=.", *flags, str(patch.path)],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return result.returncode == 0


def status(patch: Patch, root: Path) -> Status:
    if _git_apply(root, patch, "--check", "--reverse"):
        return Status.APPLIED
    if _git_apply(root, patch, "--check"):
        return Status.UNAPPLIED
    return Status.CONFLICT


def _check_version(root: Path) -> None:
    found = installed_version(root)
    if found != SGLANG_VERSION:
        raise PatchError(
            f"the patch series is written against SGLang {SGLANG_VERSION}; the SGLang in "
            f"{root} is {found}. Fix: pip install sglang=={SGLANG_VERSION}"
        )


def apply(root: Path | None = None, folder: Path | None = None) -> list[tuple[Patch, str]]:
    """Apply every patch not yet applied, in order; returns (patch, what happened)."""
    root = root or sglang_root()
    _check_version(root)
    done = []
    for patch in series(folder):
        state = status(patch, root)
        if state is Status.CONFLICT:
            raise PatchError(
                f"{patch.name} does not apply to {root / 'sglang'} and is not applied: the "
                "installed SGLang was changed by something else. Fix: reinstall it "
                f"(pip install --force-reinstall --no-deps sglang=={SGLANG_VERSION}) and run again"
            )
        if state is Status.UNAPPLIED:
            if not _git_apply(root, patch):
                raise PatchError(f"{patch.name}: git apply failed in {root}")
            done.append((patch, "applied"))
        else:
            done.append((patch, "already applied"))
    return done


def revert(root: Path | None = None, folder: Path | None = None) -> list[tuple[Patch, str]]:
    """Revert every applied patch, in reverse order; returns (patch, what happened)."""
    root = root or sglang_root()
    _check_version(root)
    done = []
    for patch in reversed(series(folder)):
        state = status(patch, root)
        if state is Status.CONFLICT:
            raise PatchError(f"{patch.name} is neither applied nor cleanly revertible in {root}")
        if state is Status.APPLIED:
            if not _git_apply(root, patch, "--reverse"):
                raise PatchError(f"{patch.name}: git apply --reverse failed in {root}")
            done.append((patch, "reverted"))
        else:
            done.append((patch, "not applied"))
    return done


def check(root: Path | None = None, folder: Path | None = None) -> list[tuple[Patch, Status]]:
    root = root or sglang_root()
    _check_version(root)
    return [(patch, status(patch, root)) for patch in series(folder)]


def missing(root: Path | None = None, folder: Path | None = None) -> list[str]:
    """Names of patches whose marker is absent from a file they change (Python only, no git)."""
    root = root or sglang_root()
    absent = []
    for patch in series(folder):
        for rel in patch.files():
            target = root / rel
            if not target.is_file() or patch.marker not in target.read_text():
                absent.append(patch.name)
                break
    return absent
