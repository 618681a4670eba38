"""Pass 1's stages, record by record: read a source, skip blank records, preprocess, split.

Both runners push every chunk through `chunk_parts`, so a problem's records become the
same pairs, reports and split assignment locally and on Beam workers. The process tuning
for these loops (the cyclic collector, glibc's handling of freed memory) is here too.
Imports: core and data (options, problem, sources.preprocessing and
sources.source_base).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import os
import platform
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from absl import logging

from t2tcli.data.datagen.options import Options, progress, read_options_of, split_sources
from t2tcli.data.problem import Text2TextProblem
from t2tcli.data.sources.preprocessing import ChunkPreprocessor
from t2tcli.data.sources.source_base import Source
from t2tcli.errors import UserError

SKIPPED_LINES_REPORTED = 10
_DEV_BUCKETS = 1_000_000
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@dataclasses.dataclass
class SourceReport:
    """What was read from one source and what was skipped, for the log and the meta file."""

    origin: str
    split: str
    rows: int = 0
    skipped: int = 0
    first_skipped_lines: list[int | str] = dataclasses.field(default_factory=list)
    filtered: int = 0
    # What the meta file records as the source (default: the origin's file name).
    name: str = ""

    def merge(self, other: SourceReport) -> None:
        """Adds the report of the next part of the source, in reading order."""
        self.rows += other.rows
        self.skipped += other.skipped
        self.filtered += other.filtered
        room = SKIPPED_LINES_REPORTED - len(self.first_skipped_lines)
        self.first_skipped_lines.extend(other.first_skipped_lines[:room])


@dataclasses.dataclass
class ReadTotals:
    """What pass 1 read of one problem: examples per split, and each source's report."""

    fingerprint: str
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    reports: list[SourceReport] = dataclasses.field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.reports)


@dataclasses.dataclass
class SplitChunk:
    """Part of a source chunk that went to one split: preprocessed pairs and where they came from."""

    split: str
    hashes: np.ndarray  # of each row's key: where it goes (split, shard)
    inputs: list[str]
    targets: list[str]
    frame: pd.DataFrame  # the raw records of the whole chunk (blank and dropped ones excluded)
    rows: np.ndarray  # the rows of `frame` that are this part's pairs, in order
    positions: np.ndarray  # each pair's record's place in its source part (file, range), for ordering


def _blank_mask(frame: pd.DataFrame, required: tuple[str, ...]) -> np.ndarray:
    blank = np.zeros(len(frame), dtype=bool)
    for column in required:
        values = frame[column].tolist()
        blank |= np.fromiter(map(len, values), dtype=np.int64, count=len(values)) == 0
        blank |= np.fromiter(map(str.isspace, values), dtype=bool, count=len(values))
    return blank


def _failing_line(task: Text2TextProblem, frame: pd.DataFrame, lines: np.ndarray) -> str:
    """'line N' of the first record that `preprocess` fails on, to point the user at it."""
    for line, record in zip(lines.tolist(), frame.to_dict("records"), strict=True):
        try:
            task.preprocess(record)
        except Exception:  # noqa: BLE001 - looking for the culprit only
            return f"line {line}"
    return f"lines {lines[0]}-{lines[-1]}" if len(lines) else "an empty chunk"


def _pairs(
    preprocess: ChunkPreprocessor, frame: pd.DataFrame, lines: np.ndarray, origin: str
) -> tuple[np.ndarray, list[str], list[str]]:
    """Preprocessed (kept mask, inputs, targets) of a chunk; a None input drops a record.

    A failure in the problem's code becomes a one-line error naming the record's line.
    """
    task = preprocess.task
    try:
        inputs, targets = preprocess(frame)
    except UserError as exc:
        raise UserError(f"{origin}: {_failing_line(task, frame, lines)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a bug in the problem's code, reported with the record
        raise UserError(
            f"{origin}: {_failing_line(task, frame, lines)}: preprocessing for problem '{task.name}' failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    kept = np.ones(len(inputs), dtype=bool)
    if type(None) in set(map(type, inputs)):  # one C-level pass; a per-row test only when some are dropped
        kept = np.fromiter((i is not None for i in inputs), dtype=bool, count=len(inputs))
        picked = np.nonzero(kept)[0].tolist()
        inputs, targets = [inputs[i] for i in picked], [targets[i] for i in picked]
    for name, values in (("inputs", inputs), ("targets", targets)):
        types = set(map(type, values))
        if not types <= {str}:
            wrong = sorted(t.__name__ for t in types - {str})
            raise UserError(f"problem '{task.name}': preprocess gave {name} of type {', '.join(wrong)}, expected str")
    return kept, inputs, targets


def split_chunks(task: Text2TextProblem, options: Options, reports: list[SourceReport]) -> Iterator[SplitChunk]:
    """Stages read, skip, preprocess and split of pass 1: every source chunk's pairs, each
    part tagged with its split. Skipped rows and drops are counted into `reports`."""
    read_options = read_options_of(options)
    sources = split_sources(task, options)
    preprocess = ChunkPreprocessor(task)
    with progress(options, f"{task.name}: reading") as bar:
        for source_split, source in sources.items():
            report = SourceReport(source.origin, source_split, name=source.recorded_name())
            reports.append(report)
            for chunk in source.chunks(read_options):
                gc.collect(1)  # cycles from the previous chunk: young objects only, cheap
                bar.update(len(chunk.frame))
                yield from chunk_parts(task, sources, source_split, chunk, preprocess, report)
            check_skipped(task, source, report)


def chunk_parts(
    task: Text2TextProblem,
    sources: dict[str, Source],
    source_split: str,
    chunk: Any,
    preprocess: ChunkPreprocessor,
    report: SourceReport,
) -> list[SplitChunk]:
    """One chunk through the stages skip, preprocess and split: its pairs by split (one
    part, or train and dev when the source is split by hash), counted into `report`."""
    source = sources[source_split]
    report.rows += len(chunk.frame)
    keep = ~_blank_mask(chunk.frame, source.required)
    if not keep.all():
        skipped_lines = chunk.lines[~keep]
        report.skipped += len(skipped_lines)
        room = SKIPPED_LINES_REPORTED - len(report.first_skipped_lines)
        report.first_skipped_lines.extend(skipped_at(chunk, source, skipped_lines[:room]))
    frame = chunk.frame[keep].reset_index(drop=True)
    kept, inputs, targets = _pairs(preprocess, frame, chunk.lines[keep], chunk.origin or source.origin)
    report.filtered += int((~kept).sum())
    keys = chunk.keys[keep][kept]
    hashes = pd.util.hash_array(np.asarray(keys, dtype=object if keys.dtype == object else None))
    rows = np.flatnonzero(kept)
    positions = chunk.first_row + np.flatnonzero(keep)[rows]
    if not (source_split == "train" and "dev" not in sources):
        return [SplitChunk(source_split, hashes, inputs, targets, frame, rows, positions)]
    is_dev = (hashes % np.uint64(_DEV_BUCKETS)) < np.uint64(int(round(task.dev_fraction * _DEV_BUCKETS)))
    parts = []
    for split, mask in (("train", ~is_dev), ("dev", is_dev)):
        picked = np.flatnonzero(mask)
        part = picked.tolist()
        parts.append(
            SplitChunk(
                split,
                hashes[mask],
                [inputs[i] for i in part],
                [targets[i] for i in part],
                frame,
                rows[picked],
                positions[picked],
            )
        )
    return parts


def skipped_at(chunk: Any, source: Source, lines: np.ndarray) -> list[int | str]:
    """Where skipped records are, for reports: their lines, with the file's name when the
    source is a glob of several files."""
    if chunk.origin in ("", source.origin):
        return [int(n) for n in lines]
    return [f"{os.path.basename(chunk.origin)}:{int(n)}" for n in lines]


def split_records(task: Text2TextProblem, options: Options, split: str) -> Iterator[dict[str, str]]:
    """The raw records whose examples datagen writes to `split`, in the order it writes them
    (one shard; train shards are shuffled): what t2t-decode is given to check it formats
    lines as training did."""
    for part in split_chunks(task, options, []):
        if part.split == split:
            yield from part.frame.iloc[part.rows].to_dict("records")


def check_skipped(task: Text2TextProblem, source: Source, report: SourceReport) -> None:
    if not report.skipped:
        return
    lines = ", ".join(map(str, report.first_skipped_lines))
    more = ", ..." if report.skipped > len(report.first_skipped_lines) else ""
    fields = "/".join(source.required)
    message = (
        f"{report.origin}: skipped {report.skipped} of {report.rows} rows with an empty required field "
        f"({fields}) at lines {lines}{more}"
    )
    if report.skipped > task.max_skipped_fraction * report.rows:
        raise UserError(
            f"{message}; that is more than {task.max_skipped_fraction:.2%} of the rows "
            f"(max_skipped_fraction of problem '{task.name}'): fix the file or raise the limit"
        )
    logging.warning("%s: %s", task.name, message)


def require_train(task: Text2TextProblem, options: Options, counts: dict[str, int]) -> None:
    """A one-line error when pass 1 gave the problem no train examples."""
    if not counts.get("train"):
        raise UserError(f"problem '{task.name}': no train examples from {split_sources(task, options)['train'].origin}")


@contextlib.contextmanager
def tuned_for_batches() -> Iterator[None]:
    """The process set for pass 1 and 2's batch loops, while they run.

    Millions of short-lived strings and lists, no reference cycles: the automatic cyclic
    collector would keep rescanning them, costing a large share of the run time, so it is
    off; the chunk loops collect the young generations themselves instead. And glibc keeps
    freed memory for reuse (see `_keep_freed_memory`), for the rest of the process.
    """
    _keep_freed_memory()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


def _keep_freed_memory() -> None:
    """Has glibc keep freed memory for reuse instead of handing it back to the system at once.

    Every batch allocates and frees several MiB of arrays. With glibc's defaults most of
    that is unmapped or trimmed when freed and faulted in again, page by page, for the
    next batch: a fifth of the run time went to the kernel. Keeping up to 64 MiB of
    freed memory removes nearly all of it and adds a few MiB to peak memory. The
    setting lasts for the process; other C libraries are left alone.
    """
    if platform.libc_ver()[0] != "glibc":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # blocks up to this size come from the reusable heap
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)  # free memory the heap keeps before shrinking
