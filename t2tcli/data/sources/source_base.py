"""What every record source is: chunks of string records with their lines and stable keys.

A source yields `Chunk`s of a few thousand records as a pandas DataFrame of strings, so
memory stays flat however large the input grows, and so the per-record Python work in
datagen is limited to what a problem's preprocessing really needs. Each record carries the
line it starts on, for error and skip reports, and a stable key, from which datagen derives
the train/dev split and the shard by hashing. Imports: core.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

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

    def recorded_name(self) -> str:
        """What the meta file records as this source: its file's name."""
        return os.path.basename(self.origin)


def shipped_data(package: str, *parts: str) -> str:
    """The path of data that `package` ships inside itself, as `raw_dir`'s fallback.

    Found through the installed package (importlib.resources), so a wheel installed
    anywhere reads its own copy, never a checkout's.
    """
    found = importlib.resources.files(package).joinpath(*parts)
    if not isinstance(found, os.PathLike) or not os.path.exists(found):
        raise UserError(f"{package} has no data at {'/'.join(parts)} on a disk (a zipped install?): pass --tmp_dir")
    return os.fspath(found)


def raw_dir(tmp_dir: str | None, fallback: str | os.PathLike | None = None) -> str:
    """`--tmp_dir` when given, else `fallback` (e.g. data a problem ships, `shipped_data`)."""
    if tmp_dir:
        return str(tmp_dir)
    if fallback is None:
        raise UserError("--tmp_dir is required: the directory holding the raw input files")
    return str(fallback)
