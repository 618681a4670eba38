"""Serialized `tf.train.Example`s and the TFRecord shards that hold them.

Examples are written as protobuf bytes directly (two int64 features, packed, "inputs"
before "targets"): several times faster than building protos per row, and the bytes
depend only on the ids, so identical input gives byte-identical shards. A whole batch
is serialized and framed at once: the header bytes of an Example depend only on the
sizes of its two id lists, so they are built once per distinct pair of sizes and the
records are assembled by one numpy gather (see `t2tcli.data.vocabulary.packed_encoder.Spans`); the
CRC of each record is the only per-row call.

Each split's records are first appended, already framed, to one bucket file per shard
(chosen by a hash of the row key); then each bucket is read back, shuffled with a
seeded RNG for the train split, and written as a TFRecord under a temporary name that
is renamed when complete. Memory is bounded by the size of one shard, not of the data
set. Buckets are the local run's own scratch files, named by `layout`, made and read back
through `t2tcli.io.scratch` (no symlink followed, no FIFO read).
Imports: io and data (layout, vocabulary.packed_encoder and vocabulary.vocab).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from typing import BinaryIO

import google_crc32c
import numpy as np

from t2tcli.data import layout
from t2tcli.data.vocabulary.packed_encoder import Spans, interleave, pack_ids, varint
from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.io import atomic, scratch

_EOS = varint(EOS_ID)
# A map entry: field 1 (the key string), then the tag of field 2 (the Feature value).
_INPUTS_KEY = b"\x0a\x06inputs\x12"
_TARGETS_KEY = b"\x0a\x07targets\x12"
# TFRecord framing around each record: 8-byte length and its masked CRC before, the data's masked CRC after.
_HEADER_BYTES = 12
_FOOTER_BYTES = 4
# Records per write when a shard is assembled: bounds the memory of the copy.
_WRITE_BLOCK = 16_384
_MAX_CACHED_HEADERS = 100_000


def _entry_prefix(key: bytes, values_bytes: int) -> bytes:
    """All bytes of a features-map entry before its packed values, for a given values size."""
    int64_list = b"\x0a" + varint(values_bytes)  # Int64List.value, packed
    feature = b"\x1a" + varint(len(int64_list) + values_bytes)  # Feature.int64_list
    value = key + varint(len(feature) + len(int64_list) + values_bytes)  # map key, then the Feature
    body_size = len(value) + len(feature) + len(int64_list) + values_bytes
    return b"\x0a" + varint(body_size) + value + feature + int64_list


class ExampleEncoder:
    """Packed id bytes (see t2tcli.data.vocabulary.packed_encoder) -> TFRecord records of `tf.train.Example`s."""

    def __init__(self) -> None:
        # (inputs bytes, targets bytes), EOS included -> (bytes before the inputs, bytes between inputs and targets)
        self._headers: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def _header(self, a: int, b: int) -> tuple[bytes, bytes]:
        if (a, b) not in self._headers:
            if len(self._headers) >= _MAX_CACHED_HEADERS:
                self._headers.clear()
            prefix_a, prefix_b = _entry_prefix(_INPUTS_KEY, a), _entry_prefix(_TARGETS_KEY, b)
            size = len(prefix_a) + a + len(prefix_b) + b
            self._headers[(a, b)] = (b"\x0a" + varint(size) + prefix_a, _EOS + prefix_b)
        return self._headers[(a, b)]

    def records(self, inputs: Spans, targets: Spans) -> Spans:
        """Framed TFRecord records of Examples with int64 features "inputs" and "targets", EOS appended."""
        count = len(inputs)
        pairs = (inputs.sizes + len(_EOS)) << 32 | (targets.sizes + len(_EOS))
        distinct, inverse = np.unique(pairs, return_inverse=True)
        headers = [self._header(p >> 32, p & 0xFFFFFFFF) for p in distinct.tolist()]
        before = Spans.from_list([h[0] for h in headers]).take(inverse)
        between = Spans.from_list([h[1] for h in headers]).take(inverse)
        return tfrecords([before, inputs, between, targets, Spans.repeated(_EOS, count)])

    def encode(self, inputs: Sequence[int], targets: Sequence[int]) -> bytes:
        """One serialized Example from id lists: for tests and small callers."""
        record = self.records(pack_ids([inputs])[0], pack_ids([targets])[0]).tolist()[0]
        return record[_HEADER_BYTES:-_FOOTER_BYTES]


def shard_of(hashes: np.ndarray, count: int) -> np.ndarray:
    """Shard index per example from the high bits of its key hash (the low bits pick the split)."""
    return ((hashes >> np.uint64(32)) % np.uint64(count)).astype(np.int64)


def shuffle_seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "little")


def shard_seed(problem_name: str, split: str, index: int) -> int | None:
    """The seed a shard's records are shuffled by: train shards only, the others keep their order."""
    return shuffle_seed(problem_name, split, str(index)) if split == "train" else None


class SplitBuckets:
    """Per-shard bucket files of one split, in a work directory next to the outputs.

    A bucket is a sequence of blocks: a record count, the records' sizes, then the
    records, so a block is written and read with a handful of calls.
    """

    def __init__(self, work_dir: str, split: str, count: int) -> None:
        self.paths = [layout.bucket_path(work_dir, split, i) for i in range(count)]
        self._files: list[BinaryIO] = []
        try:
            for path in self.paths:
                self._files.append(scratch.create_file(path))
        except BaseException:
            for f in self._files:  # the ones opened so far; the failure to open is what is raised
                with contextlib.suppress(OSError):
                    f.close()
            raise

    def add(self, shards: np.ndarray, records: Spans) -> None:
        order = np.argsort(shards, kind="stable")
        bounds = np.searchsorted(shards[order], np.arange(len(self._files) + 1)).tolist()
        for shard, f in enumerate(self._files):
            block = records.take(order[bounds[shard] : bounds[shard + 1]])
            if len(block):
                f.write(np.array([len(block)], dtype="<u4").tobytes() + block.sizes.astype("<u4").tobytes())
                f.write(block.joined())

    def close(self) -> None:
        """Closes every bucket, each one even when another fails (a full disk fails the flush)."""
        failure: OSError | None = None
        for f in self._files:
            try:
                f.close()
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def read_bucket(path: str) -> Spans:
    with scratch.open_file(path) as f:
        data = np.fromfile(f, dtype=np.uint8)
    starts: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    offset = 0
    while offset < len(data):
        count = int(np.frombuffer(data, dtype="<u4", count=1, offset=offset)[0])
        block_sizes = np.frombuffer(data, dtype="<u4", count=count, offset=offset + 4).astype(np.int64)
        offset += 4 + 4 * count
        ends = offset + np.cumsum(block_sizes)
        starts.append(ends - block_sizes)
        sizes.append(block_sizes)
        offset = int(ends[-1])
    empty = [np.zeros(0, dtype=np.int64)]
    return Spans(data, np.concatenate(starts or empty), np.concatenate(sizes or empty))


def write_shard(bucket_path: str, final_path: str, seed: int | None) -> int:
    """Bucket -> TFRecord at `final_path` (shuffled when `seed` is given); returns the count."""
    return write_records(read_bucket(bucket_path), final_path, seed)


def write_records(records: Spans, final_path: str, seed: int | None) -> int:
    """Records, in order or shuffled by `seed`, -> a TFRecord at `final_path` (local or
    remote; written under a temporary name and renamed); returns the count."""
    if seed is not None:
        records = records.take(np.random.default_rng(seed).permutation(len(records)))
    with atomic.output(final_path, "wb") as f:
        for start in range(0, len(records), _WRITE_BLOCK):
            f.write(records.take(slice(start, start + _WRITE_BLOCK)).joined().tobytes())
    return len(records)


def _masked_crc(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masking of CRC32C values (rotate right by 15, add a constant), on uint32 arrays."""
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


def tfrecords(parts: Sequence[Spans]) -> Spans:
    """TFRecord records (length, masked CRC32C of length, data, masked CRC32C of data).

    Record i's data is item i of every part, concatenated. Written here rather than
    through tf.io.TFRecordWriter so that t2t-datagen never loads TensorFlow, whose
    import alone costs seconds per run.
    """
    count = len(parts[0])
    sizes = sum((p.sizes for p in parts), np.zeros(count, dtype=np.int64))
    framed = interleave([_length_headers(sizes), *parts, Spans.repeated(bytes(_FOOTER_BYTES), count)])
    data_starts = framed.starts + _HEADER_BYTES
    footers = data_starts + sizes
    raw = framed.data.tobytes()
    slices = map(slice, data_starts.tolist(), footers.tolist())
    crcs = np.fromiter(map(google_crc32c.value, map(raw.__getitem__, slices)), dtype=np.uint32, count=count)
    framed.data[footers[:, None] + np.arange(_FOOTER_BYTES)] = _as_bytes(_masked_crc(crcs))
    return framed


def _length_headers(sizes: np.ndarray) -> Spans:
    """Per record: its 8-byte length and that length's masked CRC, computed once per distinct length."""
    distinct, inverse = np.unique(sizes, return_inverse=True)
    lengths = distinct.astype("<u8").view(np.uint8).reshape(-1, 8)
    crcs = np.fromiter(map(google_crc32c.value, map(bytes, lengths)), dtype=np.uint32, count=len(distinct))
    table = np.concatenate([lengths, _as_bytes(_masked_crc(crcs))], axis=1).reshape(-1)
    return Spans(table, inverse * _HEADER_BYTES, np.full(len(sizes), _HEADER_BYTES, dtype=np.int64))


def _as_bytes(values: np.ndarray) -> np.ndarray:
    """uint32 values -> one row of 4 little-endian bytes each."""
    return values.astype("<u4").view(np.uint8).reshape(-1, 4)


def tfrecord_bytes(records: Sequence[bytes]) -> bytes:
    """A TFRecord file's bytes holding `records`, in order."""
    return tfrecords([Spans.from_list(records)]).joined().tobytes()
