"""Everything eval, decode and export need from a model_dir, with flag overrides.

t2t-train records the problem, hparams, user code and vocabulary in model_dir, so
users never repeat training flags; `--problem`, `--hparams` and `--usr_dir` still
override what was recorded.
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging

from t2tcli import registry
from t2tcli.data.problem import Problem
from t2tcli.data.vocabulary.vocab import Vocabulary
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.io import fs
from t2tcli.model import config as model_config
from t2tcli.model import run_records


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    model_dir: str
    info: run_records.RunInfo
    config: model_config.ModelConfig  # the model on this machine, checked when loaded
    problem: Problem | None  # None: a pretrained model written by t2t-train --train_steps=0 without a problem
    vocab: Vocabulary

    @property
    def hparams(self) -> HParams:
        return self.config.hparams


def load(model_dir: str, problem: str | None = None, hparams: str = "", trust_usr_dir: bool = False) -> LoadedModel:
    """Reads model_dir's run description; `problem` / `hparams` override it.

    The user code its training run imported is imported again only with consent
    (`trust_usr_dir`, or a --usr_dir naming it, which is imported already).
    """
    if not model_dir:
        raise UserError("--model_dir is required")
    if not fs.isdir(model_dir):
        raise UserError(f"--model_dir={model_dir}: no such directory")
    info, hp, vocab_path = run_records.load(model_dir)
    unconsented = _import_recorded_code(model_dir, info.usr_dirs, trust_usr_dir)
    hp.parse(hparams)
    name = problem or info.problem
    try:
        found = registry.problem(name) if name else None
    except UserError:
        if unconsented:
            raise UserError(_consent_message(model_dir, unconsented, f"problem '{name}' is defined there")) from None
        raise
    if unconsented:
        logging.warning("%s", _consent_message(model_dir, unconsented, "not needed here"))
    vocab = Vocabulary(vocab_path)
    return LoadedModel(model_dir, info, model_config.build(hp, vocab.vocab_size), found, vocab)


def _import_recorded_code(model_dir: str, usr_dirs: list[str], trusted: bool) -> list[str]:
    """Imports the recorded user code the user consented to; returns what was not imported."""
    left: list[str] = []
    for usr_dir in usr_dirs:
        if registry.imported(usr_dir):
            continue
        if not trusted:
            left.append(usr_dir)
        elif not fs.is_remote(usr_dir) and not os.path.isabs(usr_dir):
            logging.warning(
                "%s names user code at %s, which is not imported from there: pass --usr_dir", model_dir, usr_dir
            )
        elif fs.exists(usr_dir):
            logging.warning("importing user code %s, as %s asks (--trust_usr_dir)", usr_dir, model_dir)
            registry.import_usr_dir(usr_dir)
        else:
            logging.warning("usr_dir %s recorded by training no longer exists; pass --usr_dir", usr_dir)
    return left


def _consent_message(model_dir: str, usr_dirs: list[str], why: str) -> str:
    named = ", ".join(usr_dirs)
    return (
        f"{os.path.join(model_dir, run_records.RUN_FILE)} asks to import user code {named} ({why}); "
        f"user code runs only with consent: pass --usr_dir={usr_dirs[0]} if you trust it, or --trust_usr_dir"
    )


def text_decoder(vocab: Vocabulary):
    """ids -> text, dropping ids past the SentencePiece vocabulary.

    The model's vocabulary is padded up to a multiple of `vocab_divisor`; a model that
    is barely trained can emit those padding ids, which mean nothing (T5 drops them too).
    """
    size = vocab.vocab_size

    def decode(ids: list[int]) -> str:
        return vocab.decode([i for i in ids if i < size])

    return decode
