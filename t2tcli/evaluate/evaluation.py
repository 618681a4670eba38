"""t2t-eval's work: decode a split with each chosen checkpoint and score it.

Per checkpoint and problem (each component of a mixture separately) it decodes the
split, applies the problem's `postprocess` to predictions and targets, computes the
problem's metrics, and the teacher-forced loss and perplexity of the targets. Results
go to a JSON lines file and TensorBoard summaries under `model_dir/eval_<split>`, the
decoded texts to `<problem>-<step>.predictions.txt` beside them, with the inputs and
targets they answer in `<problem>-<step>.inputs.txt` and `.targets.txt` (one line per
example, in the split's order, as t2t-decode writes lines), so they pair line by line.

The model is behind a small `DecodesAndScores` interface, so the orchestration (which
checkpoints, output files) is tested without one; results are written by
t2tcli.evaluate.results, and a training run followed by t2tcli.evaluate.following.

Imports: core, data, decode, evaluate.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from absl import logging

from t2tcli.data import layout
from t2tcli.data import problem as problem_lib
from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.decode.batching import fit
from t2tcli.errors import UserError
from t2tcli.evaluate import metrics
from t2tcli.evaluate.results import ResultsSink


@dataclasses.dataclass
class Example:
    inputs: list[int]
    targets: list[int]


class DecodesAndScores(Protocol):
    """What evaluation needs from a model at a checkpoint: decodes and target log-likelihoods."""

    def decode(self, checkpoint_path: str, inputs: list[list[int]]) -> list[list[int]]:
        """Output ids for each input (ids end in EOS), in order."""

    def score(self, checkpoint_path: str, inputs: list[list[int]], targets: list[list[int]]) -> list[float]:
        """Sum of log-probabilities of each target (ids end in EOS) given its input."""


def read_examples(data_dir: str, problem_name: str, split: str, limit: int = 0) -> list[Example]:
    """The (inputs, targets) ids of a problem's split as t2t-datagen wrote them."""
    from t2tcli.compat import tf

    files = layout.data_files(data_dir, problem_name, split)
    spec = {k: tf.io.RaggedFeature(tf.int64) for k in ("inputs", "targets")}
    ds = tf.data.TFRecordDataset(files)
    if limit:
        ds = ds.take(limit)
    out: list[Example] = []
    for batch in ds.batch(4096).map(lambda records: tf.io.parse_example(records, spec)):
        inputs, targets = (batch[k].to_list() for k in ("inputs", "targets"))
        out.extend(Example(_strip_eos(x), _strip_eos(y)) for x, y in zip(inputs, targets, strict=True))
    return out


def _strip_eos(ids: list[int]) -> list[int]:
    return ids[:-1] if ids and ids[-1] == EOS_ID else ids


@dataclasses.dataclass
class Task:
    """One problem to score: its examples and how its outputs are compared."""

    name: str
    examples: list[Example]
    metric_names: Sequence[str]
    postprocess: Callable[[str], str]


class Evaluator:
    """Scores checkpoints on a fixed set of tasks and records the results."""

    def __init__(
        self,
        model: DecodesAndScores,
        tasks: list[Task],
        decode_text: Callable[[list[int]], str],
        inputs_length: int,
        targets_length: int,
        sink: ResultsSink,
        split: str,
    ) -> None:
        self.model = model
        self.tasks = tasks
        self.decode_text = decode_text
        self.inputs_length = inputs_length
        self.targets_length = targets_length
        self.sink = sink
        self.split = split
        for task in tasks:
            metrics.check_names(task.metric_names, f"problem '{task.name}'")

    def evaluate(self, step: int, path: str, read_at: str = "") -> list[dict[str, Any]]:
        """Records (and returns) one result per task for the checkpoint at `path`, read at
        `read_at` when given (a pinned copy: `checkpoints.pinned`).

        All tasks share one decode and one scoring pass, so the model graph is built
        twice per checkpoint however many problems a mixture has.
        """
        started = time.monotonic()
        inputs: list[list[int]] = []
        targets: list[list[int]] = []
        for task in self.tasks:
            for ex in task.examples:
                inputs.append(fit(ex.inputs, self.inputs_length)[0])
                targets.append(fit(ex.targets, self.targets_length)[0])
        logging.info("evaluating step %d (%s) on %d %s examples", step, path, len(inputs), self.split)
        outputs = self.model.decode(read_at or path, inputs)
        scores = self.model.score(read_at or path, inputs, targets)
        records = []
        offset = 0
        for task in self.tasks:
            n = len(task.examples)
            texts = [self.decode_text(ids) for ids in outputs[offset : offset + n]]
            target_texts = [self.decode_text(ids) for ids in targets[offset : offset + n]]
            inputs_file = self.sink.write_lines(
                task.name, step, "inputs", [self.decode_text(ids) for ids in inputs[offset : offset + n]]
            )
            targets_file = self.sink.write_lines(task.name, step, "targets", target_texts)
            predictions_file = self.sink.write_predictions(task.name, step, texts)
            preds = [task.postprocess(text) for text in texts]
            refs = [task.postprocess(text) for text in target_texts]
            values = metrics.compute(task.metric_names, refs, preds)
            output_ids = [_strip_eos(ids) for ids in outputs[offset : offset + n]]
            target_ids = [_strip_eos(ids) for ids in targets[offset : offset + n]]
            values.update(metrics.compute_ids(task.metric_names, target_ids, output_ids))
            tokens = sum(len(t) for t in targets[offset : offset + n])
            loss = -sum(scores[offset : offset + n]) / max(tokens, 1)
            values["loss"] = loss
            values["perplexity"] = metrics.perplexity(loss)
            offset += n
            record = {
                "step": step,
                "checkpoint": path,
                "problem": task.name,
                "split": self.split,
                "examples": n,
                "metrics": values,
                "predictions": predictions_file,
                "inputs": inputs_file,
                "targets": targets_file,
                "seconds": round(time.monotonic() - started, 3),
            }
            self.sink.write(record)
            records.append(record)
        return records


def corrupted_examples(
    task: problem_lib.Text2TextProblem, data_dir: str, split: str, lengths: tuple[int, int], limit: int = 0
) -> list[Example]:
    """A self-supervised problem's texts as its objective makes examples of them, with the
    seed training's own evaluation uses (`inputs.EVAL_SEED`): the first `limit` examples
    (0: all), reading only as many texts as they take."""
    from t2tcli.compat import tf
    from t2tcli.data.input import corruption, inputs

    records = tf.data.TFRecordDataset(layout.data_files(data_dir, task.name, split))
    spec = {"targets": tf.io.VarLenFeature(tf.int64)}
    texts = records.map(
        lambda record: tf.cast(tf.sparse.to_dense(tf.io.parse_single_example(record, spec)["targets"]), tf.int32)
    )
    texts = texts.map(lambda ids: tf.cond(tf.reduce_any(tf.equal(ids[-1:], EOS_ID)), lambda: ids[:-1], lambda: ids))
    vocab_file = task.vocab_file(data_dir)
    room = inputs.room(vocab_file, *lengths)
    made = corruption.corrupted(texts, task.objective, room, inputs.EVAL_SEED, vocab_file)
    if limit:
        made = made.take(limit)
    return [Example(ex["inputs"].tolist(), ex["targets"].tolist()) for ex in made.as_numpy_iterator()]


def tasks_for(
    problem: problem_lib.Problem, data_dir: str, split: str, limit: int, lengths: tuple[int, int] = (0, 0)
) -> list[Task]:
    """One Task per component problem, with its examples of `split`; a self-supervised
    problem's are its texts as its objective corrupts them for `lengths` (inputs, targets)."""
    tasks = []
    for task, _ in problem.components():
        splits = layout.read_meta(data_dir, task.name).get("splits", {})
        if split not in splits:
            have = ", ".join(sorted(splits)) or "none"
            raise UserError(f"problem '{task.name}' has no '{split}' split (its source defines {have})")
        # --max_examples counts examples: a self-supervised problem's are pieces of its texts, not the texts.
        if task.objective is not None:
            examples = corrupted_examples(task, data_dir, split, lengths, limit)
        else:
            examples = read_examples(data_dir, task.name, split, limit)
        if not examples:
            raise UserError(f"problem '{task.name}' has no '{split}' examples in {data_dir}")
        if not any(ex.targets for ex in examples):
            raise UserError(
                f"the '{split}' split of problem '{task.name}' is unlabeled (every target is empty): there is "
                "nothing to score; decode it with t2t-decode"
            )
        tasks.append(Task(task.name, examples, tuple(task.metrics), task.postprocess))
    return tasks
