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

import numpy as np

_LEN = struct.Struct("<I")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class ExampleEncoder:
    """Turns id lists into serialized `tf.train.Example` bytes, with a varint table for speed."""

    def __init__(self, vocab_size: int) -> None:
        self._table = [_varint(i) for i in range(max(vocab_size, 1 << 14))]

    def _packed(self, ids: Sequence[int]) -> bytes:
        table = self._table
        try:
            return b"".join(map(table.__getitem__, ids))
        except IndexError:
            return b"".join(_varint(int(i)) for i in ids)

    def _len(self, n: int) -> bytes:
        return self._table[n] if n < len(self._table) else _varint(n)

    def _entry(self, key: bytes, ids: Sequence[int]) -> bytes:
        length = self._len
        packed = self._packed(ids)
        int64_list = b"\x0a" + length(len(packed)) + packed
        feature = b"\x1a" + length(len(int64_list)) + int64_list
        entry = b"\x0a" + length(len(key)) + key + b"\x12" + length(len(feature)) + feature
        return b"\x0a" + length(len(entry)) + entry

    def encode(self, inputs: Sequence[int], targets: Sequence[int]) -> bytes:
        features = self._entry(b"inputs", inputs) + self._entry(b"targets", targets)
        return b"\x0a" + self._len(len(features)) + features


def shard_of(hashes: np.ndarray, count: int) -> np.ndarray:
    """Shard index per example from the high bits of its key hash (the low bits pick the split)."""
    return ((hashes >> np.uint64(32)) % np.uint64(count)).astype(np.int64)


def shuffle_seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "little")


class SplitBuckets:
    """Per-shard bucket files of one split, in a work directory next to the outputs."""

    def __init__(self, work_dir: str, split: str, count: int) -> None:
        self.paths = [os.path.join(work_dir, f"{split}.bucket{i:05d}") for i in range(count)]
        self._files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed in close()

    def add(self, shards: np.ndarray, records: Sequence[bytes]) -> None:
        files = self._files
        pack = _LEN.pack
        for shard, record in zip(shards.tolist(), records, strict=True):
            f = files[shard]
            f.write(pack(len(record)))
            f.write(record)

    def close(self) -> None:
        for f in self._files:
            f.close()


def read_bucket(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    records = []
    offset = 0
    unpack = _LEN.unpack_from
    while offset < len(data):
        (size,) = unpack(data, offset)
        offset += 4
        records.append(data[offset : offset + size])
        offset += size
    return records


def write_shard(bucket_path: str, final_path: str, seed: int | None) -> int:
    """Bucket -> TFRecord at `final_path` (shuffled when `seed` is given); returns the count."""
    from t2tcli.compat import tf

    records = read_bucket(bucket_path)
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(records))
        records = [records[i] for i in order]
    tmp = f"{final_path}.tmp{os.getpid()}"
    with tf.io.TFRecordWriter(tmp) as writer:
        for record in records:
            writer.write(record)
    os.replace(tmp, final_path)
    return len(records)
