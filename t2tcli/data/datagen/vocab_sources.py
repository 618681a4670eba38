"""Where a problem's vocabulary comes from: a SentencePiece model (local or gs://), a Hugging
Face directory, or training on datagen's sample; and how that is described in meta.json,
so a change of source remakes it.

Both runners decide and make the vocabulary through here. Imports: core, io and data
(options, problem, stats, vocabulary.hf_vocab and vocabulary.vocab).
"""

from __future__ import annotations

import dataclasses

from absl import logging

from t2tcli.data.datagen.options import Options
from t2tcli.data.datagen.stats import VocabSample
from t2tcli.data.problem import Problem
from t2tcli.data.vocabulary import hf_vocab
from t2tcli.data.vocabulary.vocab import check_layout, trained_model, with_sentinels, write_model
from t2tcli.errors import UserError
from t2tcli.io import fs


def vocabulary_source(problem: Problem, override: str | None = None, extra_ids: int | None = None) -> bytes | None:
    """The SentencePiece model the problem's vocabulary is copied from, as it will be
    written (sentinels included); None when it is trained on the data.

    `override` (t2t-datagen --vocab_from) replaces the problem's own source: a
    SentencePiece model file, or a Hugging Face model directory (its spiece.model and
    sentinels), so a problem can be generated for a pretrained model without editing it.
    `extra_ids` (--vocab_extra_ids) is how many T5 sentinels a model file gets: T5's
    released sentencepiece.model has none, its checkpoints' 32,128 rows need 100.
    A path may be remote (e.g. T5's gs://t5-data/vocabs/...): it is read through `t2tcli.io.fs`.
    """
    spec = problem.vocab
    if extra_ids is not None:
        spec = dataclasses.replace(spec, extra_ids=extra_ids)
    path = override or spec.source
    if path is None:
        return None
    what = "--vocab_from" if override else f"the vocabulary of problem '{problem.name}'"
    if not fs.exists(path):
        raise UserError(f"{path} ({what}) not found")
    if hf_vocab.is_model_dir(path):
        proto = hf_vocab.vocabulary_proto(path)
    elif fs.isdir(path):
        raise UserError(
            f"{path} ({what}): a directory without {hf_vocab.CONFIG}; "
            "expected a SentencePiece .model file or a Hugging Face model directory"
        )
    else:
        proto = with_sentinels(fs.read_bytes(path), spec.extra_ids)
    check_layout(proto, path)
    return proto


def vocab_description(problem: Problem, options: Options) -> str:
    """What the vocabulary is made from, recorded in meta.json: a change remakes it."""
    extra = f" with {options.vocab_extra_ids} extra ids" if options.vocab_extra_ids is not None else ""
    return repr(problem.vocab) + (f" from {options.vocab_from}" if options.vocab_from else "") + extra


def differs(vocab_file: str, proto: bytes | None) -> bool:
    """Whether an existing vocabulary file is not the one a source would write."""
    if proto is None or not fs.exists(vocab_file):
        return False
    return fs.read_bytes(vocab_file) != proto


def make_vocabulary(problem: Problem, vocab_file: str, source: bytes | None, sample: VocabSample | None) -> None:
    """Writes the problem's vocabulary: `source` as it is, or one trained on `sample`."""
    if source is None:
        assert sample is not None
        source = trained_vocabulary(problem, sample, vocab_file)
    write_model(source, vocab_file)


def trained_vocabulary(problem: Problem, sample: VocabSample, vocab_file: str) -> bytes:
    """The SentencePiece model (sentinels included) trained on `sample` for `vocab_file`."""
    spec = problem.vocab
    sentences = sample.sentences()
    logging.info(
        "training vocabulary %s on %d distinct texts (train inputs and targets, duplicates and blanks left out)",
        vocab_file,
        len(sentences),
    )
    return trained_model(
        sentences,
        vocab_file,
        vocab_size=spec.size,
        model_type=spec.model_type,
        user_defined_symbols=spec.user_defined_symbols,
        character_coverage=spec.character_coverage,
        sentinels=spec.extra_ids,
        keep_whitespace=spec.keep_whitespace,
    )
