"""PREDICT inside the model_fn: decoding and scoring on TensorFlow, either with
t2tcli.decode.fast (one device) or with mesh-tensorflow's own decode loop (TPUs and
meshes of several devices). `predict_spec` is what t2tcli.train.model_fn calls in
PREDICT mode; `build_estimator` is the Estimator that decodes.

The decode settings arrive resolved (t2tcli.decode.settings.for_model_fn, once per
Estimator): the engine is already fast or mesh, and nothing here decides it again.

Imports: core, model, train and decode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from t2tcli.compat import tf
from t2tcli.decode import fast, search, settings
from t2tcli.model import graph
from t2tcli.model.config import ModelConfig
from t2tcli.model.loading import LoadedModel
from t2tcli.train import estimator
from t2tcli.train.model_fn import check_static_batch, estimator_spec

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf

tf1 = tf.compat.v1
ModeKeys = tf.estimator.ModeKeys


def _clean_decodes(ids: mtf.Tensor) -> mtf.Tensor:
    """Zeroes every position after the first EOS."""
    length_dim = ids.shape.dims[-1]
    is_eos = mtf.cast(mtf.equal(ids, 1), tf.int32)
    eos_before = mtf.cumsum(is_eos, length_dim, exclusive=True)
    return ids * mtf.cast(mtf.equal(eos_before, 0), tf.int32)


def _fast_predict_spec(config: ModelConfig, features: dict[str, tf.Tensor], decode: settings.DecodeSettings) -> Any:
    """PREDICT through t2tcli.decode.fast: the same contract, the same checkpoint variables."""
    hp = config.hparams
    # Prepared once a session: the local init op runs after the checkpoint is restored.
    weights = fast.Weights(config, held=True, beam_search=decode.beam_size > 1)
    inputs = tf.cast(features["inputs"], tf.int32)
    if "targets" in features:
        outputs = tf.cast(features["targets"], tf.int32)
        predictions = {"outputs": outputs, "scores": fast.score(weights, inputs, outputs)}
    else:
        decoded = search.decode(weights, inputs, decode, decode.targets_length(hp))
        # Per row, so Estimator.predict can split them: the steps its batch's loop ran,
        # the rows those steps computed (fewer once finished lines left the loop), and
        # the rows the loop began with (a line and its beams).
        per_row = {
            "decode_steps": decoded.steps,
            "decode_row_steps": decoded.row_steps,
            "decode_loop_rows": tf.shape(decoded.scores)[0] * decode.beam_size,
        }
        predictions = {
            "outputs": decoded.ids,
            "scores": decoded.scores,
            **{key: tf.fill(tf.shape(decoded.scores)[:1], value) for key, value in per_row.items()},
        }
    return tf.estimator.EstimatorSpec(mode=ModeKeys.PREDICT, predictions=predictions)


def _mesh_predict_spec(g: graph.Graph, f: dict[str, mtf.Tensor], decode: settings.DecodeSettings) -> Any:
    if "targets" in f:
        outputs = f["targets"]
    else:
        samples = g.model.decode(
            f["inputs"],
            variable_dtype=g.dtype,
            beam_size=decode.beam_size,
            alpha=decode.alpha,
            temperature=decode.temperature,
            sampling_keep_top_k=decode.top_k or -1,
            max_decode_length=decode.targets_length(g.hp),
        )
        outputs = _clean_decodes(samples)
    exported = {"outputs": outputs}
    if "targets" in f or decode.compute_scores:
        # Scores are teacher-forced log-likelihoods of the outputs, for decodes and scoring
        # alike. For a decode they cost a second encoder pass and a full decoder pass, a
        # large share of the work, so callers that only write text switch them off.
        scoring = {k: v for k, v in f.items() if k == "inputs"}
        logits, _ = g.logits(scoring, outputs, ModeKeys.PREDICT, compute_loss=False)
        xent, _ = graph.token_xent(logits, outputs)
        exported["scores"] = -mtf.reduce_sum(xent, reduced_dim=outputs.shape.dims[-1])
    exported = {k: mtf.anonymize(v) for k, v in exported.items()}
    lowering = g.lower()
    predictions = {k: lowering.export_to_tf_tensor(v) for k, v in exported.items()}
    predictions["outputs"] = tf.cast(predictions["outputs"], tf.int32)
    if "scores" in predictions:
        predictions["scores"] = tf.cast(predictions["scores"], tf.float32)
    with mtf.utils.outside_all_rewrites():
        hooks = [mtf.MtfRestoreHook(lowering)]

        def scaffold_fn() -> Any:
            # Export (SavedModel) restores masters only; the local init op copies them into
            # the sliced variables that the lowered graph reads.
            return tf1.train.Scaffold(
                local_init_op=tf.group(
                    tf1.train.Scaffold.default_local_init_op(), lowering.copy_masters_to_slices(), name="mtf_local_init"
                )
            )

    return estimator_spec(
        g.config.use_tpu,
        mode=ModeKeys.PREDICT,
        predictions=predictions,
        prediction_hooks=hooks,
        scaffold_fn=scaffold_fn,
    )


def predict_spec(config: ModelConfig, features: dict[str, tf.Tensor], params: dict[str, Any]) -> Any:
    """The PREDICT EstimatorSpec, with `params["decode"]` (settings.for_model_fn's
    DecodeSettings: its engine is fast or mesh).

    Features: `inputs` int32 [batch, inputs_length]; optional `targets` int32 [batch,
    targets_length] switches to scoring; for the fast engine, batch may be None (any
    number of rows). Predictions: `outputs` int32 [batch, max_decode_length] (decoded
    ids, 0 after the first EOS; when scoring, the given targets) and `scores` float32
    [batch] (the sum of the teacher-forced log-probabilities of `outputs`). The fast
    engine's decodes also carry `decode_steps` (steps its batch's loop ran; it stops once
    every row has ended), `decode_row_steps` (rows those steps computed, summed: finished
    lines leave the loop) and `decode_loop_rows` (batch x beams).
    Settings: `beam_size` (1: greedy or sampling), `alpha` (beam length penalty),
    `temperature` (0: greedy), `top_k` (0: off), `max_decode_length` (0: targets_length),
    and `compute_scores=False`, which lets a decode return 0 for `scores` (beam search ranks
    by them and returns them anyway, and scoring always does).
    """
    decode: settings.DecodeSettings = params["decode"]
    if decode.engine == "fast":  # on one device, batches of any size
        return _fast_predict_spec(config, features, decode)
    check_static_batch(config, features)
    g, f = graph.for_batch(config, features, params)
    return _mesh_predict_spec(g, f, decode)


def build_estimator(
    model_dir: str,
    config: ModelConfig,
    decode: settings.DecodeSettings | Mapping[str, Any] | None = None,
    tpu: estimator.TPUSettings | None = None,
) -> Any:
    """An Estimator that decodes with `decode` (settings; a mapping's keys over the hparams' own)."""
    resolved = settings.for_model_fn(config, decode)
    return estimator.build_estimator(model_dir, config, tpu=tpu, params={"decode": resolved}, predict=predict_spec)


def estimator_for(model: LoadedModel, decode: settings.DecodeSettings | Mapping[str, Any] | None = None) -> Any:
    """A loaded run's Estimator, decoding with `decode`."""
    return build_estimator(model.model_dir, model.config, decode)
