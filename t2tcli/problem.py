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
    """

    name: str = "default"
    size: int = 8000
    model_type: str = "unigram"
    user_defined_symbols: tuple[str, ...] = ()
    from_file: str | None = None
    from_model: str | None = None
    extra_ids: int = 0
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
        """Raw record -> {"inputs": str, "targets": str}; None drops it (and is counted)."""
        return {"inputs": str(record["inputs"]), "targets": str(record["targets"])}

    def preprocess_frame(self, frame: Any) -> tuple[list[str | None], list[str | None]]:
        """A chunk of raw records (a pandas DataFrame of strings) -> (inputs, targets) lists.

        Datagen calls this, not `preprocess`, so a problem on large data can override it
        with column-wise code; it must agree with `preprocess` row by row, a None input
        standing for a record that `preprocess` drops.
        """
        inputs: list[str | None] = []
        targets: list[str | None] = []
        for record in frame.to_dict("records"):
            pair = self.preprocess(record)
            if pair is None:
                inputs.append(None)
                targets.append(None)
                continue
            if not isinstance(pair, dict) or "inputs" not in pair or "targets" not in pair:
                raise UserError(
                    f"problem '{self.name}': preprocess must return {{'inputs': str, 'targets': str}} or None, "
                    f"got {pair!r}"
                )
            inputs.append(pair["inputs"])
            targets.append(pair["targets"])
        return inputs, targets

    def format_input(self, line: str) -> str:
        """A line given to t2t-decode -> the `inputs` string the model was trained on.

        The default passes the line through; problems whose inputs are built from
        several fields (e.g. question pairs) parse tab-separated fields here.
        """
        return line

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
    return files


def read_meta(data_dir: str, problem_name: str) -> dict[str, Any]:
    path = meta_path(data_dir, problem_name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(
            f"{path} not found; run t2t-datagen --problem={problem_name} --data_dir={data_dir} first"
        ) from None
