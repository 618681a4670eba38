"""The package's shape holds: each layer imports only the layers below it, and no module
grows past what one reader takes in at once."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "t2tcli"
# Lowest first. A module may import its own layer and those before it.
LAYERS = ["core", "io", "data", "model", "interop", "train", "decode", "evaluate", "cli"]
# Top-level modules: the core, and the public names a user's Problem imports (the paths README.md and docs/ show).
# The registry imports user code from any file system, so it sits on the file layer.
# tensor2tensor's API for user dirs (t2t_compat) builds Problems, so it sits on the data layer.
TOP_LEVEL = {"problem": "data", "sources": "data", "text": "data", "registry": "io", "t2t_compat": "data"}
MAX_LINES = 400


def _layer(module: str) -> str:
    """'t2tcli.data.vocab' -> 'data'; a top-level module is core unless it re-exports a layer."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    if parts[1] in LAYERS:
        return parts[1]
    return TOP_LEVEL.get(parts[1], "core")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every t2tcli module a file imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("t2tcli"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("t2tcli"):
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_no_layer_imports_a_layer_above_it():
    modules = _modules()
    upward = []
    for name, path in sorted(modules.items()):
        own = LAYERS.index(_layer(name))
        for imported in sorted(_imports(path)):
            # "from t2tcli.model import graph" names a module; "from t2tcli.errors import UserError" a name in one.
            target = imported if imported in modules else imported.rsplit(".", 1)[0]
            if LAYERS.index(_layer(target)) > own:
                upward.append(f"{name} ({_layer(name)}) imports {target} ({_layer(target)})")
    assert not upward, "\n".join(upward)


def test_the_layer_rule_sees_an_upward_import(tmp_path):
    """The check above reads lazy imports inside functions too."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from t2tcli.train import trainer\n")
    assert "t2tcli.train.trainer" in _imports(planted)
    assert LAYERS.index(_layer("t2tcli.train.trainer")) > LAYERS.index(_layer("t2tcli.data.vocab"))


def test_no_module_is_longer_than_one_reader_takes_in():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
