"""Everything eval, decode and export need from a model_dir, with flag overrides.

t2t-train records the problem, hparams, user code and vocabulary in model_dir, so
users never repeat training flags; `--problem`, `--hparams` and `--usr_dir` still
override what was recorded.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from absl import logging

from t2tcli import registry, run_info
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.problem import Problem
from t2tcli.vocab import Vocabulary


@dataclasses.dataclass
class LoadedModel:
    model_dir: str
    info: run_info.RunInfo
    hparams: HParams
    problem: Problem | None  # None: a pretrained model written by t2t-train --train_steps=0 without a problem
    vocab: Vocabulary


def load(model_dir: str, problem: str | None = None, hparams: str = "") -> LoadedModel:
    """Reads model_dir's run description; `problem` / `hparams` override it."""
    if not model_dir:
        raise UserError("--model_dir is required")
    if not os.path.isdir(model_dir):
        raise UserError(f"--model_dir={model_dir}: no such directory")
    info, hp, vocab_path = run_info.load(model_dir)
    if info.usr_dir:
        # t2t-train records several --usr_dir comma-separated.
        for usr_dir in filter(None, info.usr_dir.split(",")):
            if os.path.exists(usr_dir):
                registry.import_usr_dir(usr_dir)
            else:
                logging.warning("usr_dir %s recorded by training no longer exists; pass --usr_dir", usr_dir)
    hp.parse(hparams)
    name = problem or info.problem
    return LoadedModel(model_dir, info, hp, registry.problem(name) if name else None, Vocabulary(vocab_path))


def text_decoder(vocab: Vocabulary):
    """ids -> text, dropping ids past the SentencePiece vocabulary.

    The model's vocabulary is padded up to a multiple of `vocab_divisor`; a model that
    is barely trained can emit those padding ids, which mean nothing (T5 drops them too).
    """
    size = vocab.vocab_size

    def decode(ids: list[int]) -> str:
        return vocab.decode([i for i in ids if i < size])

    return decode


def build_estimator(model: LoadedModel, decode: dict[str, Any] | None = None) -> Any:
    """The training run's Estimator, with decode settings baked into its params."""
    from t2tcli import model as modellib

    return modellib.build_estimator(
        model.model_dir, model.hparams, model.vocab.vocab_size, params={"decode": dict(decode or {})}
    )
