"""The Problem contract: what datagen, training, eval and decode need to know of a task.

A Problem is declarative. Subclasses say where raw records come from (`source`), how a
record becomes an {"inputs", "targets"} pair of strings (`preprocess`), which
vocabulary to use (`vocab`), and how to score outputs (`postprocess`, `metrics`).
Everything downstream reads the files that `t2t-datagen` writes, named by the
functions at the bottom of this module, so the binaries never guess paths.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Any, ClassVar

from t2tcli.errors import UserError

SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class VocabSpec:
    """How to obtain the SentencePiece vocabulary shared by the problems that name it.

    `from_file` reuses an existing SentencePiece model (e.g. T5's `sentencepiece.model`)
    and `from_model` a Hugging Face model directory's `spiece.model` with its sentinels,
    instead of training one, so a pretrained checkpoint lines up with the ids.
    `extra_ids` appends T5's sentinels <extra_id_0> ... (T5 checkpoints have 100) to a
    trained model or to `from_file`'s.

    A trained vocabulary normalises text as T5's does: newlines and tabs become spaces,
    runs of spaces one space, so models see words, not layout. `keep_whitespace=True`
    keeps newlines, tabs and runs of spaces as tokens, and decoded text gets them back.
    """

    name: str = "default"
    size: int = 8000
    model_type: str = "unigram"
    user_defined_symbols: tuple[str, ...] = ()
    from_file: str | None = None
    from_model: str | None = None
    extra_ids: int = 0
    keep_whitespace: bool = False
    character_coverage: float = 1.0
    max_training_sentences: int = 300_000

    @property
    def source(self) -> str | None:
        """The file or model directory the vocabulary is copied from (None: trained)."""
        return self.from_model or self.from_file


class Problem:
    """Anything `--problem` can name: a single task or a mixture of tasks."""

    name: ClassVar[str] = ""
    vocab: ClassVar[VocabSpec] = VocabSpec()
    is_mixture: ClassVar[bool] = False

    def components(self) -> list[tuple[Text2TextProblem, float]]:
        """The tasks this trains on with their sampling rates (a single task: itself, 1.0)."""
        raise NotImplementedError

    def vocab_file(self, data_dir: str) -> str:
        return vocab_path(data_dir, self.vocab.name)


class Text2TextProblem(Problem):
    """One text-to-text task. Subclasses override `source` and `preprocess`."""

    dev_fraction: ClassVar[float] = 0.1
    metrics: ClassVar[tuple[str, ...]] = ("sequence_accuracy",)
    num_shards: ClassVar[dict[str, int]] = {"train": 4, "dev": 1, "test": 1}
    # Skipped rows above this fraction of the input fail the run instead of being logged.
    max_skipped_fraction: ClassVar[float] = 0.01
    # The record fields a t2t-decode line holds, tab-separated, in this order. None: the
    # source's columns that `preprocess` builds `inputs` from (see t2tcli.preprocessing).
    decode_fields: ClassVar[tuple[str, ...] | None] = None

    def components(self) -> list[tuple[Text2TextProblem, float]]:
        return [(self, 1.0)]

    def source(self, tmp_dir: str | None) -> Any:
        """Where raw records come from: a `t2tcli.sources.Source`, or a dict of them by split.

        A single source (or one under "train" with no "dev" beside it) is split into
        train and dev by a hash of each row's key, `dev_fraction` going to dev; "test"
        names an optional test split. `tmp_dir` is `--tmp_dir`, None when not given.
        """
        raise NotImplementedError(f"problem '{self.name}' defines no source")

    def preprocess(self, record: dict[str, Any]) -> dict[str, str] | None:
        """Raw record -> {"inputs": str, "targets": str}; None drops it (and is counted).

        The one description of the task: datagen, t2t-eval and t2t-decode all run it.
        t2t-decode gives it a record of the decode line's fields only (a missing field
        reads as "", and `field in record` is False), as an unlabeled test split would.
        Datagen may give it whole columns at once (t2tcli.columns): written with str
        methods, `+` and the helpers of t2tcli.text, it then runs at C speed; anything
        else still works, record by record.
        """
        return {"inputs": record["inputs"], "targets": record["targets"]}

    def postprocess(self, text: str) -> str:
        """Decoded text -> the value that metrics compare (e.g. a class label)."""
        return text.strip()

    def meta(self, data_dir: str) -> dict[str, Any]:
        return read_meta(data_dir, self.name)


class Mixture(Problem):
    """Several problems trained together, sampled by rate; they share one vocabulary.

    Subclasses set `problems` to a list of (problem name, rate) pairs; a rate may be a
    float, or "examples" to sample in proportion to each problem's train size.
    """

    is_mixture: ClassVar[bool] = True
    problems: ClassVar[list[tuple[str, float | str]]] = []

    def components(self) -> list[tuple[Text2TextProblem, float]]:
        from t2tcli import registry

        out: list[tuple[Text2TextProblem, float]] = []
        for name, rate in self.problems:
            task = registry.problem(name)
            if task.is_mixture:
                raise UserError(f"mixture '{self.name}': component '{name}' is itself a mixture")
            if task.vocab.name != self.vocab.name:
                raise UserError(
                    f"mixture '{self.name}': problem '{name}' uses vocab '{task.vocab.name}', "
                    f"the mixture uses '{self.vocab.name}'"
                )
            out.append((task, rate))
        return out


def vocab_path(data_dir: str, vocab_name: str) -> str:
    return os.path.join(data_dir, f"vocab.{vocab_name}.model")


def meta_path(data_dir: str, problem_name: str) -> str:
    return os.path.join(data_dir, f"{problem_name}.meta.json")


def shard_path(data_dir: str, problem_name: str, split: str, index: int, count: int) -> str:
    return os.path.join(data_dir, f"{problem_name}-{split}-{index:05d}-of-{count:05d}")


def data_files(data_dir: str, problem_name: str, split: str) -> list[str]:
    """The complete shards of one split; a clear error when datagen has not produced them."""
    pattern = os.path.join(data_dir, f"{problem_name}-{split}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]")
    files = sorted(glob.glob(pattern))
    if not files:
        raise UserError(
            f"no '{split}' data for problem '{problem_name}' in {data_dir}; "
            f"run t2t-datagen --problem={problem_name} --data_dir={data_dir} first"
        )
    _check_sizes(data_dir, problem_name, split, files)
    return files


def _check_sizes(data_dir: str, problem_name: str, split: str, files: list[str]) -> None:
    """Each shard must have the size datagen recorded: a truncated or replaced shard is
    named here rather than failing deep inside TensorFlow's reader."""
    if not os.path.exists(meta_path(data_dir, problem_name)):
        return
    try:
        recorded = read_meta(data_dir, problem_name).get("splits", {}).get(split, {})
    except (UserError, json.JSONDecodeError):
        return
    sizes = dict(zip(recorded.get("files", []), recorded.get("bytes", []), strict=False))
    for path in files:
        expected = sizes.get(os.path.basename(path))
        if expected is not None and os.path.getsize(path) != expected:
            raise UserError(
                f"{path}: {os.path.getsize(path)} bytes, but t2t-datagen wrote {expected}: the shard is truncated "
                f"or was replaced; t2t-datagen --problem={problem_name} --data_dir={data_dir} regenerates it"
            )


def read_meta(data_dir: str, problem_name: str) -> dict[str, Any]:
    path = meta_path(data_dir, problem_name)
    from t2tcli import fs

    if not fs.exists(path):
        raise UserError(f"{path} not found; run t2t-datagen --problem={problem_name} --data_dir={data_dir} first")
    return json.loads(fs.read_bytes(path).decode("utf-8"))
