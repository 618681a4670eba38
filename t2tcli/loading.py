"""Everything eval, decode and export need from a model_dir, with flag overrides.

t2t-train records the problem, hparams, user code and vocabulary in model_dir, so
users never repeat training flags; `--problem`, `--hparams` and `--usr_dir` still
override what was recorded.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from absl import logging

from t2tcli import registry, run_info
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.problem import Problem
from t2tcli.vocab import Vocabulary


@dataclasses.dataclass
class LoadedModel:
    model_dir: str
    info: run_info.RunInfo
    hparams: HParams
    problem: Problem
    vocab: Vocabulary


def load(model_dir: str, problem: str | None = None, hparams: str = "") -> LoadedModel:
    """Reads model_dir's run description; `problem` / `hparams` override it."""
    if not model_dir:
        raise UserError("--model_dir is required")
    if not os.path.isdir(model_dir):
        raise UserError(f"--model_dir={model_dir}: no such directory")
    info, hp, vocab_path = run_info.load(model_dir)
    if info.usr_dir:
        # t2t-train records several --usr_dir comma-separated.
        for usr_dir in filter(None, info.usr_dir.split(",")):
            if os.path.exists(usr_dir):
                registry.import_usr_dir(usr_dir)
            else:
                logging.warning("usr_dir %s recorded by training no longer exists; pass --usr_dir", usr_dir)
    hp.parse(hparams)
    return LoadedModel(model_dir, info, hp, registry.problem(problem or info.problem), Vocabulary(vocab_path))


def text_decoder(vocab: Vocabulary):
    """ids -> text, dropping ids past the SentencePiece vocabulary.

    The model's vocabulary is padded up to a multiple of `vocab_divisor`; a model that
    is barely trained can emit those padding ids, which mean nothing (T5 drops them too).
    """
    size = vocab.vocab_size

    def decode(ids: list[int]) -> str:
        return vocab.decode([i for i in ids if i < size])

    return decode


def build_estimator(model: LoadedModel, decode: dict[str, Any] | None = None) -> Any:
    """The training run's Estimator, with decode settings baked into its params."""
    from t2tcli import model as modellib

    return modellib.build_estimator(
        model.model_dir, model.hparams, model.vocab.vocab_size, params={"decode": dict(decode or {})}
    )


def estimator_predict(estimator: Any, checkpoint_path: str):
    """A `decoding.PredictFn` running every batch through ONE Estimator.predict call.

    An error raised while reading the input (e.g. a malformed line) surfaces inside
    TensorFlow as an opaque op failure; it is re-raised here as itself.
    """
    from t2tcli.compat import tf

    def predict(batches, shapes: dict[str, tuple[int, int]]) -> Iterator[dict[str, Any]]:
        errors: list[BaseException] = []

        def guarded():
            try:
                yield from batches()
            except BaseException as exc:
                errors.append(exc)
                raise

        def input_fn(params: Any = None) -> Any:
            signature = {k: tf.TensorSpec(shape, tf.int32) for k, shape in shapes.items()}
            return tf.data.Dataset.from_generator(guarded, output_signature=signature)

        try:
            yield from estimator.predict(input_fn, checkpoint_path=checkpoint_path, yield_single_examples=True)
        except Exception:
            if errors:
                raise errors[0] from None
            raise

    return predict


class EstimatorBackend:
    """`evaluation.Backend` on the training run's Estimator: one predict call per request."""

    def __init__(self, model: LoadedModel, decode: dict[str, Any], batch_size: int) -> None:
        # decode() returns ids only; score() feeds targets, which always yields scores.
        self.estimator = build_estimator(model, {**decode, "compute_scores": False})
        self.batch_size = batch_size
        self.inputs_length = int(model.hparams.inputs_length)
        self.targets_length = int(decode.get("max_decode_length") or model.hparams.targets_length)

    def decode(self, checkpoint_path: str, inputs: list[list[int]]) -> list[list[int]]:
        from t2tcli import decoding

        rows = [decoding.Row(i, ids) for i, ids in enumerate(inputs)]
        predict = estimator_predict(self.estimator, checkpoint_path)
        results = decoding.predict_rows(rows, predict, self.batch_size, self.inputs_length)
        return [[int(i) for i in r["outputs"]] for r in results]

    def score(self, checkpoint_path: str, inputs: list[list[int]], targets: list[list[int]]) -> list[float]:
        from t2tcli import decoding

        rows = [decoding.Row(i, x, y) for i, (x, y) in enumerate(zip(inputs, targets, strict=True))]
        predict = estimator_predict(self.estimator, checkpoint_path)
        length = max([self.targets_length, *(len(y) for y in targets)])
        results = decoding.predict_rows(rows, predict, self.batch_size, self.inputs_length, length)
        return [float(r["scores"]) for r in results]
