"""The one registry of problems, mixtures and hparams sets shared by every binary.

Built-ins are the installed packages `t2tcli.builtin.problems` / `.hparams` (the
repository's top-level `problems/` and `hparams/`), so a wheel installed anywhere carries
them. User code comes in through `import_usr_dir` from a local or remote directory, and
registers through the same decorators, so it has no second-class path.

Layer: data, as it loads the built-in problems, which are written on data's public names
(tests/test_layout.py derives it from the imports). Imports: core (errors, t2t_imports),
io (fs, scratch), data (builtin.hparams and builtin.problems).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib
import importlib.util
import re
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from t2tcli import t2t_imports
from t2tcli.errors import UserError, did_you_mean
from t2tcli.io import fs, scratch

T = TypeVar("T")

_PROBLEMS: dict[str, type] = {}
_MIXTURES: dict[str, type] = {}
_HPARAMS: dict[str, Callable[[], Any]] = {}
_KINDS = {"problem": _PROBLEMS, "mixture": _MIXTURES, "hparams set": _HPARAMS}
# The user code imported so far: resolved local paths, remote URLs as given.
_IMPORTED_DIRS: set[str] = set()
_builtins_loaded = False


def snake_case(name: str) -> str:
    """CamelCase -> camel_case, keeping digit runs attached (T5Small -> t5_small)."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return name.lower()


def _register(table: dict[str, Any], kind: str, obj_or_name: Any) -> Any:
    def add(obj: T, name: str | None) -> T:
        key = name or snake_case(obj.__name__)
        for other_kind, other in _KINDS.items():
            if key in other and (other is table or {kind, other_kind} == {"problem", "mixture"}):
                raise UserError(
                    f"{kind} '{key}' is already registered as a {other_kind} "
                    f"(by {_origin(other[key])}); pick another name"
                )
        if isinstance(obj, type):
            obj.name = key
        table[key] = obj
        return obj

    if isinstance(obj_or_name, str) or obj_or_name is None:
        return lambda obj: add(obj, obj_or_name)
    return add(obj_or_name, None)


def _origin(obj: Any) -> str:
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    return getattr(module, "__file__", None) or getattr(obj, "__module__", "?")


def register_problem(obj_or_name: Any = None) -> Any:
    """Class decorator: `@register_problem` or `@register_problem("name")`."""
    return _register(_PROBLEMS, "problem", obj_or_name)


def register_mixture(obj_or_name: Any = None) -> Any:
    """Class decorator for Mixtures; mixtures share the problem namespace."""
    return _register(_MIXTURES, "mixture", obj_or_name)


def register_hparams(obj_or_name: Any = None) -> Any:
    """Function decorator: the function returns an HParams."""
    return _register(_HPARAMS, "hparams set", obj_or_name)


def _lookup(table: dict[str, Any], kind: str, name: str, extra: dict[str, Any] | None = None) -> Any:
    load_builtins()
    if name in table:
        return table[name]
    if extra is not None and name in extra:
        return extra[name]
    names = list(table) + list(extra or {})
    hint = did_you_mean(name, names) or "; run with --registry_help to list them"
    if not _IMPORTED_DIRS:
        hint += "; one defined in your own code needs --usr_dir=DIR"
    raise UserError(f"unknown {kind} '{name}'{hint}")


def problem(name: str) -> Any:
    """An instance of the problem or mixture registered as `name`."""
    if not name:
        raise UserError("--problem is required; run with --registry_help to list problems")
    return _lookup(_PROBLEMS, "problem", name, _MIXTURES)()


def hparams(name: str) -> Any:
    """A fresh HParams from the set registered as `name`."""
    if not name:
        raise UserError("--hparams_set is required; run with --registry_help to list them")
    return _lookup(_HPARAMS, "hparams set", name)()


def hparams_function(name: str) -> Callable[[], Any]:
    """The function registered as hparams set `name` (its docstring describes the set)."""
    return _lookup(_HPARAMS, "hparams set", name)


def list_problems() -> list[str]:
    load_builtins()
    return sorted(_PROBLEMS)


def list_mixtures() -> list[str]:
    load_builtins()
    return sorted(_MIXTURES)


def list_hparams() -> list[str]:
    load_builtins()
    return sorted(_HPARAMS)


def _summary(obj: Any) -> str:
    """The first line of an entry's docstring."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def registry_help() -> str:
    """The --registry_help text: one name per line with its docstring's first line, by kind."""
    lines: list[str] = []
    for title, table in (("Problems", _PROBLEMS), ("Mixtures", _MIXTURES), ("HParams sets", _HPARAMS)):
        load_builtins()
        lines.append(f"{title}:")
        width = max((len(n) for n in table), default=0)
        for name in sorted(table):
            lines.append(f"  {name:<{width}}  {_summary(table[name])}".rstrip())
        if not table:
            lines.append("  (none)")
    return "\n".join(lines)


def load_builtins() -> None:
    """Imports the built-in packages once; their decorators fill the tables."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    from t2tcli.builtin import hparams, problems  # noqa: F401 - imported for their decorators


# A file or directory of user code as a process elsewhere needs it to import it:
# (its path or URL as given, ((path relative to it, bytes), ...)); a file's one path is "".
CodeBundle = tuple[str, tuple[tuple[str, bytes], ...]]


def _key(usr_dir: str) -> str:
    """One spelling per place: a resolved local path, or the URL without its trailing slash."""
    return usr_dir.rstrip("/") if fs.is_remote(usr_dir) else str(Path(usr_dir).expanduser().resolve())


def _bundle(usr_dir: str) -> CodeBundle:
    """The Python sources of the file or directory `usr_dir`, local or remote."""
    path = _key(usr_dir)
    if not fs.exists(path):
        raise UserError(f"--usr_dir={usr_dir}: no such file or directory")
    if not fs.isdir(path):
        return path, (("", fs.read_bytes(path)),)
    return path, tuple((rel, fs.read_bytes(f"{path}/{rel}")) for rel in fs.files_under(path, ".py"))


def code_bundles(usr_dirs: list[str]) -> tuple[CodeBundle, ...]:
    """The `usr_dirs` with their Python sources.

    A Beam worker runs the problem's own code, but on a cluster only t2tcli (with its
    built-ins) is installed: --usr_dir code travels with the job, so it has to be neither
    packaged nor copied to the workers by hand.
    """
    return tuple(_bundle(u) for u in usr_dirs)


def code_digest(bundle: CodeBundle) -> str:
    """A hash of a bundle's file names and bytes (not of where it was read): what a process
    that imports it checks its own copy against before running any of it."""
    digest = hashlib.sha256()
    for rel, data in bundle[1]:
        for part in (rel.encode(), data):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()


def import_code_bundles(bundles: tuple[CodeBundle, ...], digests: tuple[str, ...]) -> None:
    """Imports each bundle from a copy written into a fresh directory of this process's own,
    once the copy hashes to the bundle's digest (what the launcher shipped), else a one-line
    error and nothing runs. Never from its original path, even where this machine has it:
    what is imported there could change after it was hashed, and compiled files beside the
    sources (`__pycache__`, extension modules) are not in the digest at all."""
    for bundle, digest in zip(bundles, digests, strict=True):
        if bundle[0] not in _IMPORTED_DIRS:
            _import_copy(bundle, _private_scratch(), digest)


def _check_digest(found: CodeBundle, digest: str, usr_dir: str, what: str) -> None:
    if code_digest(found) != digest:
        raise UserError(f"--usr_dir={usr_dir}: {what} (not the code of sha256 {digest[:16]}); none of it was imported")


def _import_copy(bundle: CodeBundle, parent: str, digest: str) -> None:
    """Writes a bundle into a new directory made in `parent` and imports it from there,
    once the copy, read back, hashes to `digest`: nothing that was at any name before
    (another user's files under a name they could guess) is ever imported."""
    path, files = bundle
    if path in _IMPORTED_DIRS:
        return
    name = path.rstrip("/").rsplit("/", 1)[-1] or "usr_dir"
    home = Path(tempfile.mkdtemp(prefix="t2t_code_", dir=parent)) / name
    for rel, data in files:
        target = home / rel if rel else home
        target.parent.mkdir(parents=True, exist_ok=True)
        with scratch.create_file(str(target)) as f:
            f.write(data)
    _check_digest(_bundle(str(home)), digest, path, f"its copy at {home} is not the code the job carries")
    _import_local(home, path)


@functools.cache
def _private_scratch() -> str:
    """This process's own directory (mode 0700) for copies of remote user code: a shared,
    predictable one would let another local user plant code under the name it gets."""
    scratch = tempfile.mkdtemp(prefix="t2t-usr-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return scratch


def imported(usr_dir: str) -> bool:
    """Whether the code at `usr_dir` (any spelling of its path) is imported already."""
    return _key(usr_dir) in _IMPORTED_DIRS


def import_usr_dir(usr_dir: str) -> None:
    """Imports a file or directory of user code so its decorators register problems / hparams.

    A directory with `__init__.py` is imported as a package (relative imports work);
    otherwise every `*.py` in it is imported, in name order. A remote directory (gs://...)
    is copied into a local temporary directory first. Importing the same place twice is a
    no-op. A failure inside user code is re-raised as a UserError naming the user's file
    and line. Code written for tensor2tensor imports it as usual: without a real
    tensor2tensor installed, those imports find t2tcli's layer (t2tcli.t2t_imports).
    """
    key = _key(usr_dir)
    if key in _IMPORTED_DIRS:
        return
    if fs.is_remote(key):
        bundle = _bundle(usr_dir)
        _import_copy(bundle, _private_scratch(), code_digest(bundle))
        return
    if not Path(key).exists():
        raise UserError(f"--usr_dir={usr_dir}: no such directory")
    _import_local(Path(key), key)


def _import_local(path: Path, key: str) -> None:
    """Imports the user code at local `path`, recorded as imported from `key`."""
    _IMPORTED_DIRS.add(key)
    if path.is_file():
        files = [path]
        package_init = None
    else:
        package_init = path / "__init__.py"
        files = [package_init] if package_init.exists() else sorted(path.glob("*.py"))
    tag = hashlib.sha1(key.encode()).hexdigest()[:8]
    for file in files:
        is_pkg = file == package_init
        stem = path.name if is_pkg else file.stem
        module_name = f"t2t_usr_{tag}_{re.sub(r'[^0-9a-zA-Z_]', '_', stem)}"
        spec = importlib.util.spec_from_file_location(
            module_name, file, submodule_search_locations=[str(path)] if is_pkg else None
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            with t2t_imports.served_while_importing():
                spec.loader.exec_module(module)
        except UserError:
            _IMPORTED_DIRS.discard(key)
            raise
        except Exception as exc:  # noqa: BLE001 - reported with the user's file and line
            _IMPORTED_DIRS.discard(key)
            sys.modules.pop(module_name, None)
            where = _user_frame(exc, path)
            if key != str(path):  # a copy: name the place the user knows
                where = where.replace(str(path), key, 1)
            raise UserError(f"error in user code {where}: {type(exc).__name__}: {exc}") from exc


def _user_frame(exc: BaseException, root: Path) -> str:
    """'file:line' of the deepest traceback frame inside `root` (or of a SyntaxError)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    where = str(root)
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve().is_relative_to(root if root.is_dir() else root.parent):
            where = f"{frame.filename}:{frame.lineno}"
    return where
