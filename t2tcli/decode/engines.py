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

import dataclasses
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from absl import logging

from t2tcli.compat import tf
from t2tcli.decode import batching, ct2, memory_bound, settings, side_by_side
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
        # Scoring applies no length penalty, so CTranslate2's differing one is no matter there.
        if not scoring and ct2.unsupported_reason(model.hparams, decode) == ct2.PENALTY_DIFFERS:
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
        in_flight = _in_flight(engine, read_ahead, model)
        return ct2.Predictor(path, model.hparams, model.vocab, decode, quantization, in_flight)
    if decode.quantization != "float32":
        logging.warning(
            "quantization=%s applies to engine=ctranslate2; %s runs float32 weights", decode.quantization, engine
        )
    estimator = estimator_for(model, decode.replace(engine=engine))
    if engine == "fast":
        workers = side_by_side.workers() if _on_cpu(model) else 1
        return session_predict(estimator, checkpoint_path, _in_flight(engine, read_ahead, model), workers)
    return estimator_predict(estimator, checkpoint_path)


def batches_in_flight(
    model: LoadedModel, decode: settings.DecodeSettings, scoring: bool = False, read_ahead: bool = True
) -> int:
    """How many batches the engine `decode` resolves to holds in memory at once (`read_ahead`
    as for `predictor`)."""
    return _in_flight(settings.choose(model, decode, scoring)[0], read_ahead, model)


def _on_cpu(model: LoadedModel) -> bool:
    return model.config.machine.device == "cpu"


def _in_flight(engine: str, read_ahead: bool, model: LoadedModel) -> int:
    if not read_ahead:
        return 1
    if engine == "ctranslate2":
        return ct2.batches_in_flight()
    if engine == "fast":
        return max(BATCHES_IN_FLIGHT, side_by_side.workers()) if _on_cpu(model) else BATCHES_IN_FLIGHT
    return 1


# Batches a plain-session predictor keeps running at least. Small decoding steps leave
# cores idle, so a second batch fills them, and it computes while this one's rows are
# written.
BATCHES_IN_FLIGHT = 2
# Per-row counts of the fast engine's decode loop (tf_predict), the same in every row of a batch.
_LOOP_COUNTS = ("decode_steps", "decode_row_steps", "decode_loop_rows")


def fast_session_config(base: tf1.ConfigProto, workers: int = 1) -> tf1.ConfigProto:
    """`base` (the Estimator's session config) for the fast engine's own session; with
    `workers` > 1, each batch runs on one thread, `workers` batches side by side
    (t2tcli.decode.side_by_side), as on a CPU they get through more lines.

    The graph is written as it should run: Grappler's rewrites lengthen every start and
    made decoding slower, not faster (bench/decode.py), and without them a bfloat16
    decode does not depend on how its batches are fed.
    """
    config = tf1.ConfigProto()
    config.CopyFrom(base)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    if workers > 1:
        # The session's own intra-op pool (t2tcli.compat lets each session size one); the
        # inter-op pool, a thread per core, is the process's.
        config.intra_op_parallelism_threads = 1
    return config


def session_predict(
    estimator: Any, checkpoint_path: str, in_flight: int = BATCHES_IN_FLIGHT, workers: int = 1
) -> batching.PredictFn:
    """A `batching.PredictFn` running the model_fn's PREDICT graph in a session of its own,
    `in_flight` batches at a time, rows yielded in batch order.

    With `workers` > 1, a batch runs on one thread. The input's last batch is fed in parts
    over the workers the batches before it leave idle, and every batch is when `in_flight`
    is 1 (t2tcli.decode.side_by_side). The graph takes batches of any number of rows, so a
    batch's padding rows are not fed at all. Batches of one line keep every thread.
    Only for the fast engine's graph: plain TensorFlow whose variables restore by name
    and which needs no Estimator hooks.
    Batches are fed as arrays rather than through tf.data, so an error raised while
    reading the input surfaces as itself.
    """

    def predict(batches, shapes: dict[str, tuple[int, int]]) -> Iterator[dict[str, Any]]:
        rows = next(iter(shapes.values()))[0]
        # Batches side by side, and a lone batch's parts. A batch of one line has no parts:
        # it keeps every thread instead, as an interactive decode's lines do.
        parts = min(workers, rows)
        graph = tf.Graph()
        with graph.as_default():
            features = {k: tf1.placeholder(tf.int32, [None, length], name=k) for k, (_, length) in shapes.items()}
            spec = estimator.model_fn(features, None, tf.estimator.ModeKeys.PREDICT, estimator.config)
            saver = tf1.train.Saver()
            # The weights the engine prepares once (fast_weights.Weights' `held`), from the
            # restored variables.
            prepare = tf1.local_variables_initializer()
        graph.finalize()

        with tf1.Session(graph=graph, config=fast_session_config(estimator.config.session_config, parts)) as session:
            with checkpoints.readable(checkpoint_path):
                saver.restore(session, checkpoint_path)
            session.run(prepare)

            def run(batch: dict[str, np.ndarray]) -> Future:
                return pool.submit(session.run, spec.predictions, {features[k]: v for k, v in batch.items()})

            def submit(batch: dict[str, np.ndarray], into: int) -> _Fed:
                # Only the rows that hold a line are fed (the graph takes any number): a
                # padding row would cost as much as a real one. A batch of no line (every
                # input with no tokens) feeds its first row alone, for the results' shapes,
                # and all its rows get zeros, as such an input does beside lines.
                real = batching.real_rows(batch)
                rows = real if len(real) else slice(0, 1)
                fed = {k: v[rows] for k, v in batch.items()} if len(real) < len(batch["inputs"]) else batch
                part = side_by_side.part_rows(len(fed["inputs"]), into)
                return _Fed(len(batch["inputs"]), real, [run(p) for p in _split(fed, part)])

            def finish(running: _Fed) -> Iterator[dict[str, Any]]:
                yield from running.rows([r.result() for r in running.results])

            with ThreadPoolExecutor(in_flight + parts) as pool:
                yield from side_by_side.run(batches(), submit, finish, in_flight, parts)

    return predict


@dataclasses.dataclass
class _Fed:
    """A batch in the session: its rows, those that were fed (`real`), and the runs of its parts."""

    size: int
    real: np.ndarray
    results: list[Future]

    def rows(self, results: list[dict[str, np.ndarray]]) -> Iterator[dict[str, Any]]:
        """One result per row of the batch, its padding rows' zeros; every row carries the
        loop counts of the whole batch."""
        counts = _joined_counts(results)
        values = {k: np.concatenate([r[k] for r in results]) for k in results[0] if k not in counts}
        if len(self.real) < self.size:
            values = {k: _scattered(v[: len(self.real)], self.real, self.size) for k, v in values.items()}
        for i in range(self.size):
            yield {**{k: v[i] for k, v in values.items()}, **counts}


def _scattered(values: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """`values` placed at rows `at` of `size` rows of zeros."""
    out = np.zeros((size, *values.shape[1:]), values.dtype)
    out[at] = values
    return out


def _split(batch: dict[str, np.ndarray], part: int) -> Iterator[dict[str, np.ndarray]]:
    """`batch` in parts of `part` rows (the last may hold fewer)."""
    rows = len(next(iter(batch.values())))
    for start in range(0, rows, part):
        yield {k: v[start : start + part] for k, v in batch.items()}


def _joined_counts(results: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """The decode loop's counts of a batch run in parts, as if it had run whole: the steps
    of its longest part, the rows of all of them."""
    if _LOOP_COUNTS[0] not in results[0]:
        return {}
    steps, row_steps, loop_rows = ([r[k][0] for r in results] for k in _LOOP_COUNTS)
    return dict(zip(_LOOP_COUNTS, (max(steps), sum(row_steps), sum(loop_rows)), strict=True))


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
