"""The decode engines behind one `batching.PredictFn`, for t2t-decode and t2t-eval.

All three compute the same model from the same checkpoint (batches of ids in, one
result per row out); which one runs is `settings.choose`'s to say:

* `fast`: t2tcli.decode.fast, plain TensorFlow on one CPU or GPU, run in a session of
  its own with batches in flight (also what the SavedModel export runs);
* `mesh`: mesh-tensorflow's decode through the Estimator, for TPUs and meshes of
  several devices;
* `ctranslate2`: t2tcli.decode.ct2, CTranslate2 on the CPU (the optional extra).

Imports: core, interop, model, decode.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from absl import logging

from t2tcli.compat import tf
from t2tcli.decode import batching, ct2, memory_bound, settings
from t2tcli.decode.tf_predict import estimator_for
from t2tcli.model import checkpoints
from t2tcli.model.loading import LoadedModel

tf1 = tf.compat.v1


def predictor(
    model: LoadedModel,
    decode: settings.DecodeSettings | Mapping[str, Any],
    checkpoint_path: str,
    scoring: bool = False,
    read_ahead: bool = True,
) -> batching.PredictFn:
    """The `batching.PredictFn` of the engine `decode` asks for (or auto chooses).

    `read_ahead=False` answers each batch before the next is taken from the input, as
    --decode_interactive needs (a line must not wait for the line after it); else the
    engine keeps batches in flight (`batches_in_flight`).
    """
    decode = settings.DecodeSettings.of(decode, model.hparams)
    engine, why = settings.choose(model, decode, scoring)
    logging.info("decode engine: %s (%s)", engine, why)
    if engine == "ctranslate2":
        if ct2.unsupported_reason(model.hparams, decode) == ct2.PENALTY_DIFFERS:
            logging.warning(
                "engine=ctranslate2: %s; its penalty (score / length ** alpha) is used", ct2.PENALTY_DIFFERS
            )
        quantization = ct2.check_quantization(decode.quantization)
        from t2tcli.interop import hf_t5

        path = ct2.converted(
            checkpoint_path,
            ct2.cache_root(model.model_dir),
            model.hparams,
            model.vocab,
            quantization,
            lambda: hf_t5.mesh_values_from_checkpoint(checkpoint_path, model.hparams, model.vocab.vocab_size),
        )
        return ct2.Predictor(path, model.hparams, model.vocab, decode, quantization, _in_flight(engine, read_ahead))
    if decode.quantization != "float32":
        logging.warning(
            "quantization=%s applies to engine=ctranslate2; %s runs float32 weights", decode.quantization, engine
        )
    estimator = estimator_for(model, decode.replace(engine=engine))
    if engine == "fast":
        return session_predict(estimator, checkpoint_path, _in_flight(engine, read_ahead))
    return estimator_predict(estimator, checkpoint_path)


def batches_in_flight(
    model: LoadedModel, decode: settings.DecodeSettings, scoring: bool = False, read_ahead: bool = True
) -> int:
    """How many batches the engine `decode` resolves to holds in memory at once (`read_ahead`
    as for `predictor`)."""
    return _in_flight(settings.choose(model, decode, scoring)[0], read_ahead)


def _in_flight(engine: str, read_ahead: bool) -> int:
    if not read_ahead:
        return 1
    if engine == "ctranslate2":
        return ct2.batches_in_flight()
    return BATCHES_IN_FLIGHT if engine == "fast" else 1


# Batches a plain-session predictor keeps running at once. Small decoding steps leave
# cores idle, so a second batch fills them, and it computes while this one's rows are
# written.
BATCHES_IN_FLIGHT = 2


def fast_session_config(base: tf1.ConfigProto) -> tf1.ConfigProto:
    """`base` (the Estimator's session config) for the fast engine's own session.

    The graph is written as it should run: Grappler's rewrites lengthen every start and
    made decoding slower, not faster (bench/decode.py), and without them a bfloat16
    decode does not depend on how its batches are fed.
    """
    config = tf1.ConfigProto()
    config.CopyFrom(base)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def session_predict(estimator: Any, checkpoint_path: str, in_flight: int = BATCHES_IN_FLIGHT) -> batching.PredictFn:
    """A `batching.PredictFn` running the model_fn's PREDICT graph in a session of its own,
    `in_flight` batches at a time, rows yielded in batch order.

    Only for the fast engine's graph: plain TensorFlow whose variables restore by name
    and which needs no Estimator hooks.
    Batches are fed as arrays rather than through tf.data, so an error raised while
    reading the input surfaces as itself.
    """

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

        with tf1.Session(graph=graph, config=fast_session_config(estimator.config.session_config)) as session:
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


def estimator_predict(estimator: Any, checkpoint_path: str) -> batching.PredictFn:
    """A `batching.PredictFn` running every batch through ONE Estimator.predict call.

    An error raised while reading the input (e.g. a malformed line) surfaces inside
    TensorFlow as an opaque op failure; it is re-raised here as itself.
    """

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


class Decoder:
    """Decodes and scores lists of ids with a checkpoint (`evaluation.DecodesAndScores`) on
    the engine t2t-decode would choose: one predict call per request."""

    def __init__(
        self, model: LoadedModel, decode: settings.DecodeSettings | Mapping[str, Any], batch_size: int | None = None
    ) -> None:
        # decode() returns ids only; score() feeds targets, which always yields scores.
        self.model = model
        self.decode_settings = settings.DecodeSettings.of(decode, model.hparams).replace(compute_scores=False)
        self.batch_size = batch_size or self.decode_settings.batch_size
        self.inputs_length = int(model.hparams.inputs_length)
        self.targets_length = self.decode_settings.targets_length(model.hparams)
        self.batch_multiple = settings.batch_split(model.config)

    def decode(self, checkpoint_path: str, inputs: list[list[int]]) -> list[list[int]]:
        rows = [batching.Row(i, ids) for i, ids in enumerate(inputs)]
        batch = min(self.batch_size, max(1, len(rows)))
        in_flight = batches_in_flight(self.model, self.decode_settings)
        memory_bound.check(self.decode_settings, self.model.hparams, batch, self.inputs_length, in_flight=in_flight)
        predict = predictor(self.model, self.decode_settings, checkpoint_path)
        results = batching.predict_rows(
            rows, predict, self.batch_size, self.inputs_length, batch_multiple=self.batch_multiple
        )
        return [[int(i) for i in r["outputs"]] for r in results]

    def score(self, checkpoint_path: str, inputs: list[list[int]], targets: list[list[int]]) -> list[float]:
        rows = [batching.Row(i, x, y) for i, (x, y) in enumerate(zip(inputs, targets, strict=True))]
        predict = predictor(self.model, self.decode_settings, checkpoint_path, scoring=True)
        length = max([self.targets_length, *(len(y) for y in targets)])
        results = batching.predict_rows(
            rows, predict, self.batch_size, self.inputs_length, length, batch_multiple=self.batch_multiple
        )
        return [float(r["scores"]) for r in results]
