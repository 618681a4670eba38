"""Where raw records come from: CSV, TSV, JSONL, TFDS and generated data.

Every source yields `Chunk`s of a few thousand records as a pandas DataFrame of
strings, so memory stays flat however large the input grows, and so the per-record
Python work in datagen is limited to what a problem's preprocessing really needs.
Each record carries the line it starts on, for error and skip reports, and a stable
key, from which datagen derives the train/dev split and the shard by hashing.

Bad input is a one-line `UserError` naming the file and the column or line.
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from t2tcli import fs
from t2tcli.errors import UserError

DEFAULT_CHUNK_ROWS = 20_000


@dataclasses.dataclass
class Chunk:
    """A block of raw records: string columns, plus their start lines and stable keys.

    `origin` is the file (or part of a source) they come from; `first_row` is how many
    records of that part came before them: with the part's index in the source, the
    records' place in the order datagen writes them.
    """

    frame: pd.DataFrame
    lines: np.ndarray
    keys: np.ndarray
    origin: str = ""
    first_row: int = 0


@dataclasses.dataclass
class ReadOptions:
    """Settings of one datagen run that sources need but problems should not hard-code."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    tfds_data_dir: str | None = None
    # Into how many parts a source that can be split (a TFDS split) is cut for reading.
    parts: int = 1


class Source:
    """Base of all sources. `required` columns must be non-blank or the record is skipped.

    A source is read as a sequence of parts (`units`: its files, or ranges of a
    dataset), each of which can be read on its own: datagen reads them one after the
    other, a Beam pipeline in parallel, and both put the records in the same order.
    """

    origin: str = "?"
    required: tuple[str, ...] = ()

    def units(self, options: ReadOptions) -> list[Any]:
        """The parts of the source, in order."""
        return [None]

    def unit_chunks(self, unit: Any, options: ReadOptions) -> Iterator[Chunk]:
        """The records of one part, in chunks."""
        raise NotImplementedError

    def chunks(self, options: ReadOptions) -> Iterator[Chunk]:
        for unit in self.units(options):
            yield from self.unit_chunks(unit, options)

    def fingerprint(self) -> str:
        """Changes whenever the records would change, so stale outputs are regenerated."""
        raise NotImplementedError


def raw_dir(tmp_dir: str | None, fallback: str | os.PathLike | None = None) -> str:
    """`--tmp_dir` when given, else `fallback` (e.g. data shipped in the checkout)."""
    if tmp_dir:
        return str(tmp_dir)
    if fallback is None:
        raise UserError("--tmp_dir is required: the directory holding the raw input files")
    return str(fallback)


def file_fingerprint(path: str, refuse_nul: bool = False) -> str:
    """sha256 of the file's bytes: robust against touched mtimes and copied files.

    With `refuse_nul`, a NUL byte is an error naming its line: pandas' CSV reader ends a
    field at one, which would silently cut the field short. A remote file (gs://...) is
    fingerprinted by its size and modification time instead of being read at start.
    """
    if fs.is_remote(path):
        from t2tcli.compat import tf

        stat = tf.io.gfile.stat(path)
        return f"stat:{path}:{stat.length}:{stat.mtime_nsec}"
    digest = hashlib.sha256()
    lines = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            if refuse_nul and b"\0" in block:
                line = lines + block.count(b"\n", 0, block.index(b"\0")) + 1
                raise UserError(f"{path}: line {line}: a NUL byte (\\0), which no text field may hold; remove it")
            lines += block.count(b"\n")
    return "sha256:" + digest.hexdigest()


def _check_file(path: str) -> None:
    if fs.is_remote(path):
        if not fs.exists(path):
            raise UserError(f"{path}: no such file")
        return
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UserError(f"{path}: is a directory, expected a file")
    if os.path.getsize(path) == 0:
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
    if fs.is_remote(pattern):
        from t2tcli.compat import tf

        files = sorted(tf.io.gfile.glob(pattern))
    else:
        files = sorted(glob.glob(pattern))
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
            for number, raw in enumerate(f, start=1):
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


class GeneratedSource(Source):
    """Records made by a deterministic function: toy problems that need no files.

    `make(n_rows, seed)` returns a DataFrame of string columns; the key is the row index.
    """

    def __init__(self, name: str, make: Callable[[int, int], pd.DataFrame], rows: int, seed: int) -> None:
        self.origin = f"<generated {name}>"
        self.make = make
        self.rows = rows
        self.seed = seed
        self.required = ()

    def fingerprint(self) -> str:
        return f"generated:{self.origin}:rows={self.rows}:seed={self.seed}"

    def unit_chunks(self, unit: Any, options: ReadOptions) -> Iterator[Chunk]:
        frame = self.make(self.rows, self.seed).reset_index(drop=True)
        for start in range(0, len(frame), options.chunk_rows):
            part = frame.iloc[start : start + options.chunk_rows].reset_index(drop=True)
            index = np.arange(start + 1, start + 1 + len(part), dtype=np.int64)
            yield Chunk(part, index, index, self.origin, start)


class TfdsSource(Source):
    """A split of a prepared TensorFlow Datasets dataset, read offline.

    `name` is "dataset/config:version" as TFDS spells it, `split` any TFDS split
    expression ("train[:90%]"). `fields` maps the record columns to TFDS feature names;
    bytes become UTF-8 strings and numbers their decimal text.
    """

    def __init__(
        self,
        name: str,
        split: str,
        fields: dict[str, str],
        required: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.split = split
        self.fields = dict(fields)
        self.required = tuple(required)
        self.origin = f"tfds:{name}[{split}]"

    def fingerprint(self) -> str:
        return f"tfds:{self.name}:{self.split}:{json.dumps(self.fields, sort_keys=True)}"

    def _builder(self, options: ReadOptions) -> Any:
        from t2tcli import compat  # noqa: F401, I001  (shims and quiet TensorFlow before TFDS)

        import tensorflow_datasets as tfds

        try:
            return tfds.builder(self.name, data_dir=self._data_dir(options))
        except Exception as exc:  # noqa: BLE001 - unknown names, versions, configs
            raise UserError(f"TFDS dataset '{self.name}': {str(exc).splitlines()[0]}") from None

    @staticmethod
    def _data_dir(options: ReadOptions) -> str:
        return options.tfds_data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")

    def units(self, options: ReadOptions) -> list[tuple[str, int]]:
        """(split expression, examples before it) of `options.parts` ranges of about equal
        size, in the split's order, for readers that read them side by side: TFDS's own
        slicing by absolute index keeps each example's place."""
        import tensorflow_datasets as tfds

        if options.parts <= 1:
            return [(self.split, 0)]
        builder = self._builder(options)
        lengths = {name: info.num_examples for name, info in builder.info.splits.items()}
        try:
            instructions = tfds.core.ReadInstruction.from_spec(self.split).to_absolute(lengths)
        except Exception:  # noqa: BLE001 - no split information (e.g. mocked data): read it whole
            return [(self.split, 0)]
        ranges = [(i.splitname, i.from_ or 0, lengths[i.splitname] if i.to is None else i.to) for i in instructions]
        step = max(1, -(-sum(end - begin for _, begin, end in ranges) // options.parts))
        units, before = [], 0
        for name, begin, end in ranges:
            for a in range(begin, end, step):
                b = min(a + step, end)
                units.append((f"{name}[{a}:{b}]", before))
                before += b - a
        return units

    def unit_chunks(self, unit: tuple[str, int], options: ReadOptions) -> Iterator[Chunk]:
        import tensorflow_datasets as tfds

        split, offset = unit
        builder = self._builder(options)
        try:
            dataset = builder.as_dataset(split=split, shuffle_files=False)
        except Exception as exc:  # noqa: BLE001 - not prepared, or a bad split expression
            if not builder.is_prepared():
                data_dir = self._data_dir(options)
                raise UserError(
                    f"TFDS dataset '{self.name}' is not prepared in {data_dir}; prepare it once on a machine with "
                    f"network: tfds build {self.name.split(':')[0]} --data_dir={data_dir} "
                    f"(then pass --tfds_data_dir={data_dir})"
                ) from None
            raise UserError(f"TFDS dataset '{self.name}' split '{self.split}': {str(exc).splitlines()[0]}") from None
        columns = list(self.fields)
        records: list[list[str]] = []
        done = 0
        for example in tfds.as_numpy(dataset):
            row = []
            for column in columns:
                feature = self.fields[column]
                if feature not in example:
                    raise UserError(
                        f"TFDS dataset '{self.name}' has no feature '{feature}' (has: {', '.join(sorted(example))})"
                    )
                row.append(_tfds_text(example[feature]))
            records.append(row)
            if len(records) >= options.chunk_rows:
                yield self._chunk(records, offset + done, done)
                done += len(records)
                records = []
        if records:
            yield self._chunk(records, offset + done, done)

    def _chunk(self, records: list[list[str]], start: int, first_row: int) -> Chunk:
        frame = pd.DataFrame(records, columns=list(self.fields), dtype=object)
        numbers = np.arange(start + 1, start + 1 + len(records), dtype=np.int64)
        return Chunk(frame, numbers, numbers, self.origin, first_row)


def _tfds_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
    return str(value)
