"""Pass 1's text of one problem, kept on disk until the vocabulary exists to encode it.

One file per split in the run's work directory, a sequence of chunks in a plain format:
a header of little-endian counts (rows, bytes of inputs, bytes of targets, bytes per
length), then the rows' key hashes, the character lengths of each input and each target
(in the fewest bytes that hold the longest), and the UTF-8 text of all inputs and of all
targets: about the size pickle made it. Reading it back can only give strings and numbers, so
a file swapped in by someone else cannot run code (pickle could). The files are created
and read through `t2tcli.io.scratch`, which follows no symlink and refuses FIFOs.
Imports: core, io and data (layout and stages).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import IO

import numpy as np

from t2tcli.data import layout
from t2tcli.data.datagen.stages import ReadTotals
from t2tcli.errors import UserError
from t2tcli.io import scratch

_HEADER = np.dtype([("rows", "<u8"), ("input_bytes", "<u8"), ("target_bytes", "<u8"), ("width", "<u8")])
_LENGTH_TYPES = {np.dtype(t).itemsize: np.dtype(t) for t in ("<u1", "<u2", "<u4", "<u8")}
# Any str Python holds, lone surrogates included, round-trips through UTF-8 with this handler.
_ERRORS = "surrogatepass"


@dataclasses.dataclass
class Spool(ReadTotals):
    """Pass 1's output for one problem: its totals, and its preprocessed text per split, on disk."""

    work_dir: str = ""
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    _handles: dict[str, IO[bytes]] = dataclasses.field(default_factory=dict, repr=False)

    def append(self, split: str, hashes: np.ndarray, inputs: list[str], targets: list[str]) -> None:
        if split not in self._handles:
            self.files[split] = layout.spool_path(self.work_dir, split)
            self._handles[split] = scratch.create_file(self.files[split])
        self._handles[split].write(encode_chunk(hashes, inputs, targets))

    def close(self) -> None:
        """Closes every split's file, each one even when another fails (a full disk fails the flush)."""
        handles, self._handles = list(self._handles.values()), {}
        failure: BaseException | None = None
        for handle in handles:
            try:
                handle.close()
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def encode_chunk(hashes: np.ndarray, inputs: list[str], targets: list[str]) -> bytes:
    """One chunk of rows as the spool stores it."""
    input_text = "".join(inputs).encode("utf-8", _ERRORS)
    target_text = "".join(targets).encode("utf-8", _ERRORS)
    lengths = np.fromiter(map(len, inputs + targets), dtype="<u8", count=len(inputs) + len(targets))
    top = int(lengths.max()) if len(lengths) else 0
    width = next(size for size, kind in _LENGTH_TYPES.items() if top <= np.iinfo(kind).max)
    header = np.array([(len(inputs), len(input_text), len(target_text), width)], dtype=_HEADER)
    return b"".join(
        (
            header.tobytes(),
            np.ascontiguousarray(hashes, dtype="<u8").tobytes(),
            lengths.astype(_LENGTH_TYPES[width]).tobytes(),
            input_text,
            target_text,
        )
    )


def spool_chunks(path: str) -> Iterator[tuple[np.ndarray, list[str], list[str]]]:
    """The (hashes, inputs, targets) chunks of one split's spool file, in the order written."""
    with scratch.open_file(path) as f:
        while True:
            head = f.read(_HEADER.itemsize)
            if not head:
                return
            if len(head) < _HEADER.itemsize:
                raise _damaged(path)
            rows, input_bytes, target_bytes, width = (int(x) for x in np.frombuffer(head, dtype=_HEADER)[0])
            if width not in _LENGTH_TYPES:
                raise _damaged(path)
            hashes = np.frombuffer(_read_exactly(f, 8 * rows, path), dtype="<u8").astype(np.uint64)
            lengths = np.frombuffer(_read_exactly(f, 2 * width * rows, path), dtype=_LENGTH_TYPES[width])
            inputs = _split(_read_exactly(f, input_bytes, path), lengths[:rows].astype(np.uint64), path)
            targets = _split(_read_exactly(f, target_bytes, path), lengths[rows:].astype(np.uint64), path)
            yield hashes, inputs, targets


def _read_exactly(f: IO[bytes], size: int, path: str) -> bytes:
    """`size` bytes; a size past the file's end (a damaged count) is refused before any is read."""
    if size > os.fstat(f.fileno()).st_size - f.tell():
        raise _damaged(path)
    data = f.read(size)
    if len(data) != size:
        raise _damaged(path)
    return data


def _split(data: bytes, lengths: np.ndarray, path: str) -> list[str]:
    """The strings of `lengths` characters each that `data` holds, one after another."""
    try:
        text = data.decode("utf-8", _ERRORS)
    except UnicodeDecodeError:
        raise _damaged(path) from None
    ends = np.cumsum(lengths, dtype=np.uint64)
    if (int(ends[-1]) if len(ends) else 0) != len(text):
        raise _damaged(path)
    bounds = zip((ends - lengths).tolist(), ends.tolist(), strict=True)
    return [text[start:end] for start, end in bounds]


def _damaged(path: str) -> UserError:
    return UserError(f"{path}: the spool is cut short or damaged; run t2t-datagen again to regenerate it")
