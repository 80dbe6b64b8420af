"""The wheel holds every subpackage of the runtime (an installed server imports them all)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_packaged():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "corun_sglang").rglob("__init__.py")}
    assert found <= listed, f"pyproject.toml leaves out {sorted(found - listed)}"
