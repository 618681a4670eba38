"""Rows of ids into the static-shape batches every engine takes, and results back to rows.

Starting an Estimator and building the Mesh TensorFlow graph costs far more than a
batch of decoding, so all rows go through ONE `PredictFn` call fed by a generator. The
generator sorts a window of rows by length (rows of similar length finish decoding
together), pads them to static batches and remembers where each row came from, so
results are matched back without the model carrying indices through its graph. A
batch is never padded past the rows there are: an input of fewer rows than the batch
size asked for is decoded in a batch of its own size, whatever the size asked for.

Imports: data.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from t2tcli.data.vocabulary.vocab import EOS_ID, PAD_ID

Features = dict[str, np.ndarray]
# predict(batches, feature_shapes) -> one dict per row ({"outputs": ids, "scores": float}).
PredictFn = Callable[[Callable[[], Iterator[Features]], dict[str, tuple[int, int]]], Iterable[dict[str, Any]]]

# Rows sorted together: large enough that batches are of similar length, small enough
# that a stdin pipeline sees its first outputs early and memory stays flat.
SORT_WINDOW_BATCHES = 32
# Rows a sort window holds at most, in whole batches (at least one): the window of a large
# batch size is fewer batches, so what is read ahead stays bounded by the batch itself.
SORT_WINDOW_ROWS = 1 << 16


@dataclasses.dataclass
class Row:
    """One non-empty input: its position in the input and its token ids."""

    index: int
    inputs: list[int]
    targets: list[int] | None = None


def fit(ids: list[int], length: int) -> tuple[list[int], bool]:
    """ids + EOS, cut to `length` (keeping the EOS); second value: whether it was cut."""
    if length and len(ids) + 1 > length:
        return ids[: length - 1] + [EOS_ID], True
    return ids + [EOS_ID], False


def real_rows(features: Features) -> np.ndarray:
    """Positions of a batch's rows that hold a line. The rest pad the batch to its size: a
    lone EOS, as an input with no tokens would be, and engines answer both with nothing."""
    return np.flatnonzero(features["inputs"][:, 0] != EOS_ID)


def _pad(rows: list[list[int]], length: int) -> np.ndarray:
    out = np.full((len(rows), length), PAD_ID, dtype=np.int32)
    for i, ids in enumerate(rows):
        out[i, : len(ids)] = ids
    return out


class Batcher:
    """Turns a stream of Rows into static-shape batches, remembering each row's origin.

    `plan` receives, for every yielded batch row, its Row (or None for padding) in the
    order the model sees them, so predictions can be matched back without the model
    carrying indices through its graph.
    """

    def __init__(
        self,
        rows: Iterable[Row],
        batch_size: int,
        inputs_length: int,
        targets_length: int | None,
        window_batches: int = SORT_WINDOW_BATCHES,
        batch_multiple: int = 1,
    ) -> None:
        self.rows = iter(rows)
        # The batch size asked for; `batch_size` is what the batches hold.
        self.requested_batch_size = batch_size
        # What a smaller batch is rounded up to: a mesh splits the batch this many ways.
        self.batch_multiple = max(1, batch_multiple)
        self._batch_size: int | None = None
        self._head: list[Row] = []
        # Rows read ahead and sorted by length before batching: 1 batch answers each as it comes.
        self.window_batches = window_batches
        self.inputs_length = inputs_length
        self.targets_length = targets_length
        self.plan: collections.deque[Row | None] = collections.deque()
        self.on_first_batch: Callable[[], None] | None = None

    @property
    def batch_size(self) -> int:
        """Rows in every batch: the batch size asked for, or, where the input ends before
        that many rows, the rows it holds (rounded up to `batch_multiple`). Asking reads up
        to one batch of rows ahead."""
        if self._batch_size is None:
            requested = self.requested_batch_size
            if requested > 1:
                self._head = list(itertools.islice(self.rows, requested))
            rows = len(self._head)
            size = requested
            if 1 < requested and rows < requested:
                multiple = self.batch_multiple
                size = min(requested, max(multiple, -(-rows // multiple) * multiple))
            self._batch_size = size
        return self._batch_size

    def shapes(self) -> dict[str, tuple[int, int]]:
        shapes = {"inputs": (self.batch_size, self.inputs_length)}
        if self.targets_length is not None:
            shapes["targets"] = (self.batch_size, self.targets_length)
        return shapes

    def __call__(self) -> Iterator[Features]:
        batch_size = self.batch_size
        window_rows = batch_size * max(1, min(self.window_batches, SORT_WINDOW_ROWS // batch_size))
        window, self._head = self._head, []
        for row in self.rows:
            window.append(row)
            if len(window) == window_rows:
                yield from self._batches(window)
                window = []
        yield from self._batches(window)

    def _batches(self, window: list[Row]) -> Iterator[Features]:
        window.sort(key=lambda r: (len(r.inputs), len(r.targets or ())), reverse=True)
        for start in range(0, len(window), self.batch_size):
            chunk: list[Row | None] = list(window[start : start + self.batch_size])
            chunk += [None] * (self.batch_size - len(chunk))
            self.plan.extend(chunk)
            if self.on_first_batch is not None:
                self.on_first_batch()
                self.on_first_batch = None
            features = {"inputs": _pad([r.inputs if r else [EOS_ID] for r in chunk], self.inputs_length)}
            if self.targets_length is not None:
                features["targets"] = _pad([r.targets if r else [EOS_ID] for r in chunk], self.targets_length)
            yield features


def predict_rows(
    rows: list[Row],
    predict: PredictFn,
    batch_size: int,
    inputs_length: int,
    targets_length: int | None = None,
    batch_multiple: int = 1,
) -> list[dict[str, Any]]:
    """Runs `rows` (already id lists) through one predict call; results in `rows` order.

    Row.index must be the row's position in `rows`. With `targets_length`, the rows'
    targets are fed too (scoring).
    """
    batcher = Batcher(iter(rows), batch_size, inputs_length, targets_length, batch_multiple=batch_multiple)
    results: list[dict[str, Any] | None] = [None] * len(rows)
    for prediction in predict(batcher, batcher.shapes()):
        row = batcher.plan.popleft()
        if row is not None:
            results[row.index] = prediction
    missing = sum(r is None for r in results)
    if missing:
        raise RuntimeError(f"the model returned no result for {missing} of {len(rows)} rows")
    return results  # type: ignore[return-value]
