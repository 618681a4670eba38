"""Keeping another problem's dev and test texts out of a self-supervised problem's text.

A pretraining corpus often holds the very texts a fine-tuning problem is evaluated on,
and the two problems split train from dev by hashing different keys (a line number, an
id column), so nothing keeps those texts out of pretraining. Here the other problem's
dev and test records are read as datagen splits them, every text of theirs (each raw
field, and the inputs and targets made of them) is hashed after collapsing whitespace,
and a document of the self-supervised source with the same hash is left out, in every
split, by both runners (they are not counted in the meta file's rows_read; a log line
counts them). Imports: core and data (options, plan, problem, registry, sources.source_base and stages).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
from absl import logging

from t2tcli import registry
from t2tcli.data.datagen.options import Options, split_sources
from t2tcli.data.problem import Text2TextProblem
from t2tcli.data.sources.source_base import Chunk, ReadOptions, Source
from t2tcli.errors import UserError

# The splits whose texts are kept out: what a fine-tuned model is measured on.
HELD_OUT_SPLITS = ("dev", "test")
# Hash sets already computed, by (problems, tmp_dir): split_sources is called once per read.
_HELD_OUT: dict[tuple[tuple[str, ...], str | None], np.ndarray] = {}
_COMPUTING: set[str] = set()


def text_hashes(texts: Iterable[str]) -> np.ndarray:
    """A hash of each text with its whitespace collapsed: the same text however it was laid out."""
    squashed = np.asarray([" ".join(str(t).split()) for t in texts], dtype=object)
    return pd.util.hash_array(squashed) if len(squashed) else np.zeros(0, dtype=np.uint64)


def held_out_hashes(names: Sequence[str], options: Options) -> np.ndarray:
    """The sorted hashes of every text of the dev and test splits of problems `names`."""
    from t2tcli.data.datagen.stages import split_chunks

    key = (tuple(names), options.tmp_dir)
    if key in _HELD_OUT:
        return _HELD_OUT[key]
    parts: list[np.ndarray] = []
    for name in names:
        if name in _COMPUTING:
            raise UserError(f"problem '{name}': its dev texts are left out of a problem whose dev texts it leaves out")
        _COMPUTING.add(name)
        try:
            for task, _ in registry.problem(name).components():
                for part in split_chunks(task, options, []):
                    if part.split not in HELD_OUT_SPLITS:
                        continue
                    records = part.frame.iloc[part.rows]
                    for column in records.columns:
                        parts.append(text_hashes(v for v in records[column].tolist() if isinstance(v, str)))
                    parts.append(text_hashes(part.inputs))
                    parts.append(text_hashes(part.targets))
        finally:
            _COMPUTING.discard(name)
    hashes = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)
    _HELD_OUT[key] = hashes
    return hashes


class LeavingOut(Source):
    """`inner`'s records less those whose `field` is a dev or test text of problems `names`."""

    def __init__(self, inner: Source, field: str, names: Sequence[str], options: Options) -> None:
        self.inner, self.field, self.names, self.options = inner, field, tuple(names), options
        self.origin = inner.origin
        self.required = inner.required

    def units(self, options: ReadOptions) -> list[Any]:
        return self.inner.units(options)

    def unit_chunks(self, unit: Any, options: ReadOptions) -> Iterator[Chunk]:
        held_out = held_out_hashes(self.names, self.options)
        left_out = 0
        origin = self.origin
        for chunk in self.inner.unit_chunks(unit, options):
            if self.field not in chunk.frame.columns:
                raise UserError(f"{chunk.origin or self.origin}: no field '{self.field}' to compare with dev texts")
            texts = chunk.frame[self.field].tolist()
            drop = np.isin(text_hashes(texts), held_out)
            origin = chunk.origin or origin
            if drop.any():
                keep = ~drop
                left_out += int(drop.sum())
                chunk = Chunk(
                    chunk.frame[keep].reset_index(drop=True),
                    chunk.lines[keep],
                    chunk.keys[keep],
                    chunk.origin,
                    chunk.first_row,
                )
            yield chunk
        if left_out:
            logging.info(
                "%s: left out %d texts that are %s texts of %s",
                origin,
                left_out,
                "/".join(HELD_OUT_SPLITS),
                ", ".join(self.names),
            )

    def fingerprint(self) -> str:
        """Changes with the inner source and with whatever changes the held-out problems' splits."""
        from t2tcli.data.datagen.plan import code_fingerprint

        others: dict[str, Any] = {}
        for name in self.names:
            for task, _ in registry.problem(name).components():
                sources = split_sources(task, self.options)
                others[task.name] = {
                    "sources": {split: src.fingerprint() for split, src in sources.items()},
                    "dev_fraction": task.dev_fraction,
                    "code": code_fingerprint(task),
                }
        return json.dumps({"text": self.inner.fingerprint(), "left_out": others}, sort_keys=True)

    def recorded_name(self) -> str:
        return self.inner.recorded_name()


def names_to_leave_out(task: Text2TextProblem, options: Options) -> tuple[str, ...]:
    """The problems whose dev and test texts `task`'s text leaves out: its own
    `leave_out_dev_of` and, for a self-supervised task, t2t-datagen --leave_out_dev_of."""
    if task.objective is None:
        return ()
    names = [*getattr(task, "leave_out_dev_of", ()), *options.leave_out_dev_of]
    return tuple(dict.fromkeys(n for n in names if n and n != task.name))


def leaving_out(task: Text2TextProblem, sources: dict[str, Source], options: Options) -> dict[str, Source]:
    """`sources`, each wrapped to leave out the texts `names_to_leave_out` names (as they are when none)."""
    names = names_to_leave_out(task, options)
    if not names:
        return sources
    for name in names:
        registry.problem(name)  # an unknown name is one line, before anything is read
    field = getattr(task, "text_field", "text")
    return {split: LeavingOut(source, field, names, options) for split, source in sources.items()}
