"""SentencePiece vocabularies with T5's id layout (pad=0, eos=1, unk=2).

Keeping T5's layout means a vocabulary trained here and T5's released
`sentencepiece.model` are interchangeable as far as the model is concerned.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

import sentencepiece as spm

from t2tcli.errors import UserError

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
# T5's sentinels: <extra_id_0> ... <extra_id_{N-1}> take the last N ids, <extra_id_0> the
# very last. They live in the SentencePiece model itself as user-defined pieces, with
# the word-start mark, so "a <extra_id_0> b" encodes to the ids T5's and Hugging Face's
# tokenizers give it and decodes back to the same text.
SENTINEL = "\u2581<extra_id_{}>"
# SentencePiece training threads, the same on every machine (see trained_model).
TRAINING_THREADS = 16
# What a vocabulary that keeps whitespace holds as symbols of their own.
WHITESPACE_SYMBOLS = ("\n", "\t")


class Vocabulary:
    """A loaded SentencePiece model; ids follow T5 (pad=0, eos=1, unk=2)."""

    def __init__(self, model_file: str) -> None:
        from t2tcli.io import fs

        if not fs.exists(model_file):
            raise UserError(f"vocabulary {model_file} not found")
        self.model_file = model_file
        self.model_proto = fs.read_bytes(model_file)
        self._sp = check_layout(self.model_proto, model_file)
        self._longest_piece: int | None = None

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def chars_for(self, tokens: int) -> int:
        """Characters enough to give at least `tokens` tokens: no piece covers more characters
        than the longest one has (a margin keeps the last kept tokens clear of the cut)."""
        if self._longest_piece is None:
            self._longest_piece = max(len(self._sp.id_to_piece(i)) for i in range(self._sp.get_piece_size()))
        return (tokens + 8) * max(1, self._longest_piece)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._sp.encode(list(texts))

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text, stopping at the first EOS and ignoring padding."""
        out: list[int] = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i != PAD_ID:
                out.append(i)
        return self._sp.decode(out)


def check_layout(model_proto: bytes, origin: str) -> spm.SentencePieceProcessor:
    """The loaded model, or a one-line error when it is not a SentencePiece model with T5's ids."""
    try:
        sp = spm.SentencePieceProcessor(model_proto=model_proto)
    except RuntimeError:
        raise UserError(f"{origin}: not a SentencePiece model") from None
    if (sp.pad_id(), sp.eos_id(), sp.unk_id()) != (PAD_ID, EOS_ID, UNK_ID):
        raise UserError(
            f"vocabulary {origin} has pad/eos/unk ids {sp.pad_id()}/{sp.eos_id()}/{sp.unk_id()}, expected 0/1/2"
        )
    return sp


def sentinel_count(model_proto: bytes) -> int:
    """How many T5 sentinels end this SentencePiece model (0 for a model without them)."""
    from sentencepiece import sentencepiece_model_pb2

    pieces = sentencepiece_model_pb2.ModelProto.FromString(model_proto).pieces
    count = 0
    while count < len(pieces) and pieces[len(pieces) - 1 - count].piece == SENTINEL.format(count):
        count += 1
    return count


def with_sentinels(model_proto: bytes, count: int) -> bytes:
    """The SentencePiece model with T5's `count` sentinels appended (none if it has them)."""
    from sentencepiece import sentencepiece_model_pb2

    if count <= 0 or sentinel_count(model_proto):
        return model_proto
    model = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
    for i in reversed(range(count)):
        model.pieces.add(
            piece=SENTINEL.format(i), score=0.0, type=sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
        )
    return model.SerializeToString()


def without_sentinels(model_proto: bytes) -> tuple[bytes, int]:
    """(the SentencePiece model without its trailing T5 sentinels, how many there were):
    what a Hugging Face T5 directory holds as spiece.model, with extra_ids beside it."""
    from sentencepiece import sentencepiece_model_pb2

    count = sentinel_count(model_proto)
    if not count:
        return model_proto, 0
    model = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
    del model.pieces[len(model.pieces) - count :]
    return model.SerializeToString(), count


def model_files(model_proto: bytes, model_file: str) -> dict[str, bytes]:
    """The files a SentencePiece model is kept as: its readable `.vocab` listing, then the model."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    listing = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n" for i in range(sp.get_piece_size()))
    return {model_file.removesuffix(".model") + ".vocab": listing.encode("utf-8"), model_file: model_proto}


def write_model(model_proto: bytes, model_file: str) -> None:
    """Writes a SentencePiece model and its readable `.vocab` listing, each complete or absent."""
    from t2tcli.io import atomic

    atomic.write_files(model_files(model_proto, model_file))


def train_vocabulary(sentences: Iterable[str], model_file: str, vocab_size: int, **settings: Any) -> None:
    """Trains a SentencePiece model and writes `model_file` (+ `.vocab`) atomically;
    `settings` as `trained_model`'s."""
    write_model(trained_model(sentences, model_file, vocab_size, **settings), model_file)


def trained_model(
    sentences: Iterable[str],
    model_file: str,
    vocab_size: int,
    model_type: str = "unigram",
    user_defined_symbols: Sequence[str] = (),
    character_coverage: float = 1.0,
    sentinels: int = 0,
    keep_whitespace: bool = False,
) -> bytes:
    """A SentencePiece model (+ `sentinels` T5 sentinels) trained on `sentences`, as the
    bytes `model_file` will hold (`model_file` names it in errors).

    By default text is normalised as T5's vocabulary does (NFKC; newlines and tabs become
    spaces, runs of spaces one space). `keep_whitespace` keeps newlines, tabs and runs of
    spaces, as tokens, for tasks where layout carries meaning (code, verse, ASCII art).
    """
    whitespace: dict[str, object] = {}
    if keep_whitespace:
        user_defined_symbols = (
            *user_defined_symbols,
            *(c for c in WHITESPACE_SYMBOLS if c not in user_defined_symbols),
        )
        whitespace = {"normalization_rule_name": "nfkc", "remove_extra_whitespaces": False}
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            user_defined_symbols=list(user_defined_symbols),
            character_coverage=character_coverage,
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            bos_id=-1,
            hard_vocab_limit=False,
            # A fixed count: the pieces SentencePiece learns depend on how many threads share
            # the work, so a machine-dependent count would give other vocabularies elsewhere.
            num_threads=TRAINING_THREADS,
            minloglevel=2,
            **whitespace,
        )
    except RuntimeError as exc:
        raise UserError(f"training vocabulary {model_file}: {exc}") from None
    return with_sentinels(model.getvalue(), sentinels)
