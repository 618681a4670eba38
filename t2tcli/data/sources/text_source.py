"""Plain-text files as records: the unlabeled text a self-supervised problem trains on.

One document per line, or (`paragraphs=True`) per run of non-blank lines; blank lines
only separate. Files are read in bounded pieces through `t2tcli.io.fs` (local or remote),
a `.gz` file decompressed as it is read and refused once it inflates past a bound, so
memory stays bounded by one chunk of records whatever the corpus size or the length of
one line. A line over `max_chars` characters is cut there as it is read (a document is
split into pieces for training anyway) and the cuts are counted and reported per file.
Imports: core, io and data (file_sources and source_base).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np
import pandas as pd
from absl import logging

from t2tcli.data.sources.file_sources import _FileSource, file_fingerprint, require_regular
from t2tcli.data.sources.source_base import ReadOptions
from t2tcli.errors import UserError
from t2tcli.io import fs, text_files

# Characters kept of one line; the rest is cut, counted and reported.
MAX_CHARS = 100_000


class TextSource(_FileSource):
    """Text files named by one or more paths or globs (`corpus/*.txt`, `corpus/*.txt.gz`),
    read in name order; each record has one field, `text`."""

    def __init__(self, patterns: str | Sequence[str], paragraphs: bool = False, max_chars: int = MAX_CHARS) -> None:
        self.patterns = (patterns,) if isinstance(patterns, str) else tuple(str(p) for p in patterns)
        super().__init__(" ".join(self.patterns), columns=("text",))
        self.paragraphs = paragraphs
        self.max_chars = max_chars

    def files(self) -> list[str]:
        found: set[str] = set()
        for pattern in self.patterns:
            if any(c in pattern for c in "*?["):
                found.update(fs.glob(pattern))
            elif fs.exists(pattern):
                found.add(pattern)
        if not found:
            raise UserError(
                f"{', '.join(self.patterns)}: matches no file (expected plain-text files, one document a line)"
            )
        return sorted(found)

    def units(self, options: ReadOptions) -> list[tuple[int, str]]:
        return list(enumerate(self.files()))

    def recorded_name(self) -> str:
        """The patterns (or files) that found files, by their names (`*.txt`, or `*.txt, *.txt.gz`
        when both did): what the text was read from, not every pattern looked for."""
        found = [p for p in self.patterns if (fs.glob(p) if any(c in p for c in "*?[") else fs.exists(p))]
        return ", ".join(os.path.basename(pattern) for pattern in found or self.patterns)

    def fingerprint(self) -> str:
        parts = []
        for path in self.files():
            if fs.isdir(path):
                raise UserError(f"{path}: is a directory, expected a text file")
            parts.append(f"{path}\t{file_fingerprint(path)}")
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def read_file(self, path: str, options: ReadOptions) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        texts: list[str] = []
        starts: list[int] = []
        cut = documents = 0
        require_regular(path)
        with fs.open_file(path) as raw:
            try:
                for start, text, was_cut in self._documents(path, _decompressed(path, raw)):
                    texts.append(text)
                    starts.append(start)
                    cut += was_cut
                    if len(texts) >= options.chunk_rows:
                        documents += len(texts)
                        yield pd.DataFrame({"text": texts}, dtype=object), np.asarray(starts, dtype=np.int64)
                        texts, starts = [], []
            except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
                raise UserError(f"{path}: a damaged gzip file ({exc or 'cut short'})") from None
        if texts:
            documents += len(texts)
            yield pd.DataFrame({"text": texts}, dtype=object), np.asarray(starts, dtype=np.int64)
        if documents == 0:
            raise UserError(f"{path}: no text (an empty file, or only blank lines)")
        if cut:
            logging.warning(
                "%s: %d of %d lines were longer than %d characters and were cut there",
                path,
                cut,
                documents,
                self.max_chars,
            )

    def _documents(self, path: str, stream: IO[bytes]) -> Iterator[tuple[int, str, bool]]:
        """(first line, text, whether a line was cut) of each document."""
        held: list[str] = []
        first = 0
        cut = False
        number = 0
        # A character is at most 4 bytes in UTF-8; leading space the strip drops is allowed for.
        kept_bytes = 4 * self.max_chars + text_files.READ_BYTES
        for number, (raw, raw_cut) in enumerate(text_files.bounded_lines(stream, kept_bytes), start=1):
            if b"\0" in raw:
                raise UserError(f"{path}: line {number}: a NUL byte: a binary file, not text")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
            except UnicodeDecodeError as exc:
                raise UserError(f"{path}: line {number}, byte {exc.start + 1}: not UTF-8 text") from None
            if len(line) > self.max_chars or raw_cut:
                line, cut = line[: self.max_chars], True
            if not line:
                if held:
                    yield first, " ".join(held), cut
                    held, cut = [], False
                continue
            if not self.paragraphs:
                yield number, line, cut
                cut = False
                continue
            if not held:
                first = number
            held.append(line)
        if held:
            yield first, " ".join(held), cut


def _decompressed(path: str, raw: IO[bytes]) -> IO[bytes]:
    """The file's bytes: a `.gz` file is decompressed as it is read, within
    `text_files.BoundedInflation`'s bound on what it may inflate to."""
    if not path.endswith(".gz"):
        return raw
    return text_files.decompressed(path, raw)
