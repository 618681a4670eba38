"""How a datagen run is set, and what follows from that for one problem: its sources by
split, its shard counts, its read settings and progress bars.

Both runners (local and Beam) derive these the same way from here. Imports: core and
data (layout, leave_out, problem and sources.source_base).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from t2tcli import progress as progress_bars
from t2tcli.data.layout import SPLITS
from t2tcli.data.problem import Text2TextProblem
from t2tcli.data.sources.source_base import ReadOptions, Source
from t2tcli.errors import UserError


@dataclasses.dataclass
class Options:
    """How to run datagen, as opposed to what the problem is."""

    data_dir: str
    tmp_dir: str | None = None
    overwrite: bool = False
    tfds_data_dir: str | None = None
    num_train_shards: int | None = None
    chunk_rows: int = 20_000
    progress: bool | None = None  # None: a bar only when stderr is a terminal
    vocab_from: str | None = None  # a SentencePiece model or HF model directory to use as the vocabulary
    vocab_extra_ids: int | None = None  # T5 sentinels to append to it (None: the problem's extra_ids)
    # Problems whose dev and test texts a self-supervised problem's text leaves out (t2tcli.data.datagen.leave_out).
    leave_out_dev_of: tuple[str, ...] = ()


def split_sources(task: Text2TextProblem, options: Options) -> dict[str, Source]:
    sources = task.source(options.tmp_dir)
    if isinstance(sources, Source):
        sources = {"train": sources}
    if not isinstance(sources, dict) or not all(isinstance(s, Source) for s in sources.values()):
        raise UserError(f"problem '{task.name}': source() must return a Source or a dict of them by split")
    unknown = set(sources) - set(SPLITS)
    if unknown or "train" not in sources:
        raise UserError(f"problem '{task.name}': source() splits {sorted(sources)}; expected train [, dev, test]")
    from t2tcli.data.datagen.leave_out import leaving_out

    return leaving_out(task, sources, options)


def num_shards(task: Text2TextProblem, options: Options) -> dict[str, int]:
    counts = dict.fromkeys(SPLITS, 1) | dict(task.num_shards)
    if options.num_train_shards:
        counts["train"] = options.num_train_shards
    return counts


def read_options_of(options: Options, parts: int = 1) -> ReadOptions:
    return ReadOptions(chunk_rows=options.chunk_rows, tfds_data_dir=options.tfds_data_dir, parts=parts)


def progress(options: Options, desc: str, total: int | None = None) -> Any:
    enabled = progress_bars.wanted(options.progress)
    return progress_bars.bar(total, " rows", desc, enabled, unit_scale=True, leave=False)
