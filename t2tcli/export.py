"""SavedModel export: a serving signature from strings to decoded strings.

Serving systems hand a model raw text, so tokenization and detokenization run inside
the graph (TensorFlow Text's SentencePiece ops, with the vocabulary embedded as a
constant) and the decode settings are baked into the model_fn's params. Mesh
TensorFlow needs a static batch size, so the signature pads each request up to the
exported batch size and returns only the rows it was given; a larger request is
rejected with an error naming the limit.

Loading the SavedModel needs `import tensorflow_text` (it registers the ops).
"""

from __future__ import annotations

import json
import os
from typing import Any

from absl import logging

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.loading import LoadedModel, build_estimator
from t2tcli.vocab import EOS_ID

tf1 = tf.compat.v1
SIGNATURE_INPUT = "inputs"
INFO_FILE = "t2t_export.json"
_COUNT_KEY = "serving_num_inputs"


def _tokenizer(proto: bytes) -> Any:
    try:
        import tensorflow_text as tf_text
    except ImportError:
        raise UserError("t2t-export needs tensorflow-text (pip install tensorflow-text==2.15.0)") from None
    return tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)


def serving_input_fn(proto: bytes, batch_size: int, inputs_length: int) -> Any:
    """Strings [n] -> `inputs` int32 [batch_size, inputs_length] (+ n), tokenized in-graph."""

    def fn() -> Any:
        text = tf1.placeholder(tf.string, [None], name=SIGNATURE_INPUT)
        n = tf.shape(text)[0]
        check = tf.debugging.assert_less_equal(
            n, batch_size, message=f"this model was exported to decode at most {batch_size} strings per request"
        )
        with tf.control_dependencies([check]):
            ids = _tokenizer(proto).tokenize(text)[:, : inputs_length - 1]
            eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], EOS_ID))
            dense = tf.concat([ids, eos], axis=1).to_tensor(default_value=0, shape=[None, inputs_length])
            # Rows past the request are a lone EOS, an input the model has seen in training.
            pad_rows = tf.one_hot(tf.zeros([batch_size - n], tf.int32), inputs_length, dtype=tf.int32) * EOS_ID
            batch = tf.reshape(tf.concat([dense, pad_rows], axis=0), [batch_size, inputs_length])
        return tf.estimator.export.ServingInputReceiver({"inputs": batch, _COUNT_KEY: n}, {SIGNATURE_INPUT: text})

    return fn


def serving_model_fn(model_fn: Any, proto: bytes, vocab_size: int) -> Any:
    """Wraps the training model_fn: ids out of PREDICT become strings in the signature."""

    def fn(features: dict[str, tf.Tensor], labels: Any, mode: str, params: dict[str, Any]) -> Any:
        n = features.pop(_COUNT_KEY)
        spec = model_fn(features, labels, mode, params)
        ids = spec.predictions["outputs"][:n]
        keep = tf.logical_and(tf.greater(ids, EOS_ID), tf.less(ids, vocab_size))
        text = _tokenizer(proto).detokenize(tf.ragged.boolean_mask(ids, keep))
        outputs = {"outputs": text, "scores": spec.predictions["scores"][:n]}
        return tf.estimator.EstimatorSpec(
            mode=mode,
            predictions=outputs,
            export_outputs={"serving_default": tf.estimator.export.PredictOutput(outputs)},
            scaffold=spec.scaffold,
        )

    return fn


def export(model: LoadedModel, export_dir: str, checkpoint_path: str, decode: dict[str, Any], batch_size: int) -> str:
    """Writes a SavedModel under export_dir/<timestamp> (TF Serving's version layout)."""
    inner = build_estimator(model, decode)
    proto = model.vocab.model_proto
    estimator = tf.estimator.Estimator(
        model_fn=serving_model_fn(inner.model_fn, proto, model.vocab.vocab_size),
        model_dir=model.model_dir,
        config=inner.config,
        params=inner.params,
    )
    inputs_length = int(model.hparams.inputs_length)
    os.makedirs(export_dir, exist_ok=True)
    path = estimator.export_saved_model(
        export_dir, serving_input_fn(proto, batch_size, inputs_length), checkpoint_path=checkpoint_path
    )
    path = path.decode() if isinstance(path, bytes) else path
    info = {
        "checkpoint": checkpoint_path,
        "problem": model.problem.name if model.problem else None,
        "batch_size": batch_size,
        "inputs_length": inputs_length,
        "decode": decode,
        "signature": {"inputs": "string [n], n <= batch_size", "outputs": "string [n]", "scores": "float32 [n]"},
    }
    with open(os.path.join(path, INFO_FILE), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    logging.info("exported %s (%s)", path, json.dumps(decode, sort_keys=True))
    return path
