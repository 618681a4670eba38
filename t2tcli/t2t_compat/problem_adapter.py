"""A tensor2tensor text problem as a Problem here: its samples are the source.

`generate_samples` becomes a Source, `dataset_splits` the shard counts (and, generated
in one go, the dev fraction), `approx_vocab_size` / `vocab_type` a SentencePiece
vocabulary. A problem that overrides what T2T does with tensors, encoders or modalities
cannot map, and is refused in one line naming the class and what to do instead.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import inspect
import shutil
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from absl import logging

from t2tcli.data.objectives import PrefixLM
from t2tcli.data.problem import SelfSupervisedProblem, Text2TextProblem, VocabSpec
from t2tcli.data.sources.source_base import Chunk, ReadOptions, Source
from t2tcli.errors import UserError
from t2tcli.t2t_compat.tensor2tensor.data_generators import text_problems
from t2tcli.t2t_compat.tensor2tensor.data_generators.problem import DatasetSplit

_LAYER = "t2tcli.t2t_compat"
# T2T's split names -> this toolkit's.
SPLIT_NAMES = {DatasetSplit.TRAIN: "train", DatasetSplit.EVAL: "dev", DatasetSplit.TEST: "test"}
# Methods of T2T's Problem whose work is done differently here, and what to do instead.
REFUSED_OVERRIDES = {
    "generate_data": "yield samples from generate_samples and let t2t-datagen write the shards",
    "generate_encoded_samples": "yield strings from generate_samples; the vocabulary here encodes them",
    "feature_encoders": "the vocabulary here is a SentencePiece model of approx_vocab_size; remove the override",
    "preprocess_example": "it changes tensors; make the change on the strings in generate_samples",
    "example_reading_spec": "the shards here hold inputs and targets only; remove the override",
    "hparams": "problem hparams (modalities, vocab sizes) are fixed here: text in, text out; remove the override",
}
# The problems whose vocabulary mapping this process has logged (once each).
_VOCAB_TOLD: set[str] = set()
# A character vocabulary's most pieces (it has as many as the training text has characters).
CHARACTER_VOCAB_SIZE = 1024


def where(obj: Any) -> str:
    """'file:line' of a user's class or function, for one-line errors."""
    try:
        return f"{inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]}"
    except (OSError, TypeError):
        return getattr(obj, "__module__", "?")


def _overridden(cls: type, method: str) -> bool:
    for klass in cls.__mro__:
        if method in vars(klass):
            return not klass.__module__.startswith(_LAYER)
    return False


def check_mappable(cls: type) -> None:
    """A one-line UserError when `cls` does what cannot run here."""
    if not issubclass(cls, text_problems.Text2TextProblem):
        raise UserError(
            f"{where(cls)}: problem {cls.__name__} subclasses tensor2tensor's Problem directly, which cannot run here: "
            "subclass text_problems.Text2TextProblem (or Text2ClassProblem, Text2SelfProblem) and yield text samples "
            "from generate_samples"
        )
    for method, instead in REFUSED_OVERRIDES.items():
        if _overridden(cls, method):
            raise UserError(
                f"{where(cls)}: problem {cls.__name__} overrides {method}, which cannot run here: {instead}"
            )


@functools.cache
def _scratch() -> str:
    """A private directory for generate_samples' downloads when --tmp_dir is not given."""
    path = tempfile.mkdtemp(prefix="t2t-tmp-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _user_frame(exc: BaseException, cls: type) -> str:
    """'file:line' of the deepest frame of the exception in the file defining `cls`."""
    module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    found = where(cls)
    for frame in traceback.extract_tb(exc.__traceback__):
        if module_file and Path(frame.filename).resolve() == Path(module_file).resolve():
            found = f"{frame.filename}:{frame.lineno}"
    return found


class T2TSamples(Source):
    """One split of a T2T problem's `generate_samples`, read in chunks of string records."""

    def __init__(self, problem: T2TProblem, t2t_split: str, tmp_dir: str | None) -> None:
        self.problem = problem
        self.t2t_split = t2t_split
        self.tmp_dir = tmp_dir or _scratch()
        cls = type(problem.t2t)
        self.origin = f"{cls.__name__}.generate_samples({t2t_split})"

    def fingerprint(self) -> str:
        cls = type(self.problem.t2t)
        module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
        code = Path(module_file).read_bytes() if module_file and Path(module_file).is_file() else b""
        return f"t2t:{cls.__qualname__}:{self.t2t_split}:{hashlib.sha1(code).hexdigest()}"

    def unit_chunks(self, unit: Any, options: ReadOptions) -> Iterator[Chunk]:
        records: list[dict[str, str]] = []
        done = 0
        for record in self._records():
            records.append(record)
            if len(records) == options.chunk_rows:
                yield self._chunk(records, done)
                done += len(records)
                records = []
        if records:
            yield self._chunk(records, done)

    def _chunk(self, records: list[dict[str, str]], first: int) -> Chunk:
        index = np.arange(first + 1, first + 1 + len(records), dtype=np.int64)
        return Chunk(pd.DataFrame(records, dtype=object), index, index, self.origin, first)

    def _records(self) -> Iterator[dict[str, str]]:
        t2t = self.problem.t2t
        try:
            samples = t2t.generate_samples(self.tmp_dir, self.tmp_dir, self.t2t_split)
            for number, sample in enumerate(samples, 1):
                yield self.problem.record(sample, number, self.tmp_dir)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported with the user's file and line
            raise UserError(f"error in user code {_user_frame(exc, type(t2t))}: {type(exc).__name__}: {exc}") from exc


def _text(problem: T2TProblem, sample: Any, key: str, number: int) -> str:
    if not isinstance(sample, dict) or key not in sample:
        raise UserError(f"{problem.origin}: sample {number} has no '{key}' (a dict with '{key}' is expected)")
    value = sample[key]
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise UserError(f"{problem.origin}: sample {number}'s '{key}' is {type(value).__name__}, not text")
    return value


class T2TProblem(Text2TextProblem):
    """A T2T Text2TextProblem (the class in `t2t_class`) as a Problem here."""

    t2t_class: ClassVar[type] = text_problems.Text2TextProblem
    decode_fields = ("inputs",)
    metrics = ("bleu", "sequence_accuracy")

    def __init__(self) -> None:
        check_mappable(self.t2t_class)
        self.t2t = self.t2t_class()
        self.origin = f"{where(self.t2t_class)}: {self.t2t_class.__name__}"
        self.splits = self._dataset_splits()
        self.per_split = bool(self._property("is_generate_per_split"))
        self.num_shards = {SPLIT_NAMES[s]: n for s, n in self.splits.items()}
        if not self.per_split:
            train, dev = self.splits.get(DatasetSplit.TRAIN, 0), self.splits.get(DatasetSplit.EVAL, 0)
            self.dev_fraction = dev / (train + dev) if train + dev else 0.0
        self.vocab = self._vocab()

    def _property(self, name: str) -> Any:
        try:
            return getattr(self.t2t, name)
        except NotImplementedError:
            raise UserError(f"{self.origin} does not define {name}, which tensor2tensor requires") from None

    def _dataset_splits(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for entry in self._property("dataset_splits"):
            split = entry.get("split") if isinstance(entry, dict) else None
            shards = entry.get("shards") if isinstance(entry, dict) else None
            if split not in SPLIT_NAMES or not isinstance(shards, int) or shards < 1:
                raise UserError(
                    f"{self.origin}: dataset_splits entry {entry!r}: expected "
                    "{'split': DatasetSplit.TRAIN/EVAL/TEST, 'shards': a positive int}"
                )
            found[split] = shards
        if DatasetSplit.TRAIN not in found:
            raise UserError(f"{self.origin}: dataset_splits has no DatasetSplit.TRAIN")
        return found

    def _vocab(self) -> VocabSpec:
        kind = self._property("vocab_type")
        if kind == text_problems.VocabType.SUBWORD:
            spec = VocabSpec(name=self.name, size=int(self._property("approx_vocab_size")))
        elif kind == text_problems.VocabType.CHARACTER:
            spec = VocabSpec(name=self.name, size=CHARACTER_VOCAB_SIZE, model_type="char")
        else:
            raise UserError(
                f"{self.origin}: vocab_type {kind!r} (a token list of your own) cannot map here; "
                "use VocabType.SUBWORD (a SentencePiece model of approx_vocab_size) or VocabType.CHARACTER"
            )
        if self.name not in _VOCAB_TOLD:
            _VOCAB_TOLD.add(self.name)
            logging.info(
                "problem '%s': tensor2tensor vocab_type %s becomes a SentencePiece %s vocabulary of up to %d pieces",
                self.name,
                kind,
                spec.model_type,
                spec.size,
            )
        return spec

    def source(self, tmp_dir: str | None) -> dict[str, Source]:
        if not self.per_split:
            if DatasetSplit.TEST in self.splits:
                logging.info("problem '%s': a test split is generated only with is_generate_per_split", self.name)
            return {"train": T2TSamples(self, DatasetSplit.TRAIN, tmp_dir)}
        return {SPLIT_NAMES[s]: T2TSamples(self, s, tmp_dir) for s in self.splits}

    def record(self, sample: Any, number: int, data_dir: str) -> dict[str, str]:
        """One sample of generate_samples as a record of strings."""
        return {"inputs": _text(self, sample, "inputs", number), "targets": _text(self, sample, "targets", number)}


class T2TClassProblem(T2TProblem):
    """A T2T Text2ClassProblem: each label id becomes its class label as the target text."""

    metrics = ("accuracy",)

    def record(self, sample: Any, number: int, data_dir: str) -> dict[str, str]:
        labels = list(self.t2t.class_labels(data_dir))
        label = sample.get("label") if isinstance(sample, dict) else None
        if isinstance(label, (list, tuple)) and len(label) == 1:
            label = label[0]
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or not 0 <= label < len(labels):
            raise UserError(
                f"{self.origin}: sample {number}'s 'label' is {label!r}; expected an int in [0, {len(labels)})"
            )
        return {"inputs": _text(self, sample, "inputs", number), "targets": str(labels[int(label)])}


class T2TSelfProblem(T2TProblem, SelfSupervisedProblem):
    """A T2T Text2SelfProblem (text alone): trained as a prefix LM, the objective here for
    unlabeled text without sentinels: the model reads a prefix and writes the rest."""

    objective = PrefixLM()
    text_field = "targets"
    decode_fields = ("targets",)
    metrics = ("token_accuracy",)

    def _vocab(self) -> VocabSpec:
        if self.name not in _VOCAB_TOLD:
            logging.info("problem '%s': tensor2tensor Text2SelfProblem trains as a prefix LM here", self.name)
        # The self-supervised input pipeline here reserves T5's sentinels in the vocabulary.
        return dataclasses.replace(super()._vocab(), extra_ids=SelfSupervisedProblem.vocab.extra_ids)

    def record(self, sample: Any, number: int, data_dir: str) -> dict[str, str]:
        return {"targets": _text(self, sample, "targets", number)}


def adapt(cls: type, name: str) -> type:
    """The Problem class here standing for T2T problem class `cls`, registered as `name`."""
    if isinstance(cls, type) and issubclass(cls, text_problems.Text2SelfProblem):
        base: type = T2TSelfProblem
    elif isinstance(cls, type) and issubclass(cls, text_problems.Text2ClassProblem):
        base = T2TClassProblem
    else:
        base = T2TProblem
    doc = (cls.__doc__ or "").strip() or f"tensor2tensor problem {cls.__name__}"
    return type(cls.__name__, (base,), {"t2t_class": cls, "__doc__": doc, "__module__": cls.__module__})
