"""Copy and reverse a short sequence of letters: problems that need no files.

A tiny model learns them in minutes on a CPU, which makes them the fastest way to
check a whole pipeline end to end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from t2tcli.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import GeneratedSource

ALPHABET = tuple("abcdefghij")
TOY_VOCAB = VocabSpec(name="toy", size=64)


def random_sequences(rows: int, seed: int, min_length: int = 3, max_length: int = 10) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, size=rows)
    letters = rng.integers(0, len(ALPHABET), size=int(lengths.sum()))
    ends = np.cumsum(lengths)
    spans = zip(lengths.tolist(), ends.tolist(), strict=True)
    return [[ALPHABET[i] for i in letters[end - n : end]] for n, end in spans]


class _ToySequence(Text2TextProblem):
    vocab = TOY_VOCAB
    metrics = ("accuracy", "sequence_accuracy")
    num_shards = {"train": 2, "dev": 1, "test": 1}
    columnwise = True
    train_rows = 20_000
    test_rows = 1_000

    def target(self, tokens: list[str]) -> list[str]:
        raise NotImplementedError

    def make(self, rows: int, seed: int) -> pd.DataFrame:
        sequences = random_sequences(rows, seed)
        return pd.DataFrame(
            {"inputs": [" ".join(s) for s in sequences], "targets": [" ".join(self.target(s)) for s in sequences]}
        )

    def source(self, tmp_dir: str | None) -> dict[str, GeneratedSource]:
        return {
            "train": GeneratedSource(self.name, self.make, self.train_rows, seed=1),
            "test": GeneratedSource(self.name, self.make, self.test_rows, seed=2),
        }


@register_problem("copy_sequence")
class CopySequence(_ToySequence):
    """`a c b` -> `a c b`."""

    def target(self, tokens: list[str]) -> list[str]:
        return tokens


@register_problem("reverse_sequence")
class ReverseSequence(_ToySequence):
    """`a c b` -> `b c a`."""

    def target(self, tokens: list[str]) -> list[str]:
        return tokens[::-1]
