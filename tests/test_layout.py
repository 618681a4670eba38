"""The package's shape holds: each layer imports only the layers below it, what a docstring
says a module imports is what it imports, and no module grows past what one reader takes
in at once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "t2tcli"
# Lowest first. A module may import its own layer and those before it.
LAYERS = ["core", "io", "data", "model", "interop", "train", "decode", "evaluate", "cli"]
# The built-in problems and hparams sets: kept at the checkout's top level, installed as
# t2tcli.builtin.problems / .hparams (t2tcli/builtin/__init__.py).
BUILTIN = {"problems": REPO / "problems", "hparams": REPO / "hparams"}
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    trees = [(PACKAGE, ("t2tcli",))] + [(path, ("t2tcli", "builtin", name)) for name, path in BUILTIN.items()]
    for root, prefix in trees:
        for path in root.rglob("*.py"):
            parts = prefix + path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, module: str = "") -> set[str]:
    """Every t2tcli module a file imports, at the top or inside a function; relative imports
    ("from . import toy") are resolved against `module`, the file's own name."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("t2tcli"))
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([source] if source else []))
            if source.startswith("t2tcli"):
                out.update(f"{source}.{a.name}" for a in node.names)
    return out


def _imported_modules(path: Path, modules: dict[str, Path], module: str = "") -> set[str]:
    """`_imports` as modules: "from t2tcli.model import graph" names a module, "from
    t2tcli.errors import UserError" a name in one."""
    return {name if name in modules else name.rsplit(".", 1)[0] for name in _imports(path, module)}


def _declared_layer(module: str) -> str | None:
    """'t2tcli.data.vocab' -> 'data'; None for a module outside the layer subpackages."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _layers(modules: dict[str, Path]) -> dict[str, str]:
    """Each module's layer. One in a layer subpackage is on that layer; any other (the core
    modules, the public names a user's Problem imports, the registry, the built-ins,
    t2t_compat) is on the highest layer it imports, through each other: the registry loads
    the built-ins, which are written on data's public names, so it is on data."""
    imports = {name: _imported_modules(path, modules, name) for name, path in modules.items()}
    layer = {name: _declared_layer(name) or "core" for name in modules}
    changed = True
    while changed:
        changed = False
        for name in modules:
            if _declared_layer(name) is None:
                highest = max((layer[t] for t in imports[name] if t in layer), key=LAYERS.index, default="core")
                if LAYERS.index(highest) > LAYERS.index(layer[name]):
                    layer[name], changed = highest, True
    return layer


def test_no_layer_imports_a_layer_above_it():
    modules = _modules()
    layer = _layers(modules)
    upward = []
    for name, path in sorted(modules.items()):
        for target in sorted(_imported_modules(path, modules, name)):
            if LAYERS.index(layer.get(target, "core")) > LAYERS.index(layer[name]):
                upward.append(f"{name} ({layer[name]}) imports {target} ({layer[target]})")
    assert not upward, "\n".join(upward)


def test_the_layer_rule_sees_an_upward_import(tmp_path):
    """The check above reads lazy imports inside functions too."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from t2tcli.train import trainer\n")
    assert "t2tcli.train.trainer" in _imports(planted)
    layer = _layers(_modules())
    assert LAYERS.index(layer["t2tcli.train.trainer"]) > LAYERS.index(layer["t2tcli.data.vocabulary.vocab"])


def test_a_top_level_module_is_on_the_layer_of_what_it_imports(tmp_path):
    """Derived, not decreed: the registry sits where the built-ins it loads put it, and a
    core module that started importing a layer would be on it (and caught where a lower
    layer imports it)."""
    modules = _modules()
    layer = _layers(modules)
    assert "t2tcli.builtin.problems.toy" in modules and layer["t2tcli.builtin.problems.toy"] == "data"
    assert layer["t2tcli.registry"] == "data" and layer["t2tcli.errors"] == "core"
    planted = tmp_path / "planted.py"
    planted.write_text("from t2tcli.model import graph\n")
    assert _layers({**modules, "t2tcli.planted": planted})["t2tcli.planted"] == "model"


# "Imports: core, io, data (layout, vocab)." in a docstring: the layers a module imports,
# with the modules it imports of a layer in parentheses where it names them; or
# "Imports: nothing of t2tcli." A subpackage's __init__ names the layers its modules may
# import: all those below it.
_IMPORTS_LINE = re.compile(r"Imports:\s*(.+?)(?:[.;]\s|[.;]?$)", re.S)
_ITEM = re.compile(r"(\w+)(?:\s*\(([\w\s,.]*)\))?\s*(?:,\s*and\s+|,\s*|\s+and\s+|$)")


def _claim(docstring: str) -> dict[str, set[str] | None] | None:
    """The docstring's "Imports:" line as {layer: the modules it names, or None}."""
    match = _IMPORTS_LINE.search(docstring)
    if match is None:
        return None
    text = " ".join(match.group(1).split())
    if text == "nothing of t2tcli":
        return {}
    claim: dict[str, set[str] | None] = {}
    at = 0
    while at < len(text):
        item = _ITEM.match(text, at)
        assert item and item.end() > at and item.group(1) in LAYERS, f"cannot read 'Imports: {text}' at {text[at:]!r}"
        names = item.group(2)
        claim[item.group(1)] = {n for n in re.split(r"[\s,]+|\band\b", names) if n} if names else None
        at = item.end()
    return claim


def _short(module: str, package: str = "") -> str:
    """How an "Imports:" line names a module: by its path inside its layer ('t2tcli.data.layout'
    -> 'layout', 't2tcli.data.vocabulary.vocab' -> 'vocabulary.vocab'), or inside the importer's
    own sub-package `package` ('vocab' from t2tcli.data.vocabulary); a module outside the layers
    by its path inside t2tcli ('t2tcli.registry' -> 'registry', 't2tcli.builtin.problems' ->
    'builtin.problems')."""
    parts = module.split(".")[1:]
    if not parts or parts[0] not in LAYERS:
        return ".".join(parts)
    own = package.split(".")[1:]
    if len(own) > 1 and parts[: len(own)] == own:
        return ".".join(parts[len(own) :])
    return ".".join(parts[1:])


def _package(name: str, modules: dict[str, Path]) -> str:
    """The package a module is in: itself for an __init__."""
    return name if modules[name].name == "__init__.py" else name.rpartition(".")[0]


def _real(name: str, modules: dict[str, Path], layer: dict[str, str], package: str = "") -> dict[str, set[str]]:
    """{layer: the modules of it that `name` imports, named as from `package`}, itself left out."""
    real: dict[str, set[str]] = {}
    for target in _imported_modules(modules[name], modules, name):
        if target != name and target in layer:
            real.setdefault(layer[target], set()).add(_short(target, package))
    return real


def _subpackage_real(name: str, modules: dict[str, Path], layer: dict[str, str]) -> dict[str, set[str]]:
    """{layer: what the modules of sub-package `name` import from outside it}, a module of
    their own layer named by its sub-package ('vocabulary') or, at the layer's top, itself."""
    real: dict[str, set[str]] = {}
    for module in modules:
        if module.startswith(name + "."):
            for target in _imported_modules(modules[module], modules, module):
                if target in layer and target != name and not target.startswith(name + "."):
                    real.setdefault(layer[target], set()).add(_short(target).split(".")[0])
    return real


def _drift(name: str, modules: dict[str, Path], layer: dict[str, str]) -> str | None:
    """How the module's "Imports:" line differs from its imports (None: it does not, or has none).
    A layer's __init__ states the rule: every layer below, and the modules it names of one
    are those the layer's modules import of it. A sub-package's __init__ (t2tcli.data.datagen)
    states what its modules import from outside it, its own layer's by sub-package."""
    claim = _claim(ast.get_docstring(ast.parse(modules[name].read_text())) or "")
    if claim is None:
        return None
    is_init = modules[name].name == "__init__.py"
    if is_init and _declared_layer(name) == name.rsplit(".", 1)[-1]:
        below = LAYERS[: LAYERS.index(layer[name])]
        if list(claim) != below:
            return f"says its layer imports {list(claim)}, the rule is {below}"
        real: dict[str, set[str]] = {}
        for module in modules:
            if module.startswith(name + "."):
                for each, names in _real(module, modules, layer, name).items():
                    real.setdefault(each, set()).update(names)
    else:
        if is_init and _declared_layer(name):
            real = _subpackage_real(name, modules, layer)
        else:
            real = _real(name, modules, layer, _package(name, modules))
        if set(claim) != set(real):
            return f"says it imports {sorted(claim, key=LAYERS.index)}, imports {sorted(real, key=LAYERS.index)}"
    for each, names in claim.items():
        if names is not None and names != real.get(each, set()):
            return f"says it imports {each} {sorted(names)}, imports {each} {sorted(real.get(each, set()))}"
    return None


def test_what_a_docstring_says_a_module_imports_is_what_it_imports():
    modules = _modules()
    layer = _layers(modules)
    drifted = [f"{name}: {why}" for name in sorted(modules) if (why := _drift(name, modules, layer))]
    assert not drifted, "\n".join(drifted)


_VOCAB = "from t2tcli.data.vocabulary import vocab\n"
_PLAN = "from t2tcli.data.datagen import plan\n"


@pytest.mark.parametrize(
    "module, docstring, imports, drifted",
    [
        (
            "t2tcli.data.planted",
            "Imports: core, data (layout).",
            "from t2tcli.errors import UserError\nfrom t2tcli.data import layout",
            False,
        ),
        ("t2tcli.data.planted", "Imports: core, data (layout).", "from t2tcli.data import layout\n" + _VOCAB, True),
        ("t2tcli.data.planted", "Imports: core and io.", "from t2tcli.errors import UserError\n", True),
        ("t2tcli.data.planted", "Imports: nothing of t2tcli.", "from t2tcli.io import fs\n", True),
        # A sub-package's module names its own sub-package's modules bare, the rest of its layer by path.
        ("t2tcli.data.datagen.planted", "Imports: data (plan and vocabulary.vocab).", _PLAN + _VOCAB, False),
        ("t2tcli.data.datagen.planted", "Imports: data (datagen.plan and vocabulary.vocab).", _PLAN + _VOCAB, True),
        ("t2tcli.data.datagen.planted", "Imports: data (plan and vocab).", _PLAN + _VOCAB, True),
        ("t2tcli.data.planted", "Imports: data (vocabulary.vocab).", _VOCAB, False),
        ("t2tcli.data.planted", "Imports: data (vocab).", _VOCAB, True),
    ],
)
def test_the_imports_check_sees_a_drifted_line(tmp_path, module, docstring, imports, drifted):
    modules = _modules()
    planted = tmp_path / "planted.py"
    planted.write_text(f'"""{docstring}"""\n{imports}')
    modules[module] = planted
    assert (_drift(module, modules, _layers(modules)) is not None) is drifted


@pytest.mark.parametrize(
    "docstring, drifted",
    [
        ("Imports: core and data (layout and vocabulary).", False),
        ("Imports: core and data.", False),
        ("Imports: core and data (layout).", True),  # vocabulary left out
        ("Imports: core and data (layout, planted and vocabulary).", True),  # its own modules are not outside it
        ("Imports: core, io and data (layout and vocabulary).", True),  # no module of it imports io
    ],
)
def test_the_imports_check_reads_a_subpackage_init_as_what_its_modules_import(tmp_path, docstring, drifted):
    modules = _modules()
    (tmp_path / "__init__.py").write_text(f'"""{docstring}"""\n')
    (tmp_path / "member.py").write_text("from t2tcli.errors import UserError\nfrom t2tcli.data import layout\n")
    (tmp_path / "other.py").write_text("from t2tcli.data.planted import member\n" + _VOCAB)
    modules["t2tcli.data.planted"] = tmp_path / "__init__.py"
    modules["t2tcli.data.planted.member"] = tmp_path / "member.py"
    modules["t2tcli.data.planted.other"] = tmp_path / "other.py"
    assert (_drift("t2tcli.data.planted", modules, _layers(modules)) is not None) is drifted


def test_every_subpackage_of_a_layer_says_what_it_imports():
    modules = _modules()
    silent = [
        name
        for name, path in modules.items()
        if path.name == "__init__.py"
        and _declared_layer(name)
        and _claim(ast.get_docstring(ast.parse(path.read_text())) or "") is None
    ]
    assert not silent, f"no 'Imports:' line in {silent}"


def test_no_module_is_longer_than_one_reader_takes_in():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
