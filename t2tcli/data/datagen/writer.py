"""Pass 2: pairs -> encoded records in per-shard buckets -> shards, then the meta file, last.

`encoded_blocks` encodes, and `finish_task` puts every shard in place and writes the meta
file: the local `ShardWriter` and the Beam pipeline both use them, which is what keeps
their outputs identical. Imports: io and data (layout, meta, options, problem,
shards, stages, stats, vocabulary.packed_encoder and vocabulary.vocab).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from t2tcli.data import layout
from t2tcli.data.datagen import shards
from t2tcli.data.datagen.meta import build_meta, split_entry, write_meta
from t2tcli.data.datagen.options import Options, num_shards
from t2tcli.data.datagen.stages import ReadTotals
from t2tcli.data.datagen.stats import LengthHistogram
from t2tcli.data.problem import Text2TextProblem
from t2tcli.data.vocabulary.packed_encoder import PackedTextEncoder
from t2tcli.data.vocabulary.vocab import Vocabulary
from t2tcli.io import fs

# Rows encoded and serialized at a time, whatever --chunk_rows is: a batch's arrays hold
# several entries per word and per byte, and this keeps them to a few MiB.
ENCODE_ROWS = 8192


def encoded_blocks(
    text_encoder: PackedTextEncoder, inputs: list[str], targets: list[str]
) -> Iterator[tuple[slice, Any, np.ndarray, Any, np.ndarray]]:
    """`ENCODE_ROWS` pairs at a time: (their slice, packed inputs, input lengths, packed
    targets, target lengths), lengths counting the EOS the records append."""
    for start in range(0, len(inputs), ENCODE_ROWS):
        block = slice(start, start + ENCODE_ROWS)
        packed_inputs, input_lengths = text_encoder.encode(inputs[block])
        packed_targets, target_lengths = text_encoder.encode(targets[block])
        yield block, packed_inputs, input_lengths + 1, packed_targets, target_lengths + 1


def finish_task(
    task: Text2TextProblem,
    options: Options,
    vocab_file: str,
    vocab_size: int,
    totals: ReadTotals,
    lengths: dict[str, LengthHistogram],
    place: Callable[[str, int, str], None],
) -> dict[str, Any]:
    """The shards of every split pass 1 read, each put at its final path by `place(split,
    index, path)`; then the meta file, last. Returns the meta."""
    splits_meta: dict[str, Any] = {}
    for split in layout.SPLITS:
        if split not in totals.counts:
            continue
        count = num_shards(task, options)[split]
        paths = [layout.shard_path(options.data_dir, task.name, split, index, count) for index in range(count)]
        for index, path in enumerate(paths):
            place(split, index, path)
        splits_meta[split] = split_entry(totals.counts[split], paths)
    meta = build_meta(task, options, vocab_file, vocab_size, splits_meta, totals, lengths)
    write_meta(task, options, meta)
    return meta


class ShardWriter:
    """Pass 2 of the local run for one problem: rows -> encoded, bucketed, shuffled shards;
    then the meta file, last.

    Rows come split by split from the spool once the vocabulary is trained, or straight
    from pass 1 when it existed already; the output is the same either way.
    """

    def __init__(self, task: Text2TextProblem, work_dir: str, vocab_file: str, options: Options) -> None:
        self.task, self.work_dir, self.vocab_file, self.options = task, work_dir, vocab_file, options
        self.vocab = Vocabulary(vocab_file)
        self.text_encoder = PackedTextEncoder(self.vocab, supplied=bool(options.vocab_from or task.vocab.source))
        self.example_encoder = shards.ExampleEncoder()
        self.counts = num_shards(task, options)
        self.lengths = {"inputs": LengthHistogram(), "targets": LengthHistogram()}
        self.buckets: dict[str, shards.SplitBuckets] = {}

    def add(self, split: str, hashes: np.ndarray, inputs: list[str], targets: list[str]) -> None:
        """Encodes rows into the split's buckets, `ENCODE_ROWS` at a time."""
        if split not in self.buckets:
            self.buckets[split] = shards.SplitBuckets(self.work_dir, split, self.counts[split])
        for block, packed_inputs, input_lengths, packed_targets, target_lengths in encoded_blocks(
            self.text_encoder, inputs, targets
        ):
            self.lengths["inputs"].add(input_lengths)
            self.lengths["targets"].add(target_lengths)
            # Records made in shard order land in their buckets as contiguous runs of bytes.
            shard_ids = shards.shard_of(hashes[block], self.counts[split])
            order = np.argsort(shard_ids, kind="stable")
            records = self.example_encoder.records(packed_inputs.take(order), packed_targets.take(order))
            self.buckets[split].add(shard_ids[order], records)

    def close(self) -> None:
        for buckets in self.buckets.values():
            buckets.close()

    def finish(self, totals: ReadTotals) -> dict[str, Any]:
        """Writes every split's shards, then the meta file; returns the meta."""
        self.close()
        return finish_task(
            self.task, self.options, self.vocab_file, self.vocab.vocab_size, totals, self.lengths, self._place
        )

    def _place(self, split: str, index: int, path: str) -> None:
        bucket = self.buckets[split].paths[index]
        shards.write_shard(bucket, path, shards.shard_seed(self.task.name, split, index))
        fs.remove(bucket)
