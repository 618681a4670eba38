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


def load(model_dir: str) -> tuple[RunInfo, HParams, str]:
    """(run info, hparams, vocabulary path) of a model_dir written by t2t-train."""
    run_path = os.path.join(model_dir, RUN_FILE)
    try:
        with open(run_path, encoding="utf-8") as f:
            info = RunInfo(**json.load(f))
        with open(os.path.join(model_dir, HPARAMS_FILE), encoding="utf-8") as f:
            hparams = HParams.from_json(f.read())
        missing = {k: v for k, v in LEGACY_HPARAMS.items() if k not in hparams}
        if missing:
            logging.info("%s was written by an earlier t2tcli: taking %s", model_dir, missing)
            for key, value in missing.items():
                hparams.add_hparam(key, value)
    except FileNotFoundError as exc:
        raise UserError(f"{exc.filename} not found: is --model_dir={model_dir} a t2t-train model_dir?") from None
    except (json.JSONDecodeError, TypeError) as exc:
        raise UserError(f"{run_path}: unreadable run description ({exc})") from None
    return info, hparams, os.path.join(model_dir, VOCAB_FILE)
