"""The folders of ``corun_sglang/`` are its layers, and every import (a function's own included) points down."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "corun_sglang"

#: Each layer and the layers it may import (besides itself and the package root's constants).
LAYERS = {
    "core": set(),
    "records": {"core"},
    "probes": {"core", "records"},
    "serving": {"core", "records", "probes"},
    "tools": {"core", "records", "probes"},
    "commands": {"core", "records", "probes", "serving", "tools"},
}
#: Where the package root's own modules stand: ``python -m corun_sglang`` runs the commands.
ROOT_MODULES = {"__init__": set(), "__main__": {"commands"}}
#: Not layers: the patch series ships as package data.
DATA = {"patches"}


def imported_layers(path: Path) -> list[tuple[int, str]]:
    """(line, layer) of every corun_sglang module ``path`` imports; the root's constants count as no layer."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "corun_sglang":
            parts = node.module.split(".")
            if len(parts) > 1:
                found.append((node.lineno, parts[1]))
            else:  # from corun_sglang import X: a layer, or one of the root's constants
                found += [(node.lineno, a.name) for a in node.names if a.name in LAYERS]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names
                      if a.name.startswith("corun_sglang.") and len(a.name.split(".")) > 1]
    return found


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_sits_in_a_layer():
    stray = [str(p.relative_to(PACKAGE)) for p in modules()
             if p.parent == PACKAGE and p.stem not in ROOT_MODULES
             or p.parent != PACKAGE and p.relative_to(PACKAGE).parts[0] not in LAYERS]
    assert stray == []
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} <= set(LAYERS) | DATA


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_point_down(path):
    rel = path.relative_to(PACKAGE)
    layer = rel.parts[0] if len(rel.parts) > 1 else None
    allowed = (LAYERS[layer] | {layer}) if layer else ROOT_MODULES[path.stem]
    wrong = [f"line {n}: imports {target}" for n, target in imported_layers(path) if target not in allowed]
    assert wrong == [], f"{rel} ({layer or 'root'}) may import {sorted(allowed)}"


def test_the_rule_catches_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from corun_sglang.serving import hooks\n")
    assert imported_layers(module) == [(2, "serving")]
