"""t2t-eval's work: decode a split with each chosen checkpoint and score it.

Per checkpoint and problem (each component of a mixture separately) it decodes the
split, applies the problem's `postprocess` to predictions and targets, computes the
problem's metrics, and the teacher-forced loss and perplexity of the targets. Results
go to a JSON lines file and TensorBoard summaries under `model_dir/eval_<split>`, the
decoded texts to `<problem>-<step>.predictions.txt` beside them (one line per example,
in the split's order, as t2t-decode writes lines).

The model is behind a small `Backend` interface, so the orchestration (which
checkpoints, following a training run, output files) is tested without one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from absl import logging

from t2tcli import checkpoints, metrics, run_info, textio
from t2tcli import problem as problem_lib
from t2tcli.decoding import fit
from t2tcli.errors import UserError
from t2tcli.io import atomic
from t2tcli.vocab import EOS_ID

RESULTS_FILE = "metrics.jsonl"


@dataclasses.dataclass
class Example:
    inputs: list[int]
    targets: list[int]


class Backend(Protocol):
    """What evaluation needs from a model: decodes and target log-likelihoods."""

    def decode(self, checkpoint_path: str, inputs: list[list[int]]) -> list[list[int]]:
        """Output ids for each input (ids end in EOS), in order."""

    def score(self, checkpoint_path: str, inputs: list[list[int]], targets: list[list[int]]) -> list[float]:
        """Sum of log-probabilities of each target (ids end in EOS) given its input."""


def eval_dir(model_dir: str, split: str) -> str:
    return os.path.join(model_dir, f"eval_{split}")


def read_examples(data_dir: str, problem_name: str, split: str, limit: int = 0) -> list[Example]:
    """The (inputs, targets) ids of a problem's split as t2t-datagen wrote them."""
    from t2tcli.compat import tf

    files = problem_lib.data_files(data_dir, problem_name, split)
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
        backend: Backend,
        tasks: list[Task],
        decode_text: Callable[[list[int]], str],
        inputs_length: int,
        targets_length: int,
        sink: ResultsSink,
        split: str,
    ) -> None:
        self.backend = backend
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
        outputs = self.backend.decode(read_at or path, inputs)
        scores = self.backend.score(read_at or path, inputs, targets)
        records = []
        offset = 0
        for task in self.tasks:
            n = len(task.examples)
            texts = [self.decode_text(ids) for ids in outputs[offset : offset + n]]
            predictions_file = self.sink.write_predictions(task.name, step, texts)
            preds = [task.postprocess(text) for text in texts]
            refs = [task.postprocess(self.decode_text(ids)) for ids in targets[offset : offset + n]]
            values = metrics.compute(task.metric_names, refs, preds)
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
                "seconds": round(time.monotonic() - started, 3),
            }
            self.sink.write(record)
            records.append(record)
        return records


class ResultsSink:
    """Appends records to `eval_<split>/metrics.jsonl` and writes TensorBoard scalars.

    Each record is one line written and flushed whole, so a reader (or a crash) never
    sees half a record. Scalars are tagged `<problem>/<metric>` at the checkpoint step.
    """

    def __init__(self, directory: str, tensorboard: bool = True) -> None:
        # Made at the first result: a run that fails before one leaves nothing behind.
        self.path = os.path.join(directory, RESULTS_FILE)
        self.directory = directory
        self.tensorboard = tensorboard
        self._writer = None

    def write_predictions(self, problem: str, step: int, texts: list[str]) -> str:
        """Writes the decoded texts, one line each (escaped as t2t-decode writes them), in
        the split's order; returns the file's name within the directory."""
        name = f"{problem}-{step}.predictions.txt"
        os.makedirs(self.directory, exist_ok=True)
        atomic.write_text(os.path.join(self.directory, name), "".join(textio.escape(t) + "\n" for t in texts))
        return name

    def write(self, record: dict[str, Any]) -> None:
        """Appends the record; one of the same checkpoint, problem and split (an evaluation
        run again, e.g. after an interrupted one) is replaced, so each appears once."""
        os.makedirs(self.directory, exist_ok=True)
        line = json.dumps(record, sort_keys=True, allow_nan=True)
        key = (record["step"], record["problem"], record["split"])
        earlier = self._lines()
        if any(_key_of(old) == key for old in earlier):
            kept = [old for old in earlier if _key_of(old) != key]
            atomic.write_text(self.path, "".join(old + "\n" for old in kept) + line + "\n")
        else:
            # Never through a symlink: a model_dir from elsewhere could plant one here.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
        if self.tensorboard:
            self._scalars(record)

    def _scalars(self, record: dict[str, Any]) -> None:
        from t2tcli.compat import tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.directory)
        with self._writer.as_default():
            for name, value in record["metrics"].items():
                tf.summary.scalar(f"{record['problem']}/{name}", float(value), step=int(record["step"]))
        self._writer.flush()

    def _lines(self) -> list[str]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if line.strip()]

    def evaluated_steps(self, split: str) -> set[int]:
        """Steps already in the results file, so a restarted `--wait` skips them."""
        steps: set[int] = set()
        if not os.path.exists(self.path):
            return steps
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("split") == split:
                    steps.add(int(record["step"]))
        return steps


def _key_of(line: str) -> tuple[Any, ...] | None:
    """(step, problem, split) of a results line; None for a line that is not a record."""
    try:
        record = json.loads(line)
        return (record["step"], record["problem"], record["split"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def train_steps(model_dir: str) -> int | None:
    """The step at which the training run writing model_dir stops, if recorded."""
    try:
        info = run_info.load_run(model_dir)
    except UserError:
        return None
    value = info.flags.get("train_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def wait_for_run(
    model_dir: str,
    wait_timeout: float,
    poll_seconds: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits (bounded) for t2t-train to describe its run in model_dir, for `--wait`
    started alongside training."""
    started = clock()
    while not os.path.exists(os.path.join(model_dir, "run.json")):
        waited = clock() - started
        if waited >= wait_timeout:
            raise UserError(f"--wait: no training run appeared in --model_dir={model_dir} within {wait_timeout:g} s")
        if waited == 0:
            logging.info("waiting for a training run in %s", model_dir)
        sleep(max(0.0, min(poll_seconds, wait_timeout - waited)))


@dataclasses.dataclass
class WaitOutcome:
    evaluated: list[int]
    reason: str  # "finished" or "timeout"


def follow(
    model_dir: str,
    evaluate: Callable[[int, str], Any],
    skip: set[int],
    wait_timeout: float,
    poll_seconds: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitOutcome:
    """Evaluates each new checkpoint of a training run until it is done.

    Stops when a checkpoint at (or past) the run's `train_steps` has been evaluated,
    or when no new checkpoint has appeared for `wait_timeout` seconds: it never waits
    forever on a run that died. A checkpoint deleted by the trainer before its turn
    (`keep_checkpoint_max`) is skipped with a warning.
    """
    seen = set(skip)
    evaluated: list[int] = []
    last_progress = clock()
    while True:
        target = train_steps(model_dir)
        new = [(s, p) for s, p in checkpoints.list_checkpoints(model_dir) if s not in seen]
        for step, path in new:
            seen.add(step)
            try:
                evaluate(step, path)
                evaluated.append(step)
            except _vanished_errors() as exc:
                logging.warning("checkpoint %s disappeared before it was evaluated (%s); skipping", path, exc)
        if new:
            last_progress = clock()
        latest = max(seen, default=-1)
        if target is not None and latest >= target:
            logging.info("training reached step %d of %d: done", latest, target)
            return WaitOutcome(evaluated, "finished")
        idle = clock() - last_progress
        if idle >= wait_timeout:
            logging.warning("no new checkpoint in %s for %.0f s (--wait_timeout); stopping", model_dir, idle)
            return WaitOutcome(evaluated, "timeout")
        sleep(max(0.0, min(poll_seconds, wait_timeout - idle)))


def _vanished_errors() -> tuple[type[BaseException], ...]:
    from t2tcli.compat import tf

    return (tf.errors.NotFoundError, FileNotFoundError, checkpoints.CheckpointGone)


def table(records: list[dict[str, Any]]) -> str:
    """A compact text table: one row per (checkpoint, problem), one column per metric."""
    if not records:
        return "no checkpoint evaluated"
    names: list[str] = []
    for r in records:
        for k in r["metrics"]:
            if k not in names:
                names.append(k)
    header = ["step", "problem", "n", *names]
    rows = [
        [str(r["step"]), r["problem"], str(r["examples"])] + [_fmt(r["metrics"].get(k)) for k in names] for r in records
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(x.rjust(w) if i != 1 else x.ljust(w) for i, (x, w) in enumerate(zip(row, widths, strict=True)))
        for row in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"


def tasks_for(problem: problem_lib.Problem, data_dir: str, split: str, limit: int) -> list[Task]:
    """One Task per component problem, with its examples of `split`."""
    tasks = []
    for task, _ in problem.components():
        splits = problem_lib.read_meta(data_dir, task.name).get("splits", {})
        if split not in splits:
            have = ", ".join(sorted(splits)) or "none"
            raise UserError(f"problem '{task.name}' has no '{split}' split (its source defines {have})")
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
