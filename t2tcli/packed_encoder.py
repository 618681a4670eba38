"""Text -> varint-packed SentencePiece ids, fast, by encoding each distinct word once.

A SentencePiece model that splits by whitespace (the default, and T5's) segments
every space-separated word on its own, so a text's ids are the concatenation of its
words' ids. Real text repeats words (Zipf), so caching each word's packed ids turns
a per-row C++ encode into a few dict lookups. The first batch is checked against a
plain encode of the whole texts; on any difference (another kind of model), the
cache is switched off and every text is encoded whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from absl import logging

from t2tcli.vocab import Vocabulary

VERIFY_TEXTS = 2000
MAX_CACHED_WORDS = 2_000_000


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


class PackedTextEncoder:
    """Encodes batches of texts to (packed varint id bytes, id counts)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.table = [varint(i) for i in range(max(vocab.vocab_size, 1 << 14))]
        self._words: dict[str, bytes] = {}
        self._verified = False
        self.use_word_cache = _splits_by_whitespace(vocab)

    def _pack(self, ids: Sequence[int]) -> bytes:
        table = self.table
        return b"".join([table[i] for i in ids])

    def _whole(self, texts: Sequence[str]) -> tuple[list[bytes], np.ndarray]:
        ids = self.vocab.encode_batch(texts)
        return [self._pack(x) for x in ids], np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))

    def _by_word(self, texts: Sequence[str]) -> tuple[list[bytes], np.ndarray]:
        words = self._words
        if len(words) > MAX_CACHED_WORDS:
            words.clear()
        new = set(" ".join(texts).split(" ")).difference(words)
        if new:
            new_words = sorted(new)
            for word, ids in zip(new_words, self.vocab.encode_batch(new_words), strict=True):
                words[word] = self._pack(ids)
        get = words.__getitem__
        join = b"".join
        packed = [join(map(get, text.split(" "))) for text in texts]
        return packed, id_counts(packed)

    def encode(self, texts: Sequence[str]) -> tuple[list[bytes], np.ndarray]:
        distinct = dict.fromkeys(texts)
        if len(distinct) * 2 < len(texts):  # e.g. class labels: encode each once
            packed_distinct, _ = self._encode(list(distinct))
            lookup = dict(zip(distinct, packed_distinct, strict=True))
            packed = list(map(lookup.__getitem__, texts))
            return packed, id_counts(packed)
        return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> tuple[list[bytes], np.ndarray]:
        if not self.use_word_cache:
            return self._whole(texts)
        packed, counts = self._by_word(texts)
        # A large check on the first batch, a small one on every later batch.
        sample = list(texts[: 64 if self._verified else VERIFY_TEXTS])
        if sample:
            if self._whole(sample)[0] != packed[: len(sample)]:
                logging.info("%s: word-by-word encoding differs; encoding whole texts", self.vocab.model_file)
                self.use_word_cache = False
                return self._whole(texts)
            self._verified = True
        return packed, counts


def id_counts(packed: Sequence[bytes]) -> np.ndarray:
    """Ids per packed string: the count of bytes that end a varint (high bit clear)."""
    if not packed:
        return np.zeros(0, dtype=np.int64)
    data = np.frombuffer(b"".join(packed), dtype=np.uint8)
    ends = np.cumsum(np.fromiter(map(len, packed), dtype=np.int64, count=len(packed)))
    done = np.concatenate(([0], np.cumsum(data < 0x80)))
    return done[ends] - done[np.concatenate(([0], ends[:-1]))]


def _splits_by_whitespace(vocab: Vocabulary) -> bool:
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(vocab.model_proto)
    return (
        proto.trainer_spec.split_by_whitespace
        and not proto.trainer_spec.treat_whitespace_as_suffix
        and proto.normalizer_spec.remove_extra_whitespaces
    )
