"""The vocabulary of a Hugging Face T5 directory: its spiece.model and its sentinel count.

Datagen takes a vocabulary from such a directory (--vocab_from, VocabSpec.from_model), and
`t2tcli.interop.hf_t5`, which reads the rest of the directory, takes it from here: data
must not import interop. Imports: core, io and data (vocab).
"""

from __future__ import annotations

import json
import os

from t2tcli.data.vocabulary import vocab
from t2tcli.errors import UserError
from t2tcli.io import fs

CONFIG = "config.json"
SPIECE = "spiece.model"
TOKENIZER_CONFIG = "tokenizer_config.json"
# What a directory whose tokenizer_config.json does not say has: T5's checkpoints' count.
DEFAULT_SENTINELS = 100


def is_model_dir(path: str) -> bool:
    """Whether `path` looks like a Hugging Face model directory (it has a config.json)."""
    return fs.isfile(os.path.join(path, CONFIG))


def spiece_path(path: str) -> str:
    """The directory's spiece.model; a one-line error when it has none."""
    spiece = os.path.join(path, SPIECE)
    if not fs.isfile(spiece):
        raise UserError(f"{path}: no {SPIECE} (the model's SentencePiece vocabulary) beside {CONFIG}")
    return spiece


def sentinels(path: str) -> int:
    """How many T5 sentinels (<extra_id_N>) the model's vocabulary has beyond spiece.model."""
    tokenizer_config = os.path.join(path, TOKENIZER_CONFIG)
    if fs.isfile(tokenizer_config):
        extra = json.loads(fs.read_bytes(tokenizer_config).decode("utf-8")).get("extra_ids")
        if extra is not None:
            return int(extra)
    return DEFAULT_SENTINELS


def vocabulary_proto(path: str) -> bytes:
    """spiece.model with the model's sentinels appended: t2tcli's vocabulary file for it."""
    return vocab.with_sentinels(fs.read_bytes(spiece_path(path)), sentinels(path))
