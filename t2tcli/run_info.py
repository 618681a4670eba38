"""What a training run records in `model_dir` so eval, decode and export need only it.

`hparams.json` holds the hparams; `run.json` holds the problem, the data and
vocabulary paths and the flags of the run. The vocabulary is copied into `model_dir`
so a model directory stays usable after `data_dir` is gone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

from absl import logging

from t2tcli.errors import UserError
from t2tcli.hparams import HParams

# hparams that earlier t2tcli versions did not record, with the values those versions used:
# a model_dir they wrote keeps working (its norm variables are named rms_norm).
LEGACY_HPARAMS = {"norm_scope": "rms_norm", "tie_embeddings": True}
HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"
VOCAB_FILE = "vocab.model"


@dataclasses.dataclass
class RunInfo:
    problem: str
    hparams_set: str
    data_dir: str
    usr_dir: str = ""
    flags: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The dtype the last training run computed in (hparams.json may say "auto").
    activation_dtype: str = ""


def atomic_write_text(path: str, text: str) -> None:
    """Writes `path` so that it is either complete or absent, never half-written."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def atomic_copy(src: str, dst: str) -> None:
    """Copies `src` to `dst` so that `dst` is either complete or absent."""
    tmp = f"{dst}.tmp{os.getpid()}"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def save(model_dir: str, info: RunInfo, hparams: HParams, vocabulary_proto: bytes) -> None:
    """Records the run in model_dir: hparams, run description and vocabulary, each file
    complete or absent."""
    from t2tcli.vocab import write_model

    os.makedirs(model_dir, exist_ok=True)
    atomic_write_text(os.path.join(model_dir, HPARAMS_FILE), hparams.to_json() + "\n")
    atomic_write_text(
        os.path.join(model_dir, RUN_FILE), json.dumps(dataclasses.asdict(info), indent=2, sort_keys=True) + "\n"
    )
    write_model(vocabulary_proto, os.path.join(model_dir, VOCAB_FILE))


def exists(model_dir: str) -> bool:
    return os.path.exists(os.path.join(model_dir, RUN_FILE))


def _read_json(path: str, model_dir: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path} not found: is --model_dir={model_dir} a t2t-train model_dir?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: unreadable {what} ({exc})") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, expected the {what}") from None


def load(model_dir: str) -> tuple[RunInfo, HParams, str]:
    """(run info, hparams, vocabulary path) of a model_dir written by t2t-train."""
    run_path, hparams_path = os.path.join(model_dir, RUN_FILE), os.path.join(model_dir, HPARAMS_FILE)
    recorded = _read_json(run_path, model_dir, "run description")
    try:
        info = RunInfo(**recorded)
    except TypeError as exc:
        raise UserError(f"{run_path}: unreadable run description ({exc})") from None
    values = _read_json(hparams_path, model_dir, "hparams")
    if not isinstance(values, dict):
        raise UserError(f"{hparams_path}: unreadable hparams (expected a JSON object)")
    hparams = HParams(**values)
    missing = {k: v for k, v in LEGACY_HPARAMS.items() if k not in hparams}
    if missing:
        logging.info("%s was written by an earlier t2tcli: taking %s", model_dir, missing)
        for key, value in missing.items():
            hparams.add_hparam(key, value)
    return info, hparams, os.path.join(model_dir, VOCAB_FILE)
