"""Pass 1's text of one problem, kept on disk until the vocabulary exists to encode it.

Pickled chunks, one file per split, in the work directory the local runner made for the
run and removes after it: the runner's own local scratch, so plain `open` is right here.
Imports: data (layout and stages).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from t2tcli.data import layout
from t2tcli.data.stages import ReadTotals


@dataclasses.dataclass
class Spool(ReadTotals):
    """Pass 1's output for one problem: its totals, and its preprocessed text per split, on disk."""

    work_dir: str = ""
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    _handles: dict[str, IO[bytes]] = dataclasses.field(default_factory=dict, repr=False)

    def append(self, split: str, hashes: np.ndarray, inputs: list[str], targets: list[str]) -> None:
        if split not in self._handles:
            self.files[split] = layout.spool_path(self.work_dir, split)
            self._handles[split] = open(self.files[split], "wb")  # noqa: SIM115 - closed in close()
        pickle.dump((hashes, inputs, targets), self._handles[split], protocol=pickle.HIGHEST_PROTOCOL)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()


def spool_chunks(path: str) -> Iterator[tuple[np.ndarray, list[str], list[str]]]:
    """The (hashes, inputs, targets) chunks of one split's spool file, in the order written."""
    with open(path, "rb") as f:
        while True:
            try:
                chunk: Any = pickle.load(f)
            except EOFError:
                return
            yield chunk
