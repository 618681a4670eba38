"""Text -> varint-packed SentencePiece ids, fast, by encoding each distinct word once.

A SentencePiece model that splits by whitespace (the default, and T5's) segments
every space-separated word on its own, so a text's ids are the concatenation of its
words' ids. Real text repeats words (Zipf), so each distinct word is encoded once and
its packed ids kept in a table. A batch of texts is then handled as one UTF-8 buffer:
numpy finds the words, turns each word of up to 15 bytes into an exact integer key
(its bytes), looks the keys up in a hash table and gathers the words' packed ids, with
no Python object per word or per text; only new and longer words are looked up by
string. The first texts, and a sample after that, are checked against a plain encode
of the whole texts; on any difference (another kind of model), the cache is switched
off and every text is encoded whole.

Batches are held as `Spans` (byte strings as slices of one buffer) rather than lists
of `bytes`, so that words -> texts -> Examples -> TFRecords stays a few array
operations per batch however many rows it holds.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd
from absl import logging

from t2tcli.data.vocabulary.vocab import Vocabulary

VERIFY_TEXTS = 2000
VERIFY_SAMPLE = 64
VERIFY_INTERVAL = 20_000
MAX_CACHED_WORDS = 2_000_000
# Texts looked at to decide whether a batch repeats itself enough to encode each distinct text once.
_REPEAT_PROBE = 256
# Above this mean size, joining slices beats a per-byte numpy gather.
_JOIN_SPAN_BYTES = 48
# Output bytes per step of a numpy gather: bounds its index arrays to a few MiB.
_GATHER_PIECE = 1 << 19


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def gather(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """`data[starts[i] : starts[i] + sizes[i]]` for every i, end to end, without a Python loop."""
    total = int(sizes.sum())
    if total == 0:
        return np.empty(0, dtype=np.uint8)
    if np.array_equal(starts[1:], starts[:-1] + sizes[:-1]):  # one run of bytes already
        return data[starts[0] : starts[0] + total].copy()
    if total > _JOIN_SPAN_BYTES * len(sizes):  # long spans: a slice per span is cheaper than an index per byte
        view = memoryview(data)
        slices = map(slice, starts.tolist(), (starts + sizes).tolist())
        return np.frombuffer(bytearray().join(map(view.__getitem__, slices)), dtype=np.uint8)
    out = np.empty(total, dtype=np.uint8)
    ends = np.cumsum(sizes)
    # Each output byte's source position is where its span starts plus how far into the span it is:
    # an index per byte, built a piece at a time so that it stays a few MiB.
    cuts = np.searchsorted(ends, np.arange(_GATHER_PIECE, total, _GATHER_PIECE), side="right").tolist()
    for lo, hi in zip([0, *cuts], [*cuts, len(sizes)], strict=True):
        if lo == hi:
            continue
        out_lo, out_hi = int(ends[lo - 1]) if lo else 0, int(ends[hi - 1])
        index = np.repeat(starts[lo:hi] - (ends[lo:hi] - sizes[lo:hi]), sizes[lo:hi])
        index += np.arange(out_lo, out_hi, dtype=index.dtype)
        out[out_lo:out_hi] = data[index]
    return out


@dataclasses.dataclass(frozen=True)
class Spans:
    """Byte strings as slices of one buffer: item i is `data[starts[i] : starts[i] + sizes[i]]`.

    Reordering or repeating items (`take`) moves no bytes; `joined` copies them once, in
    the final order, when they are written.
    """

    data: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    @classmethod
    def contiguous(cls, data: np.ndarray, sizes: np.ndarray) -> Spans:
        """Items stored end to end in `data`, of the given sizes."""
        sizes = np.asarray(sizes, dtype=np.int64)
        return cls(data, np.cumsum(sizes) - sizes, sizes)

    @classmethod
    def from_list(cls, items: Sequence[bytes]) -> Spans:
        sizes = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        return cls.contiguous(np.frombuffer(b"".join(items), dtype=np.uint8), sizes)

    @classmethod
    def repeated(cls, item: bytes, count: int) -> Spans:
        """The same byte string `count` times, stored once."""
        return cls(np.frombuffer(item, dtype=np.uint8), np.zeros(count, np.int64), np.full(count, len(item), np.int64))

    def __len__(self) -> int:
        return len(self.sizes)

    def take(self, order: np.ndarray | slice) -> Spans:
        return Spans(self.data, self.starts[order], self.sizes[order])

    def joined(self) -> np.ndarray:
        return gather(self.data, self.starts, self.sizes)

    def tolist(self) -> list[bytes]:
        view = memoryview(self.data)
        ends = (self.starts + self.sizes).tolist()
        return [bytes(view[s:e]) for s, e in zip(self.starts.tolist(), ends, strict=True)]


def interleave(parts: Sequence[Spans]) -> Spans:
    """Item i of the result is item i of every part, concatenated: parts of equal length."""
    count = len(parts[0])
    bases = np.cumsum([0] + [len(p.data) for p in parts[:-1]])
    data = np.concatenate([p.data for p in parts])
    starts = np.stack([p.starts + base for p, base in zip(parts, bases, strict=True)], axis=1)
    sizes = np.stack([p.sizes for p in parts], axis=1)
    joined = gather(data, starts.reshape(-1), sizes.reshape(-1))
    return Spans.contiguous(joined, sizes.sum(axis=1) if count else np.zeros(0, np.int64))


def pack_ids(ids: Sequence[Sequence[int]]) -> tuple[Spans, np.ndarray]:
    """Id lists -> (their varint bytes as Spans, id count per list)."""
    counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(counts.sum()))
    data, nbytes = _varints(flat)
    ends = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(counts, out=ends[1:])
    byte_ends = np.concatenate(([0], np.cumsum(nbytes)))[ends]
    return Spans(data, byte_ends[:-1], np.diff(byte_ends)), counts


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint bytes of non-negative values, end to end, and the byte count of each."""
    values = values.astype(np.uint64)
    nbytes = np.ones(len(values), dtype=np.int64)
    for shift in range(7, 64, 7):
        nbytes += values >= np.uint64(1 << shift)
    ends = np.cumsum(nbytes)
    starts = ends - nbytes
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    for position in range(int(nbytes.max()) if len(nbytes) else 0):
        here = nbytes > position
        low = (values[here] >> np.uint64(7 * position)) & np.uint64(0x7F)
        more = (nbytes[here] > position + 1).astype(np.uint64) << np.uint64(7)
        out[starts[here] + position] = low | more
    return out, nbytes


class _WordRows(dict):
    """word -> its row in the encoder's tables; an unseen word gets the next row and is queued."""

    def __init__(self) -> None:
        super().__init__()
        self.new: list[str] = []

    def __missing__(self, word: str) -> int:
        row = self[word] = len(self)
        self.new.append(word)
        return row


# Keeps the first n bytes of a little-endian uint64, by n (up to 16: the second word of a 16-byte key).
_FIRST_BYTES = np.array([(1 << (8 * min(n, 8))) - 1 for n in range(16)], dtype=np.uint64)
_SECOND_BYTES = np.array([(1 << (8 * max(n - 8, 0))) - 1 for n in range(16)], dtype=np.uint64)
_KEYED_BYTES = 15  # longest word with an exact two-integer key: 15 bytes, and its size in the top byte
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))


@dataclasses.dataclass
class _Words:
    """The space-separated words of a UTF-8 buffer: where each starts, its size, its key.

    A word of up to 15 bytes is identified exactly by two integers (its bytes, zero
    padded, with the size in the top byte); `key` mixes them into one for a hash table.
    Longer words are looked up by their string.
    """

    starts: np.ndarray
    sizes: np.ndarray
    keyed: np.ndarray
    first: np.ndarray
    second: np.ndarray
    key: np.ndarray

    @classmethod
    def of(cls, raw: bytes) -> _Words:
        # In-place steps where possible: these arrays hold several entries per word of the batch.
        data = np.frombuffer(raw + bytes(16), dtype=np.uint8)
        spaces = np.flatnonzero(data[: len(raw)] == 0x20)
        starts = np.zeros(len(spaces) + 1, dtype=np.int64)
        np.add(spaces, 1, out=starts[1:])
        sizes = np.full(len(starts), len(raw), dtype=np.int64)
        sizes[:-1] = spaces
        sizes -= starts
        # Every unaligned 8-byte window of the buffer, as a uint64 (no copy).
        window = np.ndarray((len(raw) + 9,), dtype="<u8", buffer=data, strides=(1,))
        keyed = sizes <= _KEYED_BYTES
        size_index = np.minimum(sizes, _KEYED_BYTES)
        first = window[starts]
        first &= _FIRST_BYTES[size_index]
        second = window[starts + 8]
        second &= _SECOND_BYTES[size_index]
        scratch = sizes.astype(np.uint64)
        scratch <<= np.uint64(56)
        second |= scratch
        key = second * _MIX[1]
        key ^= first
        key *= _MIX[0]
        np.right_shift(key, np.uint64(31), out=scratch)
        key ^= scratch
        return cls(starts, sizes, keyed, first, second, key)


class _KeyedRows:
    """Cached words of up to 15 bytes, found by their integer keys: no Python string per word."""

    def __init__(self) -> None:
        self._index = pd.Index(np.empty(0, dtype=np.uint64))
        self._first = np.empty(0, dtype=np.uint64)
        self._second = np.empty(0, dtype=np.uint64)
        self._rows = np.empty(0, dtype=np.int64)

    def find(self, words: _Words) -> np.ndarray:
        """Row of each word, -1 where it is not here (longer, new, or its key taken by another word)."""
        found = self._index.get_indexer(words.key)
        hit = (found >= 0) & words.keyed
        at = np.where(hit, found, 0)
        if len(self._rows):
            hit &= (self._first[at] == words.first) & (self._second[at] == words.second)
            return np.where(hit, self._rows[at], -1)
        return np.full(len(found), -1, dtype=np.int64)

    def add(self, words: _Words, rows: np.ndarray) -> None:
        """Makes `words` (distinct, none here yet) findable; keys that are taken are left out."""
        fresh = words.keyed & (self._index.get_indexer(words.key) < 0)
        _, firsts = np.unique(words.key, return_index=True)
        once = np.zeros(len(fresh), dtype=bool)
        once[firsts] = True
        fresh &= once
        self._index = pd.Index(np.concatenate([self._index.to_numpy(), words.key[fresh]]))
        self._first = np.concatenate([self._first, words.first[fresh]])
        self._second = np.concatenate([self._second, words.second[fresh]])
        self._rows = np.concatenate([self._rows, rows[fresh]])


class PackedTextEncoder:
    """Encodes batches of texts to (packed varint id bytes as `Spans`, id counts)."""

    def __init__(self, vocab: Vocabulary, supplied: bool = False) -> None:
        """`supplied`: the vocabulary came from the user (--vocab_from, VocabSpec.from_file or
        from_model), so a slower encoding is worth a line saying what to do about it; one
        datagen trained itself leaves nothing to act on."""
        self.vocab = vocab
        self.supplied = supplied
        self._checked = 0
        self._unchecked = 0
        self.use_word_cache = _splits_by_whitespace(vocab)
        self._reset_words()

    def _reset_words(self) -> None:
        self._rows = _WordRows()
        self._keyed = _KeyedRows()
        self._table = np.empty(0, dtype=np.uint8)  # every cached word's packed ids, end to end
        self._starts = np.empty(0, dtype=np.int64)
        self._sizes = np.empty(0, dtype=np.int64)
        self._ids = np.empty(0, dtype=np.int64)

    def _whole(self, texts: Sequence[str]) -> tuple[Spans, np.ndarray]:
        return pack_ids(self.vocab.encode_batch(texts))

    def _cache_new_words(self) -> None:
        new, self._rows.new = self._rows.new, []
        if not new:
            return
        packed, counts = self._whole(new)
        first_row = len(self._sizes)
        self._starts = np.concatenate([self._starts, packed.starts + len(self._table)])
        self._sizes = np.concatenate([self._sizes, packed.sizes])
        self._ids = np.concatenate([self._ids, counts])
        self._table = np.concatenate([self._table, packed.data])
        words = _Words.of(" ".join(new).encode("utf-8", "surrogatepass"))
        self._keyed.add(words, np.arange(first_row, first_row + len(new), dtype=np.int64))

    def _word_rows(self, texts: Sequence[str]) -> np.ndarray:
        """The row of every space-separated word of the texts, in order; new words are cached."""
        # Joining with the separator that is split on gives every text's words, in order.
        joined = " ".join(texts)
        raw = joined.encode("utf-8", "surrogatepass")  # a space is byte 0x20 and nothing else is
        words = _Words.of(raw)
        rows = self._keyed.find(words)
        missing = np.flatnonzero(rows < 0)
        if len(missing) * 8 <= len(rows):  # a few: look those up by string
            starts = words.starts[missing].tolist()
            ends = (words.starts[missing] + words.sizes[missing]).tolist()
            strings = [raw[s:e].decode("utf-8", "surrogatepass") for s, e in zip(starts, ends, strict=True)]
            rows[missing] = np.fromiter(map(self._rows.__getitem__, strings), dtype=np.int64, count=len(missing))
        else:  # many (e.g. the first batch): one split, every word by string
            strings = joined.split(" ")
            rows = np.fromiter(map(self._rows.__getitem__, strings), dtype=np.int64, count=len(strings))
        self._cache_new_words()
        return rows

    def _by_word(self, texts: Sequence[str]) -> tuple[Spans, np.ndarray]:
        if len(self._rows) > MAX_CACHED_WORDS:
            self._reset_words()
        rows = self._word_rows(texts)
        words_per_text = np.fromiter(map(str.count, texts, itertools.repeat(" ")), dtype=np.int64, count=len(texts))
        text_ends = np.cumsum(words_per_text + 1)
        word_sizes = self._sizes[rows]
        data = gather(self._table, self._starts[rows], word_sizes)
        byte_ends = np.cumsum(word_sizes)[text_ends - 1]
        id_ends = np.cumsum(self._ids[rows])[text_ends - 1]
        return Spans.contiguous(data, np.diff(byte_ends, prepend=0)), np.diff(id_ends, prepend=0)

    def encode(self, texts: Sequence[str]) -> tuple[Spans, np.ndarray]:
        """Each text's packed ids (EOS not included) and how many ids that is."""
        if not len(texts):
            return Spans.from_list([]), np.zeros(0, dtype=np.int64)
        probe = texts[:_REPEAT_PROBE]
        if len(set(probe)) * 2 < len(probe):  # e.g. class labels: encode each distinct text once
            codes: dict[str, int] = {}
            inverse = np.fromiter(map(codes.setdefault, texts, itertools.count()), dtype=np.int64, count=len(texts))
            # setdefault's values are positions of first occurrence; renumber them 0..distinct-1.
            firsts, inverse = np.unique(inverse, return_inverse=True)
            packed, counts = self._encode([texts[i] for i in firsts.tolist()])
            return packed.take(inverse), counts[inverse]
        return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> tuple[Spans, np.ndarray]:
        if not self.use_word_cache:
            return self._whole(texts)
        packed, counts = self._by_word(texts)
        # Every one of the first VERIFY_TEXTS texts is checked, then VERIFY_SAMPLE every VERIFY_INTERVAL
        # texts: a SentencePiece call costs as much as encoding a few thousand texts by word.
        self._unchecked += len(texts)
        if self._checked < VERIFY_TEXTS:
            size = min(len(texts), VERIFY_TEXTS - self._checked)
        elif self._unchecked >= VERIFY_INTERVAL:
            size = min(len(texts), VERIFY_SAMPLE)
        else:
            return packed, counts
        self._checked += size
        self._unchecked = 0
        expected, _ = self._whole(texts[:size])
        if expected.tolist() != packed.take(slice(0, size)).tolist():
            if self.supplied:
                logging.info(
                    "%s does not encode a text as the concatenation of its space-separated words, so datagen "
                    "encodes each text whole: the ids are right, only slower; a vocabulary datagen trains "
                    "itself (no --vocab_from) encodes faster",
                    self.vocab.model_file,
                )
            else:
                logging.vlog(1, "%s: encoding each text whole", self.vocab.model_file)
            self.use_word_cache = False
            return self._whole(texts)
        return packed, counts


def _splits_by_whitespace(vocab: Vocabulary) -> bool:
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(vocab.model_proto)
    return (
        proto.trainer_spec.split_by_whitespace
        and not proto.trainer_spec.treat_whitespace_as_suffix
        and proto.normalizer_spec.remove_extra_whitespaces
    )
