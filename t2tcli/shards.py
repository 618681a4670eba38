"""Serialized `tf.train.Example`s and the TFRecord shards that hold them.

Examples are written as protobuf bytes directly (two int64 features, packed, "inputs"
before "targets"): several times faster than building protos per row, and the bytes
depend only on the ids, so identical input gives byte-identical shards.

Each split's examples are first appended to one bucket file per shard (chosen by a
hash of the row key), then each bucket is read back, shuffled with a seeded RNG for
the train split, and written as a TFRecord under a temporary name that is renamed
when complete. Memory is bounded by the size of one shard, not of the data set.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence

import google_crc32c
import numpy as np

from t2tcli.packed_encoder import varint
from t2tcli.vocab import EOS_ID

_EOS = varint(EOS_ID)
# A map entry: field 1 (the key string), then the tag of field 2 (the Feature value).
_INPUTS_KEY = b"\x0a\x06inputs\x12"
_TARGETS_KEY = b"\x0a\x07targets\x12"
_TABLE_BYTES = 1 << 12


def _entry_prefix(key: bytes, values_bytes: int) -> bytes:
    """All bytes of a features-map entry before its packed values, for a given values size."""
    int64_list = b"\x0a" + varint(values_bytes)  # Int64List.value, packed
    feature = b"\x1a" + varint(len(int64_list) + values_bytes)  # Feature.int64_list
    value = key + varint(len(feature) + len(int64_list) + values_bytes)  # map key, then the Feature
    body_size = len(value) + len(feature) + len(int64_list) + values_bytes
    return b"\x0a" + varint(body_size) + value + feature + int64_list


class ExampleEncoder:
    """Packed id bytes (see t2tcli.packed_encoder) -> serialized `tf.train.Example` bytes.

    Every header byte depends only on the sizes of the packed values, so the headers
    for sizes up to a few KiB are precomputed and an example is one bytes join.
    """

    def __init__(self) -> None:
        sizes = range(_TABLE_BYTES)
        self._inputs_prefix = [_entry_prefix(_INPUTS_KEY, n) for n in sizes]
        self._targets_prefix = [_entry_prefix(_TARGETS_KEY, n) for n in sizes]
        self._varints = [varint(n) for n in range(4 * _TABLE_BYTES)]

    def example(self, inputs: bytes, targets: bytes) -> bytes:
        """One Example with int64 features "inputs" and "targets", EOS appended to each."""
        a, b = len(inputs) + len(_EOS), len(targets) + len(_EOS)
        if a < _TABLE_BYTES and b < _TABLE_BYTES:
            prefix_a, prefix_b = self._inputs_prefix[a], self._targets_prefix[b]
            size = len(prefix_a) + a + len(prefix_b) + b
            return b"".join((b"\x0a", self._varints[size], prefix_a, inputs, _EOS, prefix_b, targets, _EOS))
        features = _entry_prefix(_INPUTS_KEY, a) + inputs + _EOS + _entry_prefix(_TARGETS_KEY, b) + targets + _EOS
        return b"\x0a" + varint(len(features)) + features

    def encode(self, inputs: Sequence[int], targets: Sequence[int]) -> bytes:
        """The same from id lists: for tests and small callers."""
        return self.example(b"".join(map(varint, inputs)), b"".join(map(varint, targets)))


def shard_of(hashes: np.ndarray, count: int) -> np.ndarray:
    """Shard index per example from the high bits of its key hash (the low bits pick the split)."""
    return ((hashes >> np.uint64(32)) % np.uint64(count)).astype(np.int64)


def shuffle_seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "little")


class SplitBuckets:
    """Per-shard bucket files of one split, in a work directory next to the outputs.

    A bucket is a sequence of blocks: a record count, the records' sizes, then the
    records, so a block is written and read with a handful of calls.
    """

    def __init__(self, work_dir: str, split: str, count: int) -> None:
        self.paths = [os.path.join(work_dir, f"{split}.bucket{i:05d}") for i in range(count)]
        self._files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed in close()

    def add(self, shards: np.ndarray, records: Sequence[bytes]) -> None:
        order = np.argsort(shards, kind="stable")
        bounds = np.searchsorted(shards[order], np.arange(len(self._files) + 1))
        ordered = [records[i] for i in order.tolist()]
        for shard, f in enumerate(self._files):
            block = ordered[bounds[shard] : bounds[shard + 1]]
            if block:
                sizes = np.fromiter(map(len, block), dtype="<u4", count=len(block))
                f.write(np.array([len(block)], dtype="<u4").tobytes() + sizes.tobytes())
                f.write(b"".join(block))

    def close(self) -> None:
        for f in self._files:
            f.close()


def read_bucket(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    records: list[bytes] = []
    offset = 0
    while offset < len(data):
        count = int(np.frombuffer(data, dtype="<u4", count=1, offset=offset)[0])
        sizes = np.frombuffer(data, dtype="<u4", count=count, offset=offset + 4).astype(np.int64)
        offset += 4 + 4 * count
        ends = (offset + np.cumsum(sizes)).tolist()
        starts = [offset] + ends[:-1]
        records.extend(map(data.__getitem__, map(slice, starts, ends)))
        offset = ends[-1]
    return records


def write_shard(bucket_path: str, final_path: str, seed: int | None) -> int:
    """Bucket -> TFRecord at `final_path` (shuffled when `seed` is given); returns the count."""
    records = read_bucket(bucket_path)
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(records))
        records = [records[i] for i in order]
    tmp = f"{final_path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(tfrecord_bytes(records))
    os.replace(tmp, final_path)
    return len(records)


def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def tfrecord_bytes(records: Sequence[bytes]) -> bytes:
    """TFRecord framing (length, masked CRC32C of length, data, masked CRC32C of data).

    Written here rather than through tf.io.TFRecordWriter so that t2t-datagen never
    loads TensorFlow, whose import alone costs seconds per run.
    """
    parts: list[bytes] = []
    for record in records:
        length = struct.pack("<Q", len(record))
        parts += (length, _masked_crc(length), record, _masked_crc(record))
    return b"".join(parts)
