"""SentencePiece vocabularies with T5's id layout (pad=0, eos=1, unk=2).

Keeping T5's layout means a vocabulary trained here and T5's released
`sentencepiece.model` are interchangeable as far as the model is concerned.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence

import sentencepiece as spm

from t2tcli.errors import UserError

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2


class Vocabulary:
    """A loaded SentencePiece model; ids follow T5 (pad=0, eos=1, unk=2)."""

    def __init__(self, model_file: str) -> None:
        if not os.path.exists(model_file):
            raise UserError(f"vocabulary {model_file} not found")
        self.model_file = model_file
        with open(model_file, "rb") as f:
            self.model_proto = f.read()
        self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        if (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id()) != (PAD_ID, EOS_ID, UNK_ID):
            raise UserError(
                f"vocabulary {model_file} has pad/eos/unk ids "
                f"{self._sp.pad_id()}/{self._sp.eos_id()}/{self._sp.unk_id()}, expected 0/1/2"
            )

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

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


def train_vocabulary(
    sentences: Iterable[str],
    model_file: str,
    vocab_size: int,
    model_type: str = "unigram",
    user_defined_symbols: Sequence[str] = (),
    character_coverage: float = 1.0,
) -> None:
    """Trains a SentencePiece model and writes `model_file` (+ `.vocab`) atomically."""
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
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as exc:
        raise UserError(f"training vocabulary {model_file}: {exc}") from None
    proto = model.getvalue()
    tmp = model_file + ".tmp"
    with open(tmp, "wb") as f:
        f.write(proto)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    with open(model_file.removesuffix(".model") + ".vocab.tmp", "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n")
    os.replace(model_file.removesuffix(".model") + ".vocab.tmp", model_file.removesuffix(".model") + ".vocab")
    os.replace(tmp, model_file)
