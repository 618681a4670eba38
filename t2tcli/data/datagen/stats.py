"""What datagen counts while it reads and encodes, in forms that merge exactly.

The vocabulary sample and the length histograms are built from parts (chunks locally,
bundles on Beam workers) and merged in any order into the same result, which is what lets
both runners write the same vocabulary and meta file. Imports: nothing of t2tcli.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 95, 99)


class VocabSample:
    """The `limit` distinct train texts of smallest hash: a deterministic, bounded sample.

    Once full, a text is kept only if its hash is below the current cut-off, so memory
    holds about `limit` texts whatever the size of the input.
    """

    _SECOND_KEY = "t2tcli-vocab-tie"  # 16 characters: a second hash key, to break ties deterministically

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.texts = np.empty(0, dtype=object)
        self.priority = np.empty((0, 2), dtype=np.uint64)
        self._cutoff: int | None = None

    def add(self, texts: list[str]) -> None:
        values = np.asarray(list(dict.fromkeys(texts)), dtype=object)
        if not len(values):
            return
        first = pd.util.hash_array(values)
        if self._cutoff is not None:
            keep = first <= np.uint64(self._cutoff)
            values, first = values[keep], first[keep]
        second = pd.util.hash_array(values, hash_key=self._SECOND_KEY)
        self.texts = np.concatenate([self.texts, values])
        self.priority = np.concatenate([self.priority, np.stack([first, second], axis=1)])
        if len(self.texts) > self.limit + self.limit // 4:
            self._trim()

    def _trim(self) -> None:
        order = np.lexsort((self.priority[:, 1], self.priority[:, 0]))
        priority = self.priority[order]
        distinct = np.ones(len(order), dtype=bool)
        distinct[1:] = (priority[1:] != priority[:-1]).any(axis=1)
        order = order[distinct][: self.limit]
        self.texts, self.priority = self.texts[order], self.priority[order]
        if len(self.texts) >= self.limit:
            self._cutoff = int(self.priority[-1, 0])

    def merge(self, other: VocabSample) -> None:
        """Takes in another sample: the result is the sample of both inputs together."""
        self.texts = np.concatenate([self.texts, other.texts])
        self.priority = np.concatenate([self.priority, other.priority])
        self._trim()

    def sentences(self) -> list[str]:
        self._trim()
        return [t for t in self.texts.tolist() if t.strip()]


class LengthHistogram:
    """Token-length counts (EOS included), so percentiles need no per-example memory."""

    def __init__(self) -> None:
        self.counts = np.zeros(64, dtype=np.int64)

    def add(self, lengths: np.ndarray) -> None:
        if len(lengths) == 0:
            return
        top = int(lengths.max())
        if top >= len(self.counts):
            self.counts = np.pad(self.counts, (0, top + 1 - len(self.counts)))
        self.counts += np.bincount(lengths, minlength=len(self.counts))

    def merge(self, other: LengthHistogram) -> None:
        if len(other.counts) > len(self.counts):
            self.counts = np.pad(self.counts, (0, len(other.counts) - len(self.counts)))
        self.counts[: len(other.counts)] += other.counts

    def summary(self) -> dict[str, int]:
        total = int(self.counts.sum())
        if total == 0:
            return {f"p{p}": 0 for p in PERCENTILES} | {"max": 0}
        cumulative = np.cumsum(self.counts)
        out = {f"p{p}": int(np.searchsorted(cumulative, np.ceil(total * p / 100))) for p in PERCENTILES}
        out["max"] = int(np.nonzero(self.counts)[0][-1])
        return out
