"""What a training run records in `model_dir` so eval, decode and export need only it.

`hparams.json` holds the hparams; `run.json` holds the problem, the data and
vocabulary paths and the flags of the run. The vocabulary is copied into `model_dir`
so a model directory stays usable after `data_dir` is gone.

A model_dir may come from anywhere (a download, a colleague, a bucket), so both files
are parsed with types: every hparam must have the type of the built-in default it
stands for, and a file that does not fit is one line naming the key, never a value
handed on unchecked.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

from absl import logging

from t2tcli.errors import UserError
from t2tcli.hparams import HParams, defaults
from t2tcli.io import atomic, fs

# hparams that earlier t2tcli versions did not record, with the values those versions used:
# a model_dir they wrote keeps working (its norm variables are named rms_norm).
LEGACY_HPARAMS = {"norm_scope": "rms_norm", "tie_embeddings": True}
HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"
VOCAB_FILE = "vocab.model"

_SCALARS = (str, int, float, bool, type(None))


@dataclasses.dataclass
class RunInfo:
    problem: str
    hparams_set: str
    data_dir: str
    # Absolute paths of the run's --usr_dir code; imported later only with the user's consent.
    usr_dirs: list[str] = dataclasses.field(default_factory=list)
    flags: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The dtype the last training run computed in (hparams.json may say "auto").
    activation_dtype: str = ""


def absolute_usr_dirs(usr_dirs: list[str]) -> list[str]:
    """--usr_dir values as run.json records them: absolute, so they mean the same from any cwd."""
    return [u if fs.is_remote(u) else str(Path(u).expanduser().resolve()) for u in usr_dirs]


def save(model_dir: str, info: RunInfo, hparams: HParams, vocabulary_proto: bytes) -> None:
    """Records the run in model_dir: hparams, run description and vocabulary, each file
    complete or absent."""
    from t2tcli.data.vocabulary.vocab import model_files

    run = json.dumps(dataclasses.asdict(info), indent=2, sort_keys=True) + "\n"
    files = {
        os.path.join(model_dir, HPARAMS_FILE): (hparams.to_json() + "\n").encode("utf-8"),
        os.path.join(model_dir, RUN_FILE): run.encode("utf-8"),
        **model_files(vocabulary_proto, os.path.join(model_dir, VOCAB_FILE)),
    }
    fs.makedirs(model_dir)
    atomic.write_files(files)


def exists(model_dir: str) -> bool:
    return fs.exists(os.path.join(model_dir, RUN_FILE))


def _read_json(path: str, model_dir: str, what: str) -> Any:
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        raise UserError(f"{path} not found: is --model_dir={model_dir} a t2t-train model_dir?") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, expected the {what}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise UserError(f"{path}: unreadable {what} ({str(exc)[:200]})") from None


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value)


def _typed_run(recorded: Any, path: str) -> RunInfo:
    if not isinstance(recorded, dict):
        raise UserError(f"{path}: unreadable run description (expected a JSON object)")
    strings = {}
    for key in ("problem", "hparams_set", "data_dir", "activation_dtype"):
        value = recorded.get(key, "")
        if not isinstance(value, str):
            raise UserError(f"{path}: unreadable run description ('{key}' must be a string)")
        strings[key] = value
    usr_dirs = recorded.get("usr_dirs", [])
    if "usr_dir" in recorded and "usr_dirs" not in recorded:  # earlier versions: one comma-joined string
        usr_dirs = recorded["usr_dir"].split(",") if isinstance(recorded["usr_dir"], str) else None
    if not isinstance(usr_dirs, list) or not all(isinstance(u, str) for u in usr_dirs):
        raise UserError(f"{path}: unreadable run description ('usr_dirs' must be a list of paths)")
    flags = recorded.get("flags", {})
    if not isinstance(flags, dict) or not all(isinstance(v, _SCALARS) or _is_scalar_list(v) for v in flags.values()):
        raise UserError(f"{path}: unreadable run description ('flags' must map names to plain values)")
    return RunInfo(usr_dirs=[u for u in usr_dirs if u], flags=flags, **strings)


def _typed_value(key: str, value: Any, default: Any, path: str) -> Any:
    """`value` as the type of `default`, or a one-line error naming the key."""

    def wrong(expected: str) -> UserError:
        return UserError(f"{path}: unreadable hparams ('{key}' must be {expected}, got {json.dumps(value)[:80]})")

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise wrong("true or false")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise wrong("an integer")
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise wrong("a finite number")
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise wrong("a string")
    if isinstance(default, list):
        kind = type(default[0]) if default else None
        if _is_scalar_list(value) and (kind is None or all(type(v) is kind for v in value)):
            return value
        raise wrong(f"a list of {kind.__name__}" if kind else "a list")
    if isinstance(value, _SCALARS) or _is_scalar_list(value):
        return value
    raise wrong("a plain value")


def typed_hparams(values: Any, path: str) -> HParams:
    """hparams.json's object as HParams typed by the built-in defaults.

    An hparam the built-in sets do not have (one a user's set added) may hold a plain
    value or a list of them; the model reads none of those.
    """
    if not isinstance(values, dict):
        raise UserError(f"{path}: unreadable hparams (expected a JSON object)")
    schema = defaults()
    missing = {k: v for k, v in LEGACY_HPARAMS.items() if k not in values}
    if missing:
        logging.info("%s was written by an earlier t2tcli: taking %s", path, missing)
    typed = {}
    for key, value in {**values, **missing}.items():
        typed[key] = _typed_value(key, value, schema.get(key), path)
    absent = sorted(k for k in schema if k not in typed)
    if absent:
        raise UserError(f"{path}: unreadable hparams (no '{absent[0]}')")
    try:
        return HParams(**typed)
    except UserError as exc:  # a key that is no identifier
        raise UserError(f"{path}: unreadable hparams ({exc})") from None


def load_run(model_dir: str) -> RunInfo:
    """The run description of a model_dir written by t2t-train."""
    run_path = os.path.join(model_dir, RUN_FILE)
    return _typed_run(_read_json(run_path, model_dir, "run description"), run_path)


def load(model_dir: str) -> tuple[RunInfo, HParams, str]:
    """(run info, hparams, vocabulary path) of a model_dir written by t2t-train."""
    info = load_run(model_dir)
    hparams_path = os.path.join(model_dir, HPARAMS_FILE)
    hparams = typed_hparams(_read_json(hparams_path, model_dir, "hparams"), hparams_path)
    return info, hparams, os.path.join(model_dir, VOCAB_FILE)
