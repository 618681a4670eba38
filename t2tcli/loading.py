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

from t2tcli import checkpoints, registry, run_info
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.problem import Problem
from t2tcli.vocab import Vocabulary


@dataclasses.dataclass
class LoadedModel:
    model_dir: str
    info: run_info.RunInfo
    hparams: HParams
    problem: Problem | None  # None: a pretrained model written by t2t-train --train_steps=0 without a problem
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
    name = problem or info.problem
    return LoadedModel(model_dir, info, hp, registry.problem(name) if name else None, Vocabulary(vocab_path))


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


# Batches a plain-session predictor keeps running at once. Small decoding steps leave
# cores idle (on 2 cores one batch ran ~1.5x slower than two side by side), and the
# next batch computes while this one's rows are written.
BATCHES_IN_FLIGHT = 2


def predictor(model: LoadedModel, estimator: Any, checkpoint_path: str):
    """The fastest `decoding.PredictFn` for `estimator` (built by build_estimator)."""
    from t2tcli import model as modellib

    if modellib.predicts_in_plain_session(model.hparams, estimator.params):
        return session_predict(estimator, checkpoint_path)
    return estimator_predict(estimator, checkpoint_path)


def session_predict(estimator: Any, checkpoint_path: str, in_flight: int = BATCHES_IN_FLIGHT):
    """A `decoding.PredictFn` running the model_fn's PREDICT graph in a session of its own,
    `in_flight` batches at a time, rows yielded in batch order.

    Only for graphs that need no Estimator hooks (see model.predicts_in_plain_session).
    Batches are fed as arrays rather than through tf.data, so an error raised while
    reading the input surfaces as itself.
    """
    import collections
    from concurrent.futures import ThreadPoolExecutor

    from t2tcli.compat import tf

    tf1 = tf.compat.v1

    def predict(batches, shapes: dict[str, tuple[int, int]]) -> Iterator[dict[str, Any]]:
        graph = tf.Graph()
        with graph.as_default():
            features = {k: tf1.placeholder(tf.int32, shape, name=k) for k, shape in shapes.items()}
            spec = estimator.model_fn(features, None, tf.estimator.ModeKeys.PREDICT, estimator.config)
            saver = tf1.train.Saver()
        graph.finalize()

        def rows(results: dict[str, Any]) -> Iterator[dict[str, Any]]:
            for i in range(len(next(iter(results.values())))):
                yield {k: v[i] for k, v in results.items()}

        config = tf1.ConfigProto()
        config.CopyFrom(estimator.config.session_config)
        # The graph is written as it should run. Grappler's rewrites cost ~0.3 s per
        # start and made decoding slower, not faster (bench/decode.py, 2 CPUs); without
        # them a bfloat16 decode does not depend on how its batches are fed.
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        with tf1.Session(graph=graph, config=config) as session:
            with checkpoints.readable(checkpoint_path):
                saver.restore(session, checkpoint_path)
            with ThreadPoolExecutor(in_flight) as pool:
                running: collections.deque = collections.deque()
                for batch in batches():
                    feed = {features[k]: v for k, v in batch.items()}
                    running.append(pool.submit(session.run, spec.predictions, feed))
                    if len(running) == in_flight:
                        yield from rows(running.popleft().result())
                while running:
                    yield from rows(running.popleft().result())

    return predict


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
            with checkpoints.readable(checkpoint_path):
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
        self.model = model
        self.estimator = build_estimator(model, {**decode, "compute_scores": False})
        self.batch_size = batch_size
        self.inputs_length = int(model.hparams.inputs_length)
        self.targets_length = int(decode.get("max_decode_length") or model.hparams.targets_length)

    def decode(self, checkpoint_path: str, inputs: list[list[int]]) -> list[list[int]]:
        from t2tcli import decoding

        rows = [decoding.Row(i, ids) for i, ids in enumerate(inputs)]
        predict = predictor(self.model, self.estimator, checkpoint_path)
        results = decoding.predict_rows(rows, predict, self.batch_size, self.inputs_length)
        return [[int(i) for i in r["outputs"]] for r in results]

    def score(self, checkpoint_path: str, inputs: list[list[int]], targets: list[list[int]]) -> list[float]:
        from t2tcli import decoding

        rows = [decoding.Row(i, x, y) for i, (x, y) in enumerate(zip(inputs, targets, strict=True))]
        predict = predictor(self.model, self.estimator, checkpoint_path)
        length = max([self.targets_length, *(len(y) for y in targets)])
        results = decoding.predict_rows(rows, predict, self.batch_size, self.inputs_length, length)
        return [float(r["scores"]) for r in results]
