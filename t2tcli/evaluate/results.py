"""Where t2t-eval's results go: a JSON lines file of records, TensorBoard scalars, the
decoded texts with the inputs and targets they pair with, and the table printed at the end.

A record is written whole or not at all, and a checkpoint evaluated again replaces its
earlier record, so the results file can be read (and evaluation restarted) at any time.

Imports: core, io.
"""

from __future__ import annotations

import json
import os
from typing import Any

from t2tcli.errors import UserError
from t2tcli.io import atomic, fs, preflight, text_files

RESULTS_FILE = "metrics.jsonl"


def eval_dir(model_dir: str, split: str) -> str:
    return os.path.join(model_dir, f"eval_{split}")


def writable_results_dir(model_dir: str, split: str, chosen: str | None) -> str:
    """The results directory (`chosen`, else model_dir/eval_<split>), checked before any work.

    Where the default one cannot be written (a read-only model_dir), the one-line error
    says that --eval_dir is how such a model_dir is evaluated.
    """
    if chosen:
        preflight.check_output_dir(chosen, "eval_dir")
        return chosen
    directory = eval_dir(model_dir, split)
    try:
        preflight.check_output_dir(directory, "model_dir")
    except UserError as exc:
        raise UserError(f"{exc}; pass --eval_dir=DIR to write the results elsewhere") from None
    return directory


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
        return self.write_lines(problem, step, "predictions", texts)

    def write_lines(self, problem: str, step: int, kind: str, texts: list[str]) -> str:
        """Writes `<problem>-<step>.<kind>.txt` whole or not at all, one escaped line per
        example in the split's order, so its line N pairs with line N of the others (inputs,
        targets, predictions); returns the file's name within the directory."""
        name = f"{problem}-{step}.{kind}.txt"
        fs.makedirs(self.directory)
        atomic.write_text(os.path.join(self.directory, name), "".join(text_files.escape(t) + "\n" for t in texts))
        return name

    def write(self, record: dict[str, Any]) -> None:
        """Appends the record; one of the same checkpoint, problem and split (an evaluation
        run again, e.g. after an interrupted one) is replaced, so each appears once."""
        fs.makedirs(self.directory)
        line = json.dumps(record, sort_keys=True, allow_nan=True)
        key = (record["step"], record["problem"], record["split"])
        earlier = self._lines()
        if any(_key_of(old) == key for old in earlier) or fs.is_remote(self.path):  # no appending on GCS
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
        if not fs.exists(self.path):
            return []
        return [line for line in fs.read_bytes(self.path).decode("utf-8").splitlines() if line.strip()]

    def evaluated_steps(self, split: str) -> set[int]:
        """Steps already in the results file, so a restarted `--wait` skips them."""
        steps: set[int] = set()
        for line in self._lines():
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
