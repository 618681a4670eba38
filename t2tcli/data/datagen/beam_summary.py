"""The summary a Beam pipeline's last step leaves for its launcher, as JSON read with types.

It crosses a file in the staging directory inside data_dir, which on a shared bucket or
file system others may be able to write: it is plain data, parsed field by field, so a
file put there can at worst be refused in one line, never run as code (a pickle could).
Imports: core and data (stages and stats).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import numpy as np

from t2tcli.data.datagen.stages import SourceReport
from t2tcli.data.datagen.stats import LengthHistogram
from t2tcli.errors import UserError

NAME = "summary.json"


@dataclasses.dataclass(frozen=True)
class UnitReport:
    """What one part of a source read and skipped."""

    task: str
    source_split: str
    unit: int
    report: SourceReport


@dataclasses.dataclass(frozen=True)
class TaskStats:
    """One problem's examples per split and length histograms, summed over its Parts."""

    task: str
    counts: dict[str, int]
    inputs: LengthHistogram
    targets: LengthHistogram


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    task: str
    split: str
    shard: int
    records: int


@dataclasses.dataclass(frozen=True)
class TrainedVocab:
    proto: bytes


Item = UnitReport | TaskStats | WrittenShard | TrainedVocab


def encode(items: list[Item]) -> bytes:
    """The pipeline's summary items as the file holds them."""
    return json.dumps([_record(item) for item in items]).encode("utf-8")


def _record(item: Item) -> dict[str, Any]:
    if isinstance(item, UnitReport):
        report = item.report
        return {
            "kind": "unit",
            "task": item.task,
            "source_split": item.source_split,
            "unit": int(item.unit),
            "origin": report.origin,
            "split": report.split,
            "rows": int(report.rows),
            "skipped": int(report.skipped),
            "first_skipped_lines": [x if isinstance(x, str) else int(x) for x in report.first_skipped_lines],
            "filtered": int(report.filtered),
        }
    if isinstance(item, TaskStats):
        return {
            "kind": "stats",
            "task": item.task,
            "counts": {split: int(n) for split, n in item.counts.items()},
            "inputs": item.inputs.counts.tolist(),
            "targets": item.targets.counts.tolist(),
        }
    if isinstance(item, WrittenShard):
        return {
            "kind": "shard",
            "task": item.task,
            "split": item.split,
            "shard": int(item.shard),
            "records": int(item.records),
        }
    return {"kind": "vocab", "proto": base64.b64encode(item.proto).decode("ascii")}


def decode(data: bytes, path: str) -> list[Item]:
    """The summary items in the file at `path` holding `data`; a one-line error for
    anything that is not a summary the pipeline wrote."""
    try:
        records = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _bad(path, f"not JSON ({exc})") from None
    if not isinstance(records, list):
        raise _bad(path, "not a list of items")
    return [_item(_Fields(record, path)) for record in records]


class _Fields:
    """One record's fields, each taken with the type it must have."""

    def __init__(self, record: Any, path: str) -> None:
        if not isinstance(record, dict):
            raise _bad(path, "an item that is not an object")
        self.record, self.path = record, path

    def get(self, name: str, kind: type) -> Any:
        value = self.record.get(name)
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
            item = self.record.get("kind")
            raise _bad(self.path, f"field {name!r} of a {item!r} item is not a valid {kind.__name__}")
        return value

    def ints(self, name: str) -> list[int]:
        values = self.get(name, list)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise _bad(self.path, f"field {name!r} holds something other than counts")
        return values


def _histogram(fields: _Fields, name: str) -> LengthHistogram:
    histogram = LengthHistogram()
    counts = fields.ints(name)
    if counts:
        histogram.counts = np.array(counts, dtype=np.int64)
    return histogram


def _item(fields: _Fields) -> Item:
    kind = fields.record.get("kind")
    if kind == "unit":
        lines = fields.get("first_skipped_lines", list)
        if not all(isinstance(x, str) or (isinstance(x, int) and not isinstance(x, bool)) for x in lines):
            raise _bad(fields.path, "field 'first_skipped_lines' holds something other than lines")
        report = SourceReport(
            fields.get("origin", str),
            fields.get("split", str),
            fields.get("rows", int),
            fields.get("skipped", int),
            lines,
            fields.get("filtered", int),
        )
        return UnitReport(fields.get("task", str), fields.get("source_split", str), fields.get("unit", int), report)
    if kind == "stats":
        counts = fields.get("counts", dict)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values()):
            raise _bad(fields.path, "field 'counts' holds something other than counts")
        task = fields.get("task", str)
        return TaskStats(task, counts, _histogram(fields, "inputs"), _histogram(fields, "targets"))
    if kind == "shard":
        return WrittenShard(
            fields.get("task", str), fields.get("split", str), fields.get("shard", int), fields.get("records", int)
        )
    if kind == "vocab":
        try:
            return TrainedVocab(base64.b64decode(fields.get("proto", str), validate=True))
        except ValueError:
            raise _bad(fields.path, "field 'proto' is not base64") from None
    raise _bad(fields.path, f"an item of unknown kind {kind!r}")


def _bad(path: str, what: str) -> UserError:
    return UserError(f"{path}: not the summary t2t-datagen's pipeline writes: {what}")
