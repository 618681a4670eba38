"""tensor2tensor.data_generators.text_problems: the text problems a T2T user subclasses.

A subclass yields samples of strings from `generate_samples` and says how to split and
shard them (`dataset_splits`, `is_generate_per_split`) and how large a vocabulary to
build (`approx_vocab_size`, `vocab_type`); t2tcli.t2t_compat.problem_adapter reads
exactly these and runs the problem through this toolkit's datagen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from t2tcli.t2t_compat.tensor2tensor.data_generators.problem import DatasetSplit, Problem


class VocabType:
    """How T2T encodes text; SUBWORD and CHARACTER map to SentencePiece models here."""

    CHARACTER = "character"
    SUBWORD = "subwords"
    TOKEN = "tokens"


class Text2TextProblem(Problem):
    """Text in, text out: samples are {"inputs": str, "targets": str}."""

    @property
    def dataset_splits(self) -> list[dict[str, Any]]:
        return [{"split": DatasetSplit.TRAIN, "shards": 100}, {"split": DatasetSplit.EVAL, "shards": 1}]

    @property
    def is_generate_per_split(self) -> bool:
        raise NotImplementedError

    @property
    def approx_vocab_size(self) -> int:
        return 2**15

    @property
    def vocab_type(self) -> str:
        return VocabType.SUBWORD

    @property
    def has_inputs(self) -> bool:
        return True

    @property
    def oov_token(self) -> str:
        return "<UNK>"

    @property
    def max_samples_for_vocab(self) -> int | None:
        return None

    @property
    def packed_length(self) -> int | None:
        return None

    @property
    def vocab_filename(self) -> str:
        return f"vocab.{self.name}.{self.approx_vocab_size}.{self.vocab_type}"

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


class Text2SelfProblem(Text2TextProblem):
    """Text alone (language modelling): samples are {"targets": str}."""

    @property
    def has_inputs(self) -> bool:
        return False


class Text2ClassProblem(Text2TextProblem):
    """Text -> one of `num_classes` labels: samples are {"inputs": str, "label": int}."""

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    def class_labels(self, data_dir: str) -> list[str]:
        return [f"ID_{i}" for i in range(self.num_classes)]
