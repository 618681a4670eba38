"""The Problem contract: what datagen, training, eval and decode need to know of a task.

A Problem is declarative. Subclasses say where raw records come from (`source`), how a
record becomes an {"inputs", "targets"} pair of strings (`preprocess`), which
vocabulary to use (`vocab`), and how to score outputs (`postprocess`, `metrics`).
Everything downstream reads the files that `t2t-datagen` writes, named by
`t2tcli.data.layout`, so the binaries never guess paths. Imports: core and data (layout, objectives and registry).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from t2tcli.data.layout import read_meta, vocab_path
from t2tcli.data.objectives import Objective, SpanCorruption
from t2tcli.errors import UserError


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
    # The record fields a t2t-decode line holds, tab-separated, in this order. None: the one
    # field `preprocess` builds `inputs` from, found by calling it on a probe record (see
    # t2tcli.data.sources.preprocessing); a preprocess that reads several must name them here.
    decode_fields: ClassVar[tuple[str, ...] | None] = None
    # True: datagen may call `preprocess` with whole columns at once (t2tcli.data.sources.columns),
    # checked against record-by-record results on each run's first rows; it then runs at C
    # speed. Only for a preprocess written with str methods, `+` and t2tcli.text's helpers.
    columnwise: ClassVar[bool] = False
    # A self-supervised objective (t2tcli.data.objectives) the training input corrupts the
    # text with; None: the pairs are trained on as written. See SelfSupervisedProblem.
    objective: ClassVar[Objective | None] = None

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
        With `columnwise = True`, datagen gives it whole columns at once.
        """
        return {"inputs": record["inputs"], "targets": record["targets"]}

    def postprocess(self, text: str) -> str:
        """Decoded text -> the value that metrics compare (e.g. a class label)."""
        return text.strip()

    def meta(self, data_dir: str) -> dict[str, Any]:
        return read_meta(data_dir, self.name)


class SelfSupervisedProblem(Text2TextProblem):
    """Unlabeled text trained on with a self-supervised objective (T5's span corruption by
    default): a subclass names its `source` and the record field holding the text.

    Datagen stores each record's text tokenized, once; the training input concatenates
    the texts, cuts the stream into pieces and corrupts each piece anew every epoch
    (t2tcli.data.input.corruption). The vocabulary gets T5's 100 sentinels, so a model
    pretrained here can be fine-tuned on a supervised problem generated with
    `t2t-datagen --vocab_from=<this vocabulary>`. t2t-decode feeds a line to the model as
    it is (sentinels and all); t2t-eval corrupts the dev split with a fixed seed.
    """

    objective: ClassVar[Objective | None] = SpanCorruption()
    text_field: ClassVar[str] = "text"
    # Problems (e.g. the one a model pretrained here is fine-tuned on) whose dev and test texts
    # this text leaves out, so they stay unseen (t2tcli.data.datagen.leave_out; also t2t-datagen --leave_out_dev_of).
    leave_out_dev_of: ClassVar[tuple[str, ...]] = ()
    vocab = VocabSpec(name="text", size=8000, extra_ids=100)
    metrics = ("token_accuracy",)
    columnwise = True

    def preprocess(self, record: dict[str, Any]) -> dict[str, str]:
        return {"inputs": "", "targets": record[self.text_field]}


class Mixture(Problem):
    """Several problems trained together, sampled by rate; they share one vocabulary.

    Subclasses set `problems` to a list of (problem name, rate) pairs; a rate is a number,
    or a function of (problem, data_dir, split) giving one, such as `by_examples`: in
    proportion to each problem's number of examples in the split.
    """

    is_mixture: ClassVar[bool] = True
    problems: ClassVar[list[tuple[str, Rate]]] = []

    def components(self) -> list[tuple[Text2TextProblem, Rate]]:
        from t2tcli import registry

        out: list[tuple[Text2TextProblem, Rate]] = []
        for name, rate in self.problems:
            task = registry.problem(name)
            if task.is_mixture:
                raise UserError(f"mixture '{self.name}': component '{name}' is itself a mixture")
            if task.vocab.name != self.vocab.name:
                raise UserError(
                    f"mixture '{self.name}': problem '{name}' uses vocab '{task.vocab.name}', "
                    f"the mixture uses '{self.vocab.name}'"
                )
            if rate == "examples":  # the spelling before rates were functions
                rate = by_examples
            if not callable(rate) and (isinstance(rate, bool) or not isinstance(rate, int | float)):
                raise UserError(
                    f"mixture '{self.name}': the rate of '{name}' is {rate!r}; use a number or a function "
                    "(problem, data_dir, split) -> number such as t2tcli.problem.by_examples"
                )
            out.append((task, rate))
        return out


def by_examples(problem: Text2TextProblem, data_dir: str, split: str) -> float:
    """A mixture rate: the problem's number of examples in the split (as datagen recorded it)."""
    count = read_meta(data_dir, problem.name).get("splits", {}).get(split, 0)
    if isinstance(count, dict):
        count = count.get("examples", count.get("num_examples", 0))
    return float(count)


# A mixture component's sampling rate: a number, or computed from the generated data.
Rate = float | Callable[[Text2TextProblem, str, str], float]
