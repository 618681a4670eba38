"""SavedModel export: a serving signature from strings to decoded strings.

Serving systems hand a model raw text, so tokenization and detokenization run inside
the graph (TensorFlow Text's SentencePiece ops, with the vocabulary embedded as a
constant) and the decode settings are baked in. The graph decodes with
`t2tcli.decode.fast` (the engine for one CPU or GPU) in batches of the exported batch
size: a request of any number of strings is padded to whole batches, decoded batch by
batch in one graph loop, and answered with exactly its own rows.

Loading the SavedModel needs `import tensorflow_text` (it registers the ops).

Imports: core, io, data, model, train, decode.
"""

from __future__ import annotations

import json
import os
from typing import Any

from absl import logging

from t2tcli.compat import tf
from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.decode import fast, memory_bound, search
from t2tcli.decode.settings import DecodeSettings
from t2tcli.errors import UserError
from t2tcli.io import atomic, fs
from t2tcli.model import checkpoints
from t2tcli.model.config import ModelConfig
from t2tcli.model.loading import LoadedModel
from t2tcli.train import estimator as estimator_lib

tf1 = tf.compat.v1
SIGNATURE_INPUT = "inputs"
INFO_FILE = "t2t_export.json"
_COUNT_KEY = "serving_num_inputs"
# Strings one batch of the SavedModel decodes at most: a request's last batch is padded to
# the full batch, so its size is memory every request costs, however few strings it holds.
MAX_BATCH_SIZE = 4096


def _tokenizer(proto: bytes) -> Any:
    try:
        import tensorflow_text as tf_text
    except ImportError:
        raise UserError("t2t-export needs tensorflow-text (pip install tensorflow-text==2.15.0)") from None
    return tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)


def serving_input_fn(proto: bytes, batch_size: int, inputs_length: int) -> Any:
    """Strings [n] -> `inputs` int32 [whole batches, inputs_length] (+ n), tokenized in-graph."""

    def fn() -> Any:
        text = tf1.placeholder(tf.string, [None], name=SIGNATURE_INPUT)
        n = tf.shape(text)[0]
        ids = _tokenizer(proto).tokenize(text)[:, : inputs_length - 1]
        eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], EOS_ID))
        dense = tf.concat([ids, eos], axis=1).to_tensor(default_value=0, shape=[None, inputs_length])
        # Rows past the request fill the last batch: a lone EOS, an input seen in training.
        padding = (batch_size - n % batch_size) % batch_size
        pad_rows = tf.one_hot(tf.zeros([padding], tf.int32), inputs_length, dtype=tf.int32) * EOS_ID
        rows = tf.concat([dense, pad_rows], axis=0)
        return tf.estimator.export.ServingInputReceiver({"inputs": rows, _COUNT_KEY: n}, {SIGNATURE_INPUT: text})

    return fn


def serving_model_fn(config: ModelConfig, proto: bytes, decode: DecodeSettings, batch_size: int) -> Any:
    """Decodes the request's batches in a graph loop and returns its rows as strings."""
    hp = config.hparams
    length = decode.targets_length(hp)
    inputs_length = int(hp.inputs_length)

    def fn(features: dict[str, tf.Tensor], labels: Any, mode: str, params: dict[str, Any]) -> Any:
        n = features[_COUNT_KEY]
        weights = fast.Weights(config)  # variables, read once outside the loop

        def one_batch(batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            decoded = search.decode(weights, batch, decode, length)
            return decoded.ids, decoded.scores

        batches = tf.reshape(features["inputs"], [-1, batch_size, inputs_length])
        ids, scores = tf.map_fn(
            one_batch,
            batches,
            fn_output_signature=(
                tf.TensorSpec([batch_size, length], tf.int32),
                tf.TensorSpec([batch_size], tf.float32),
            ),
            parallel_iterations=1,
        )
        ids, scores = tf.reshape(ids, [-1, length])[:n], tf.reshape(scores, [-1])[:n]
        keep = tf.logical_and(tf.greater(ids, EOS_ID), tf.less(ids, config.vocab_size))
        text = _tokenizer(proto).detokenize(tf.ragged.boolean_mask(ids, keep))
        outputs = {"outputs": text, "scores": scores}
        return tf.estimator.EstimatorSpec(
            mode=mode,
            predictions=outputs,
            export_outputs={"serving_default": tf.estimator.export.PredictOutput(outputs)},
        )

    return fn


def export(
    model: LoadedModel,
    export_dir: str,
    checkpoint_path: str,
    decode: DecodeSettings,
    batch_size: int | None = None,
    recorded_checkpoint: str = "",
) -> str:
    """Writes a SavedModel under export_dir/<timestamp> (TF Serving's version layout),
    decoding `batch_size` strings at a time (default: the settings' batch_size)."""
    batch_size = batch_size or decode.batch_size
    if batch_size > MAX_BATCH_SIZE:
        raise UserError(
            f"--decode_hparams: batch_size={batch_size} is more than {MAX_BATCH_SIZE}, the most strings a "
            "SavedModel decodes at once (a request's last batch is padded to it)"
        )
    memory_bound.check(decode, model.hparams, batch_size, int(model.hparams.inputs_length))
    if decode.engine == "mesh":
        raise UserError("a SavedModel decodes with the fast engine: drop engine=mesh from --decode_hparams")
    # Its RunConfig; building it validates the hparams (the decode settings were checked
    # when --decode_hparams was parsed, and the engine is the fast one whatever the mesh).
    inner = estimator_lib.build_estimator(model.model_dir, model.config)
    proto = model.vocab.model_proto
    estimator = tf.estimator.Estimator(
        model_fn=serving_model_fn(model.config, proto, decode, batch_size),
        model_dir=model.model_dir,
        config=inner.config,
    )
    inputs_length = int(model.hparams.inputs_length)
    fs.makedirs(export_dir)
    before = set(fs.names_in(export_dir))
    try:
        with checkpoints.readable(checkpoint_path):
            path = estimator.export_saved_model(
                export_dir, serving_input_fn(proto, batch_size, inputs_length), checkpoint_path=checkpoint_path
            )
    except BaseException:
        for name in set(fs.names_in(export_dir)) - before:  # the half-written temp-<timestamp> directory
            fs.rmtree(os.path.join(export_dir, name))
        raise
    path = path.decode() if isinstance(path, bytes) else path
    info = {
        "checkpoint": recorded_checkpoint or checkpoint_path,
        "problem": model.problem.name if model.problem else None,
        "batch_size": batch_size,
        "inputs_length": inputs_length,
        "decode": decode.engine_fields(),
        "signature": {"inputs": "string [n]", "outputs": "string [n]", "scores": "float32 [n]"},
    }
    atomic.write_text(os.path.join(path, INFO_FILE), json.dumps(info, indent=2, sort_keys=True))
    logging.info("exported %s (%s)", path, json.dumps(decode.engine_fields(), sort_keys=True))
    return path
