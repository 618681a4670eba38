"""Record sources read from files: CSV, TSV and JSONL, one file or a glob of them.

Files may be local or remote (gs://...): they are reached through `t2tcli.io.fs`. Bad input
is a one-line `UserError` naming the file and the column or line. Imports: core, io
and data (source_base).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from t2tcli.data.sources.source_base import Chunk, ReadOptions, Source
from t2tcli.errors import UserError
from t2tcli.io import fs, text_files

# Bytes one JSONL record may take: a line is read in pieces up to here, never held past it.
MAX_JSONL_LINE_BYTES = 64 << 20

_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def require_regular(path: str) -> None:
    """A local input must be a regular file (or a link to one), checked without opening it:
    a FIFO or a device would hang its reader or never end, and inputs are read twice."""
    if fs.is_remote(path):
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{path}: is a directory, expected a file")
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a file")
        raise UserError(f"{path}: {kind}, not a regular file: inputs are read from regular files only")


def file_fingerprint(path: str, refuse_nul: bool = False) -> str:
    """sha256 of the file's bytes: robust against touched mtimes and copied files.

    With `refuse_nul`, a NUL byte is an error naming its line: pandas' CSV reader ends a
    field at one, which would silently cut the field short. A remote file (gs://...) is
    fingerprinted by its size and modification time instead of being read at start.
    """
    if fs.is_remote(path):
        size, mtime = fs.size_and_mtime(path)
        return f"stat:{path}:{size}:{mtime}"
    require_regular(path)
    digest = hashlib.sha256()
    lines = 0
    with fs.open_file(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            if refuse_nul and b"\0" in block:
                line = lines + block.count(b"\n", 0, block.index(b"\0")) + 1
                raise UserError(f"{path}: line {line}: a NUL byte (\\0), which no text field may hold; remove it")
            lines += block.count(b"\n")
    return "sha256:" + digest.hexdigest()


def _check_file(path: str) -> None:
    if not fs.exists(path):
        raise UserError(f"{path}: no such file")
    if fs.is_remote(path):
        return
    if fs.isdir(path):
        raise UserError(f"{path}: is a directory, expected a file")
    require_regular(path)
    if fs.getsize(path) == 0:
        raise UserError(f"{path}: empty file (expected a header line)")


def _first_undecodable_line(path: str) -> str:
    """'line N' of the first line that is not UTF-8, for a decode error message."""
    with fs.open_file(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"line {number}, byte {exc.start + 1} (0x{raw[exc.start]:02x})"
    return "unknown line"


def expand(pattern: str) -> list[str]:
    """The files a path names: itself, or the sorted matches of a glob (`data/part-*.csv`)."""
    if not any(c in pattern for c in "*?["):
        return [pattern]
    files = fs.glob(pattern)
    if not files:
        raise UserError(f"{pattern}: matches no file")
    return files


class _FileSource(Source):
    """Shared by file-backed sources: one file or a glob of them, fingerprint, key column.

    The files of a glob are read in name order; a record's key (without a key column)
    is its line, plus its file's place in that order.
    """

    refuse_nul = False

    def __init__(
        self, path: str, columns: Sequence[str], required: Sequence[str] | None = None, key: str | None = None
    ) -> None:
        self.path = str(path)
        self.origin = self.path
        self.columns = tuple(columns)
        self.required = tuple(self.columns if required is None else required)
        self.key = key
        unknown = [c for c in (*self.required, *([key] if key else [])) if c not in self.columns]
        if unknown:
            raise ValueError(f"required/key columns {unknown} are not among the columns {self.columns}")

    def units(self, options: ReadOptions) -> list[tuple[int, str]]:
        return list(enumerate(expand(self.path)))

    def fingerprint(self) -> str:
        files = expand(self.path)
        parts = []
        for path in files:
            _check_file(path)
            parts.append(file_fingerprint(path, self.refuse_nul))
        if len(parts) == 1:
            return parts[0]
        return (
            "sha256:"
            + hashlib.sha256("\n".join(f"{p}\t{f}" for p, f in zip(files, parts, strict=True)).encode()).hexdigest()
        )

    def unit_chunks(self, unit: tuple[int, str], options: ReadOptions) -> Iterator[Chunk]:
        index, path = unit
        rows = 0
        for frame, lines in self.read_file(path, options):
            keys = frame[self.key].to_numpy(dtype=object) if self.key else lines.astype(np.int64) + (index << 32)
            yield Chunk(frame, lines, keys, path, rows)
            rows += len(frame)

    def read_file(self, path: str, options: ReadOptions) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        """(records, the line each starts on) of one file, in chunks."""
        raise NotImplementedError


class CsvSource(_FileSource):
    """A delimited file with a header (or a glob of them), read by pandas' C parser in chunks.

    Handles quoted fields with embedded delimiters, quotes and newlines, UTF-8 with or
    without BOM, and CRLF line ends. Every field is read as a string, blanks as "".
    `key` names a column whose value identifies a row stably (e.g. Kaggle's `id`);
    without it the row's line number is the key. A file is parsed whole, by one
    reader: a quoted newline cannot be told from a record's end by looking at a line.
    """

    sep = ","
    quoting = csv.QUOTE_MINIMAL
    kind = "CSV"
    refuse_nul = True

    def _reader(self, path: str, chunk_rows: int, nrows: int | None = None) -> Any:
        source: Any = path
        if fs.is_remote(path):
            with fs.open_file(path) as f:
                data = f.read()
            if b"\0" in data:
                line = data.count(b"\n", 0, data.index(b"\0")) + 1
                raise UserError(f"{path}: line {line}: a NUL byte (\\0), which no text field may hold; remove it")
            source = io.BytesIO(data)
        return pd.read_csv(
            source,
            sep=self.sep,
            quoting=self.quoting,
            dtype=object,  # plain Python strings: pandas' string dtype is slower to hand over
            na_filter=False,
            keep_default_na=False,
            encoding="utf-8-sig",
            engine="c",
            chunksize=chunk_rows if nrows is None else None,
            nrows=nrows,
            skip_blank_lines=True,
        )

    def _check_header(self, path: str) -> None:
        try:
            header = list(self._reader(path, 0, nrows=0).columns)
        except pd.errors.EmptyDataError:
            raise UserError(f"{path}: empty file (expected a header line)") from None
        except UnicodeDecodeError:
            raise UserError(f"{path}: not valid UTF-8 at {_first_undecodable_line(path)}") from None
        missing = [c for c in self.columns if c not in header]
        if missing:
            raise UserError(
                f"{path}: missing column{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(c) for c in missing)} (header has: {', '.join(header)})"
            )

    def read_file(self, path: str, options: ReadOptions) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        _check_file(path)
        self._check_header(path)
        next_line = 2  # line 1 is the header
        rows = 0
        try:
            for frame in self._reader(path, options.chunk_rows):
                frame = frame[list(self.columns)].reset_index(drop=True)
                lines, next_line = _start_lines(frame, next_line)
                rows += len(frame)
                yield frame, lines
        except UnicodeDecodeError:
            raise UserError(f"{path}: not valid UTF-8 at {_first_undecodable_line(path)}") from None
        except pd.errors.ParserError as exc:
            detail = str(exc).strip().splitlines()[-1].removeprefix("Error tokenizing data. C error: ")
            raise UserError(f"{path}: malformed {self.kind}: {self._with_file_line(path, detail)}") from None
        if rows == 0:
            raise UserError(f"{path}: no data rows after the header")

    def _with_file_line(self, path: str, detail: str) -> str:
        """pandas' message with its record number ("row 3008", "line 3009": records, the
        header counted) turned into the file's line, which quoted newlines push further."""
        match = re.search(r"(starting at row|in line) (\d+)", detail)
        if not match:
            return detail
        records_before = int(match.group(2)) - (1 if match.group(1) == "in line" else 0) - 1
        try:
            before = self._reader(path, 0, nrows=records_before) if records_before > 0 else None
        except (pd.errors.ParserError, ValueError):
            return detail
        line = 2 + (int(_start_lines(before[list(self.columns)], 2)[1]) - 2 if before is not None else 0)
        fields = re.search(r"Expected (\d+) fields in line \d+, saw (\d+)", detail)
        if fields:
            return f"line {line}: expected {fields.group(1)} fields, saw {fields.group(2)}"
        if "EOF inside string" in detail:
            return f"line {line}: a quoted field starts there and never ends"
        return f"line {line}: {detail}"


def _start_lines(frame: pd.DataFrame, first_line: int) -> tuple[np.ndarray, int]:
    """Line each record starts on, counting newlines kept inside quoted fields.

    Blank lines between records (which pandas skips) are not counted, so the numbers
    are exact for files without them.
    """
    extra = np.zeros(len(frame), dtype=np.int64)
    for column in frame.columns:
        values = frame[column].tolist()
        if "\n" in "".join(values):  # one C-level scan; per-row counts only when needed
            extra += np.fromiter(map(str.count, values, ["\n"] * len(values)), dtype=np.int64, count=len(values))
    spans = extra + 1
    starts = first_line + np.concatenate(([0], np.cumsum(spans)[:-1])) if len(frame) else spans
    return starts.astype(np.int64), first_line + int(spans.sum())


class TsvSource(CsvSource):
    """Tab-separated lines with a header and no quoting: a tab or newline ends a field."""

    sep = "\t"
    quoting = csv.QUOTE_NONE
    kind = "TSV"


class JsonlSource(_FileSource):
    """One JSON object per line (or a glob of such files); string values may hold
    newlines (escaped as \\n)."""

    def read_file(self, path: str, options: ReadOptions) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        _check_file(path)
        records: list[list[str]] = []
        lines: list[int] = []
        seen = 0
        with fs.open_file(path) as f:
            for number, (raw, cut) in enumerate(text_files.bounded_lines(f, MAX_JSONL_LINE_BYTES), start=1):
                if cut:
                    raise UserError(f"{path}: line {number}: a record of more than {MAX_JSONL_LINE_BYTES} bytes")
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise UserError(f"{path}: not valid UTF-8 at line {number}, byte {exc.start + 1}") from None
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}: line {number}: invalid JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise UserError(f"{path}: line {number}: expected a JSON object, got {type(obj).__name__}")
                missing = [c for c in self.columns if c not in obj]
                if missing:
                    raise UserError(f"{path}: line {number}: missing field {missing[0]!r}")
                records.append(["" if obj[c] is None else str(obj[c]) for c in self.columns])
                lines.append(number)
                if len(records) >= options.chunk_rows:
                    yield self._frame(records), np.asarray(lines, dtype=np.int64)
                    seen += len(records)
                    records, lines = [], []
        if records:
            seen += len(records)
            yield self._frame(records), np.asarray(lines, dtype=np.int64)
        if seen == 0:
            raise UserError(f"{path}: no records")

    def _frame(self, records: list[list[str]]) -> pd.DataFrame:
        return pd.DataFrame(records, columns=list(self.columns), dtype=object)
