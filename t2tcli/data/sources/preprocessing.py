"""How a problem's one `preprocess` is applied: to datagen's chunks and to t2t-decode's lines.

Datagen calls `ChunkPreprocessor` on chunks of raw records; t2t-decode turns each line
into a record of the problem's decode fields and calls the same `preprocess` on it
(`DecodeLines`). Nothing else builds a model input from raw text, so a decoded line is
formatted exactly as training data was.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from absl import logging

from t2tcli.data.sources import columns
from t2tcli.errors import UserError
from t2tcli.io import text_files

# Rows on which a column-wise result is compared with the record-by-record one before use.
VERIFY_ROWS = 64


def _pair(task: Any, out: Any) -> tuple[str | None, str | None]:
    if out is None:
        return None, None
    if not isinstance(out, dict) or "inputs" not in out or "targets" not in out:
        raise UserError(
            f"problem '{task.name}': preprocess must return {{'inputs': str, 'targets': str}} or None, got {out!r}"
        )
    return out["inputs"], out["targets"]


def record_by_record(task: Any, frame: pd.DataFrame) -> tuple[list[str | None], list[str | None]]:
    """(inputs, targets) of each record, None for a record preprocess drops."""
    pairs = [_pair(task, task.preprocess(record)) for record in frame.to_dict("records")]
    return [p[0] for p in pairs], [p[1] for p in pairs]


class ChunkPreprocessor:
    """A problem's preprocess over datagen's chunks: record by record, or, for a problem that
    says `columnwise = True`, column-wise once that has given what record by record gives on
    the first rows."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.columnwise: bool | None = None if getattr(task, "columnwise", False) else False  # None: not tried yet

    def __call__(self, frame: pd.DataFrame) -> tuple[list[str | None], list[str | None]]:
        if self.columnwise is not False and len(frame):
            result = columns.run(self.task.preprocess, {c: frame[c].tolist() for c in frame.columns})
            if result is not None and self.columnwise is None:
                head = frame.iloc[:VERIFY_ROWS]
                if record_by_record(self.task, head) != (result[0][: len(head)], result[1][: len(head)]):
                    result = None
            if result is not None:
                self.columnwise = True
                return result
            if self.columnwise is None:
                self.columnwise = False
                logging.warning(
                    "problem '%s' says columnwise = True, but its preprocess does not run column-wise (or gives "
                    "other results that way): it runs record by record",
                    self.task.name,
                )
        return record_by_record(self.task, frame)


class DecodeRecord(dict):
    """A decode line's fields as a record: a field the line does not hold (the target's)
    reads as "", and `field in record` is False for it, as for an unlabeled test split."""

    def __missing__(self, key: str) -> str:
        return ""


class _Probe(dict):
    """A record that answers every field with a marker and remembers what was read."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def __missing__(self, key: str) -> str:
        self.read.append(key)
        return f"\ue000{len(self.read) - 1}\ue001"

    def __contains__(self, key: object) -> bool:
        return False  # targets are what a decode line leaves out


def decode_fields(task: Any) -> tuple[str, ...]:
    """The fields a t2t-decode line holds, tab-separated: the problem's `decode_fields`, or
    the fields `preprocess` reads and builds `inputs` from, in the order it reads them."""
    if task.decode_fields is not None:
        return tuple(task.decode_fields)
    probe = _Probe()
    hint = f"problem '{task.name}': set decode_fields = (...) to the record fields a decode line holds"
    try:
        inputs, _ = _pair(task, task.preprocess(probe))
    except Exception as exc:  # noqa: BLE001 - any failure means the fields cannot be told
        raise UserError(f"{hint} (reading them from preprocess failed: {type(exc).__name__}: {exc})") from None
    if not isinstance(inputs, str):
        raise UserError(f"{hint} (preprocess dropped a record of all its fields)")
    fields = tuple(name for i, name in enumerate(probe.read) if f"\ue000{i}\ue001" in inputs)
    if not fields:
        raise UserError(f"{hint} (its inputs hold none of the fields it read: {', '.join(probe.read) or 'none'})")
    if len(fields) > 1:
        raise UserError(f"{hint} (its inputs are built from several: {', '.join(fields)}, in the order a line holds)")
    return fields


class DecodeLines:
    """t2t-decode's line -> the model's input text, through the problem's preprocess."""

    def __init__(self, task: Any) -> None:
        self.task = task
        # A self-supervised model reads text as its objective left it (sentinels and
        # all), which is what a decode line holds: it goes to the model as it is.
        self.verbatim = getattr(task, "objective", None) is not None
        self.fields = ("text",) if self.verbatim else decode_fields(task)

    def __call__(self, line: str) -> str:
        if self.verbatim:
            return text_files.unescape(line)
        if len(self.fields) == 1:
            values = [line]
        else:
            values = line.split("\t")
            if len(values) != len(self.fields):
                raise UserError(
                    f"expected {len(self.fields)} tab-separated fields ({', '.join(self.fields)}), got {len(values)}"
                )
        record = DecodeRecord(zip(self.fields, map(text_files.unescape, values), strict=True))
        try:
            inputs, _ = _pair(self.task, self.task.preprocess(record))
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in the problem's code, reported with the line
            raise UserError(
                f"preprocessing for problem '{self.task.name}' failed: {type(exc).__name__}: {exc}"
            ) from exc
        if inputs is None:
            raise UserError(f"problem '{self.task.name}' drops this line (its preprocess returned None)")
        return inputs


def line_of(task_fields: tuple[str, ...], record: dict[str, str]) -> str:
    """The t2t-decode line holding a raw record's decode fields (tabs and newlines escaped)."""
    return "\t".join(text_files.escape(record[name], tabs=len(task_fields) > 1) for name in task_fields)
