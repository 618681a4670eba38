"""The Mesh TensorFlow encoder-decoder transformer inside a tf.estimator model_fn.

The model is mesh-tensorflow's `transformer.Bitransformer` (the model T5 uses),
configured from hparams through `t2tcli.gin_bindings`. One model_fn serves TRAIN,
EVAL and PREDICT on one CPU, on a mesh of CPU / GPU devices (`PlacementMeshImpl`) and
on TPUs (`SimdMeshImpl` under TPUEstimator).

Contract (used by t2t-train, t2t-eval, t2t-decode and t2t-export)
-----------------------------------------------------------------
`build_estimator(model_dir, hparams, vocab_size, ...)` returns an Estimator (a
TPUEstimator with `tpu=...`) whose input_fn must yield static shapes (mtf needs them;
the caller pads the last batch to the full batch size):

* TRAIN / EVAL features: `inputs`, `targets` int32 [batch, length] (ids ending in
  EOS=1, 0-padded); optionally packed, with `inputs_segmentation`,
  `inputs_position`, `targets_segmentation`, `targets_position` (see t2tcli.inputs).
  EVAL's `loss` is the token-weighted mean cross-entropy of the batch (no label
  smoothing, no z-loss); metrics `token_accuracy`, `xent` (token-weighted over the
  whole eval set) and `perplexity` = exp(xent).
* PREDICT features: `inputs` int32 [batch, inputs_length]; optional `targets` int32
  [batch, targets_length] switches to scoring.
  Predictions: `outputs` int32 [batch, max_decode_length] (decoded ids, 0 after the
  first EOS; when scoring, the given targets) and `scores` float32 [batch] (sum of the
  teacher-forced log-probabilities of `outputs`; when scoring, of the given targets).
  fast_decode's decodes also carry `decode_steps` int32 [batch]: how many steps the
  batch's decode loop ran (it stops early once every row has ended), `decode_row_steps`:
  the rows those steps computed, summed (finished lines leave the loop), and
  `decode_loop_rows`: the rows it began with (batch x beams).
  Decode settings come from hparams: `beam_size` (1: greedy or sampling), `alpha`
  (beam length penalty), `temperature` (0: greedy), `top_k` (0: off) and
  `max_decode_length` (0: `targets_length`). `params={"decode": {...}}` given to
  build_estimator overrides any of them for one estimator; it may also hold
  `engine` ("auto": `t2tcli.fast_decode` on a one-device mesh off TPU, mesh-tf's
  decode otherwise; "fast" or "mesh" to choose) and `compute_scores=False`, which
  lets a decode return 0 for `scores` (mesh-tf's decode saves a teacher-forced pass,
  fast_decode's greedy one the log-sum-exp of every step's logits; beam search ranks by
  them and returns them anyway, and scoring always does).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from typing import Any

from absl import logging

from t2tcli import checkpoints, fast_decode, fast_search, gin_bindings, inputs, numerics, optimization, weight_names
from t2tcli import mesh as meshlib
from t2tcli.compat import tf
from t2tcli.decoding import DECODE_KEYS, TF_ENGINES
from t2tcli.errors import UserError
from t2tcli.hparams import HParams

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer
from tensorflow_estimator.python.estimator.tpu import tpu_config as tpu_config_lib
from tensorflow_estimator.python.estimator.tpu import tpu_estimator

tf1 = tf.compat.v1
ModeKeys = tf.estimator.ModeKeys
FEATURE_KEYS = ("inputs", "targets")
PACKING_SUFFIXES = ("_segmentation", "_position")
# Not hparams: callers that only need decoded ids pass {"compute_scores": False}; "engine"
# picks the decode implementation: "auto" (t2tcli.fast_decode where it applies), "fast" or "mesh".
DECODE_DEFAULTS = {"compute_scores": True, "engine": "auto"}


@dataclasses.dataclass
class TrainSettings:
    """What the TRAIN graph needs besides hparams: checkpointing and logging."""

    train_steps: int | None = None
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_steps: int = 100
    init_checkpoint: str | None = None
    progress: bool = False  # a progress bar on stderr besides the log lines
    random_seed: int | None = None  # the graph's seed: the same initial weights every run


def variable_dtype(hp: HParams, use_tpu: bool = False) -> mtf.VariableDType:
    """float32 variables; activations in hp.activation_dtype as resolved for this machine."""
    return mtf.VariableDType(tf.float32, tf.float32, tf.as_dtype(numerics.resolve(hp.activation_dtype, use_tpu)))


def validate(hp: HParams, vocab_size: int, use_tpu: bool = False) -> None:
    """Every check of hparams that building the model would make, as one-line errors, so
    a binary can run them before it writes anything."""
    spec = meshlib.spec_from_hparams(hp)
    meshlib.check_vocab(spec, vocab_size, hp.vocab_divisor)
    optimization.check(hp)
    if hp.ffn_activation.removeprefix("gated-") not in fast_decode.ACTIVATIONS:
        known = ", ".join(fast_decode.ACTIVATIONS)
        raise UserError(f"hparam ffn_activation={hp.ffn_activation!r}: use one of {known}, or gated-<one of them>")
    weight_names.Architecture.from_hparams(hp, vocab_size)
    variable_dtype(hp, use_tpu)


def build_model(hp: HParams, vocab_size: int, use_tpu: bool = False) -> transformer.Bitransformer:
    """A Bitransformer for `hp` (gin is reset to hp's bindings first)."""
    gin_bindings.apply(hp, use_tpu)
    return transformer.make_bitransformer(input_vocab_size=vocab_size, output_vocab_size=vocab_size)


def _import_features(mesh: mtf.Mesh, features: dict[str, tf.Tensor], batch_dim: mtf.Dimension) -> dict[str, mtf.Tensor]:
    out = {}
    for key, value in features.items():
        if key.split("_")[0] not in FEATURE_KEYS:
            continue
        length = value.shape[-1]
        if length is None or value.shape[0] is None:
            raise ValueError(f"feature '{key}' needs a static shape, got {value.shape}")
        shape = mtf.Shape([batch_dim, mtf.Dimension("length", int(length))])
        out[key] = mtf.import_fully_replicated(mesh, tf.cast(value, tf.int32), shape, name=key)
    return out


def _token_xent(logits: mtf.Tensor, targets: mtf.Tensor) -> tuple[mtf.Tensor, mtf.Tensor]:
    """Per-token cross-entropy (float32) and the 0/1 weights of non-padding targets."""
    logits = mtf.cast(logits, tf.float32)
    xent = mtf.layers.softmax_cross_entropy_with_logits(logits, targets, logits.shape.dims[-1])
    weights = mtf.cast(mtf.greater(targets, 0), tf.float32)
    return xent * weights, weights


def _clean_decodes(ids: mtf.Tensor) -> mtf.Tensor:
    """Zeroes every position after the first EOS."""
    length_dim = ids.shape.dims[-1]
    is_eos = mtf.cast(mtf.equal(ids, 1), tf.int32)
    eos_before = mtf.cumsum(is_eos, length_dim, exclusive=True)
    return ids * mtf.cast(mtf.equal(eos_before, 0), tf.int32)


def _decode_settings(hp: HParams, params: dict[str, Any] | None) -> dict[str, Any]:
    settings = {k: hp.get(k) for k in DECODE_KEYS}
    settings.update(DECODE_DEFAULTS)
    settings.update((params or {}).get("decode", {}) or {})
    settings.pop("quantization", None)  # CTranslate2's; the model_fn's engines run the activation dtype
    if settings["beam_size"] > 1 and (settings["temperature"] or settings["top_k"]):
        raise UserError("beam_size > 1 cannot be combined with temperature or top_k sampling")
    if settings["engine"] not in TF_ENGINES:
        raise UserError(f"decode engine={settings['engine']!r}: the model_fn runs one of {', '.join(TF_ENGINES)}")
    return settings


def _use_fast_decode(
    hp: HParams, spec: meshlib.MeshSpec, decode: dict[str, Any], use_tpu: bool, explain: bool = True
) -> bool:
    """Whether PREDICT runs t2tcli.fast_decode: on one device, unless told otherwise."""
    if decode["engine"] == "mesh":
        return False
    if not use_tpu and spec.size == 1:
        return True
    reason = "on TPU" if use_tpu else f"on the {spec.size}-device mesh_shape={hp.mesh_shape}"
    if decode["engine"] == "fast":
        raise UserError(f"decode engine=fast does not run {reason}; use engine=auto or engine=mesh")
    if explain:
        logging.info("decoding with mesh-tensorflow's decode loop (%s)", reason)
    return False


def _fast_predict_spec(hp: HParams, vocab_size: int, features: dict[str, tf.Tensor], decode: dict[str, Any]) -> Any:
    """PREDICT through t2tcli.fast_decode: the same contract, the same checkpoint variables."""
    weights = fast_decode.Weights(hp, vocab_size)
    inputs = tf.cast(features["inputs"], tf.int32)
    if "targets" in features:
        outputs = tf.cast(features["targets"], tf.int32)
        predictions = {"outputs": outputs, "scores": fast_decode.score(weights, inputs, outputs)}
    else:
        length = int(decode["max_decode_length"] or hp.targets_length)
        decoded = fast_search.decode(weights, inputs, decode, length)
        # Per row, so Estimator.predict can split them: the steps its batch's loop ran,
        # the rows those steps computed (fewer once finished lines left the loop), and
        # the rows the loop began with (a line and its beams).
        per_row = {
            "decode_steps": decoded.steps,
            "decode_row_steps": decoded.row_steps,
            "decode_loop_rows": tf.size(decoded.scores) * max(int(decode["beam_size"]), 1),
        }
        predictions = {
            "outputs": decoded.ids,
            "scores": decoded.scores,
            **{key: tf.fill(tf.shape(decoded.scores), value) for key, value in per_row.items()},
        }
    return tf.estimator.EstimatorSpec(mode=ModeKeys.PREDICT, predictions=predictions)


class _Graph:
    """One model_fn call's mtf graph, mesh and model."""

    def __init__(
        self, hp: HParams, vocab_size: int, mesh_impl: mtf.MeshImpl, var_placer: Any = None, use_tpu: bool = False
    ) -> None:
        self.hp = hp
        self.graph = mtf.Graph()
        self.mesh = mtf.Mesh(self.graph, "mesh", var_placer)
        self.mesh_impl = mesh_impl
        self.model = build_model(hp, vocab_size, use_tpu)
        self.dtype = variable_dtype(hp, use_tpu)

    def logits(self, f: dict[str, mtf.Tensor], targets: mtf.Tensor, mode: str, compute_loss: bool) -> Any:
        return self.model.call_simple(
            inputs=f["inputs"],
            targets=targets,
            compute_loss=compute_loss,
            mode=mode,
            variable_dtype=self.dtype,
            encoder_sequence_id=f.get("inputs_segmentation"),
            decoder_sequence_id=f.get("targets_segmentation"),
            encoder_position=f.get("inputs_position"),
            decoder_position=f.get("targets_position"),
        )

    def lower(self) -> mtf.Lowering:
        return mtf.Lowering(self.graph, {self.mesh: self.mesh_impl}, autostack=True)


def _checkpoint_shapes(init_checkpoint: str) -> dict[str, list[int]]:
    try:
        reader = tf.train.load_checkpoint(init_checkpoint)
    except (ValueError, tf.errors.NotFoundError, tf.errors.DataLossError) as exc:
        raise UserError(f"--init_checkpoint={init_checkpoint}: no readable checkpoint ({exc})") from None
    return {name: list(shape) for name, shape in reader.get_variable_to_shape_map().items()}


def _source_names(hp: HParams, vocab_size: int) -> Any:
    """name -> the name it may have in a checkpoint of the other norm_scope (T5 v1.0 against
    T5 v1.1 and t2tcli runs before the distinction), for variables and optimizer slots."""
    arch = weight_names.Architecture.from_hparams(hp, vocab_size)
    other = {new: old for old, new in weight_names.renamed_from_other_norm_scope(arch).items()}

    def source(name: str, have: dict[str, list[int]]) -> str:
        if name in have:
            return name
        for new, old in other.items():
            if name == new or name.startswith(new + "_slot"):
                return old + name[len(new) :]
        return name

    return source


def check_init_checkpoint(init_checkpoint: str, hp: HParams, vocab_size: int) -> None:
    """A one-line error listing every weight of the model that the checkpoint lacks or shapes
    otherwise; run before anything is written. Silently training a half-initialised
    model wastes days."""
    have = _checkpoint_shapes(init_checkpoint)
    checkpoints.check_complete(init_checkpoint)
    source = _source_names(hp, vocab_size)
    problems = []
    for name, shape in weight_names.mesh_shapes(weight_names.Architecture.from_hparams(hp, vocab_size)).items():
        found = source(name, have)
        if found not in have:
            problems.append(f"{name} {shape} missing from checkpoint")
        elif have[found] != shape:
            problems.append(f"{name}: model {shape} vs checkpoint {have[found]}")
    if problems:
        shown = "; ".join(problems[:20]) + (f"; ... {len(problems) - 20} more" if len(problems) > 20 else "")
        raise UserError(f"--init_checkpoint={init_checkpoint} does not fit the model{_family_hint(have, hp)}: {shown}")


def _family_hint(have: dict[str, list[int]], hp: HParams) -> str:
    """' (it is T5 v1.1-style ...)' when the checkpoint's layout is the other T5 family's."""
    v1_1 = weight_names.LOGITS in have or any("/wi_0/" in n for n in have)
    if v1_1 and not weight_names.is_gated(hp.ffn_activation):
        return " (it is T5 v1.1-style: gated FFN, decoder/logits/kernel; use a t5_v1_1_*, flan_t5_* or mt5_* set)"
    if not v1_1 and weight_names.is_gated(hp.ffn_activation):
        return " (it is T5 v1.0-style: relu FFN, logits from the embedding; use a t5_* set)"
    return ""


def _init_from_checkpoint(init_checkpoint: str, graph: mtf.Graph, hp: HParams) -> None:
    """Initialises the model (and matching optimizer slots) from a mesh-tf / T5 checkpoint
    that check_init_checkpoint accepted.

    Only initial values change, so a run resumed from its own model_dir keeps its
    trained weights. Norm variables named by the other norm_scope are mapped by name.
    """
    have = _checkpoint_shapes(init_checkpoint)
    vocab_rows = next(v.shape.to_integer_list[0] for v in graph.all_variables if v.name == weight_names.EMBEDDING)
    source = _source_names(hp, vocab_rows)
    assignment: dict[str, str] = {}
    for var in graph.all_variables:
        found = source(var.name, have)
        if have.get(found) == var.shape.to_integer_list:
            assignment[found] = var.name
    renamed = sum(found != name for found, name in assignment.items())
    if renamed:
        logging.info(
            "%s names %d norm variables as norm_scope=%s does not; mapped onto %s names",
            init_checkpoint,
            renamed,
            hp.norm_scope,
            hp.norm_scope,
        )
    tf1.logging.info("initialising %d variables from %s", len(assignment), init_checkpoint)
    tf1.train.init_from_checkpoint(init_checkpoint, assignment)


def _mesh_impl(spec: meshlib.MeshSpec, params: dict[str, Any], use_tpu: bool) -> tuple[mtf.MeshImpl, Any]:
    if not use_tpu or "context" not in params:
        return meshlib.placement_mesh_impl(spec, meshlib.placement_devices(spec)), None
    ctx = params["context"]
    devices = [ctx.tpu_host_placement_function(host_id=i) for i in range(ctx.num_hosts)]
    var_placer = mtf.utils.BalancedVariablePlacer(devices, [300_000_000 * ctx.num_replicas] + [0] * (ctx.num_hosts - 1))
    physical = [int(i) for i in ctx.device_assignment.topology.mesh_shape]
    if len(physical) == 4 and physical[2] > 1:
        physical = mtf.simd_mesh_impl.physical_shape_3d_from_topology_proto_4d(physical)
    logical_to_physical = mtf.simd_mesh_impl.auto_logical_to_physical_tpu(
        spec.mtf_shape().to_integer_list, physical, device_assignment=ctx.device_assignment
    )
    impl = mtf.simd_mesh_impl.SimdMeshImpl(
        spec.mtf_shape(),
        spec.mtf_layout(),
        [""] * spec.size,
        ctx.device_assignment,
        logical_to_physical=logical_to_physical,
    )
    return impl, var_placer


def make_model_fn(
    hp: HParams, vocab_size: int, model_dir: str, train: TrainSettings | None = None, use_tpu: bool = False
) -> Any:
    """The Estimator model_fn for `hp`; see the module docstring for its contract."""
    validate(hp, vocab_size, use_tpu)
    spec = meshlib.spec_from_hparams(hp)
    train = train or TrainSettings()

    def model_fn(
        features: dict[str, tf.Tensor], labels: Any, mode: str, params: dict[str, Any] | None = None, config: Any = None
    ) -> Any:
        del labels
        params = params or {}
        batch_size = features["inputs"].shape[0]
        if batch_size is None:
            raise ValueError("model_fn needs a static batch size: batch with drop_remainder=True (pad the last batch)")
        meshlib.check_batch(spec, int(batch_size))
        if mode == ModeKeys.PREDICT:
            decode = _decode_settings(hp, params)
            if _use_fast_decode(hp, spec, decode, use_tpu):
                return _fast_predict_spec(hp, vocab_size, features, decode)
        mesh_impl, var_placer = _mesh_impl(spec, params, use_tpu)
        g = _Graph(hp, vocab_size, mesh_impl, var_placer, use_tpu)
        batch_dim = mtf.Dimension("batch", int(batch_size))
        f = _import_features(g.mesh, features, batch_dim)
        if mode == ModeKeys.TRAIN:
            return _train_spec(g, f, features, model_dir, train, use_tpu, _task_name(config))
        if mode == ModeKeys.EVAL:
            return _eval_spec(g, f, use_tpu)
        return _predict_spec(g, f, decode, use_tpu)

    return model_fn


def _spec(use_tpu: bool, **kwargs: Any) -> Any:
    if use_tpu:
        return tpu_estimator.TPUEstimatorSpec(**kwargs)
    scaffold_fn = kwargs.pop("scaffold_fn", None)
    if scaffold_fn is not None:
        kwargs["scaffold"] = scaffold_fn()
    kwargs.pop("host_call", None)
    if "eval_metrics" in kwargs:
        fn, tensors = kwargs.pop("eval_metrics")
        kwargs["eval_metric_ops"] = fn(*tensors)
    return tf.estimator.EstimatorSpec(**kwargs)


def _task_name(config: Any) -> str:
    """'' for the chief (or the only task); 'worker 1' and the like for the other workers
    of a TF_CONFIG cluster."""
    if config is None or getattr(config, "is_chief", True):
        return ""
    return f"{config.task_type} {config.task_id}"


def _train_spec(
    g: _Graph,
    f: dict[str, mtf.Tensor],
    features: dict[str, tf.Tensor],
    model_dir: str,
    train: TrainSettings,
    use_tpu: bool,
    task: str = "",
) -> Any:
    hp = g.hp
    _, loss = g.logits(f, f["targets"], ModeKeys.TRAIN, compute_loss=True)
    loss = mtf.cast(loss, tf.float32)
    global_step = tf1.train.get_or_create_global_step()
    lr = optimization.learning_rate(hp, global_step, train.train_steps)
    variables = g.graph.trainable_variables
    grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
    update_ops = optimization.optimizer(hp, lr).apply_grads(grads, variables)
    lowering = g.lower()
    tf_loss = tf.cast(lowering.export_to_tf_tensor(loss), tf.float32)
    tf_updates = [lowering.lowered_operation(op) for op in update_ops]
    tf_updates.append(tf1.assign_add(global_step, 1))
    train_op = tf.group(tf_updates)
    with tf.control_dependencies([train_op]):
        step_after = tf.identity(global_step.read_value())  # ordered after this step's update
    tokens = tf.add_n([tf.reduce_sum(tf.cast(tf.not_equal(features[k], 0), tf.int64)) for k in FEATURE_KEYS])

    tf1.summary.scalar("loss", tf_loss)
    tf1.summary.scalar("learning_rate", lr)
    tf1.summary.scalar("tokens_per_batch", tokens)
    with mtf.utils.outside_all_rewrites():
        if train.init_checkpoint:
            _init_from_checkpoint(train.init_checkpoint, g.graph, g.hp)
        saver = tf1.train.Saver(
            tf1.global_variables(),
            sharded=True,
            max_to_keep=train.keep_checkpoint_max,
            defer_build=False,
            save_relative_paths=True,
        )
        tf1.add_to_collection(tf1.GraphKeys.SAVERS, saver)
        # The chief restores, saves and summarises; every other worker of a cluster only
        # trains and logs its own progress.
        chief_hooks = [
            mtf.MtfRestoreHook(lowering),
            tf1.train.CheckpointSaverHook(
                model_dir,
                save_steps=train.save_checkpoints_steps,
                saver=saver,
                listeners=[mtf.MtfCheckpointSaverListener(lowering)],
            ),
        ]
        worker_hooks = []
        if not use_tpu:
            # On TPU these tensors live inside the TPU loop; TPUEstimator logs loss and
            # steps/s itself and the summaries leave through host_call.
            log = TrainLogHook(
                tf_loss,
                lr,
                tokens,
                step_after,
                train.log_every_steps,
                model_dir if not task else None,
                train_steps=train.train_steps,
                progress=train.progress,
                task=task,
            )
            (worker_hooks if task else chief_hooks).append(log)
    if use_tpu:
        host_call = mtf.utils.create_host_call(model_dir)
        mtf.utils.remove_summaries()
        return _spec(
            use_tpu,
            mode=ModeKeys.TRAIN,
            loss=tf_loss,
            train_op=train_op,
            training_hooks=chief_hooks,
            host_call=host_call,
        )
    return tf.estimator.EstimatorSpec(
        mode=ModeKeys.TRAIN,
        loss=tf_loss,
        train_op=train_op,
        training_chief_hooks=chief_hooks,
        training_hooks=worker_hooks,
    )


def _metric_fn(xent: tf.Tensor, weights: tf.Tensor, predictions: tf.Tensor, targets: tf.Tensor) -> dict[str, Any]:
    token_xent = tf1.metrics.mean(xent, weights=weights)
    return {
        "token_accuracy": tf1.metrics.accuracy(targets, predictions, weights=weights),
        "xent": token_xent,
        "perplexity": (tf.exp(token_xent[0]), tf.exp(token_xent[1])),
    }


def _eval_spec(g: _Graph, f: dict[str, mtf.Tensor], use_tpu: bool) -> Any:
    targets = f["targets"]
    logits, _ = g.logits(f, targets, ModeKeys.EVAL, compute_loss=False)
    xent, weights = _token_xent(logits, targets)
    predictions = mtf.cast(mtf.argmax(logits, logits.shape.dims[-1]), tf.int32)
    batch_loss = mtf.reduce_sum(xent) / mtf.maximum(mtf.reduce_sum(weights), 1.0)
    anonymous = [mtf.anonymize(t) for t in (xent, weights, predictions, targets)]
    lowering = g.lower()
    out = [lowering.export_to_tf_tensor(t) for t in anonymous]
    tf_loss = tf.cast(lowering.export_to_tf_tensor(batch_loss), tf.float32)
    with mtf.utils.outside_all_rewrites():
        hooks = [mtf.MtfRestoreHook(lowering)]
    return _spec(use_tpu, mode=ModeKeys.EVAL, loss=tf_loss, eval_metrics=(_metric_fn, out), evaluation_hooks=hooks)


def _predict_spec(g: _Graph, f: dict[str, mtf.Tensor], decode: dict[str, Any], use_tpu: bool) -> Any:
    if "targets" in f:
        outputs = f["targets"]
    else:
        length = int(decode["max_decode_length"] or g.hp.targets_length)
        samples = g.model.decode(
            f["inputs"],
            variable_dtype=g.dtype,
            beam_size=int(decode["beam_size"]),
            alpha=float(decode["alpha"]),
            temperature=float(decode["temperature"]),
            sampling_keep_top_k=int(decode["top_k"]) or -1,
            max_decode_length=length,
        )
        outputs = _clean_decodes(samples)
    exported = {"outputs": outputs}
    if "targets" in f or decode["compute_scores"]:
        # Scores are teacher-forced log-likelihoods of the outputs, for decodes and scoring
        # alike. For a decode they cost a second encoder pass and a full decoder pass, a
        # large share of the work, so callers that only write text switch them off.
        scoring = {k: v for k, v in f.items() if k == "inputs"}
        logits, _ = g.logits(scoring, outputs, ModeKeys.PREDICT, compute_loss=False)
        xent, _ = _token_xent(logits, outputs)
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

    return _spec(
        use_tpu, mode=ModeKeys.PREDICT, predictions=predictions, prediction_hooks=hooks, scaffold_fn=scaffold_fn
    )


def _duration(seconds: float) -> str:
    """'1h02m', '3m05s' or '42s': an ETA a person reads at a glance."""
    seconds = max(0, int(round(seconds)))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class TrainLogHook(tf1.train.SessionRunHook):
    """Tells a person waiting on training how far it is and how long is left.

    The first step is logged as soon as it ends (graph set-up and the first step can
    take minutes on a CPU), then one line every `every` steps: loss, learning rate,
    steps/s, tokens/s and the time left to `train_steps`; steps/s and tokens/s also go
    to TensorBoard. With `progress`, a bar on stderr shows the same between log lines.
    """

    def __init__(
        self,
        loss: tf.Tensor,
        lr: tf.Tensor,
        tokens: tf.Tensor,
        step: tf.Tensor,
        every: int,
        model_dir: str | None,
        train_steps: int | None = None,
        progress: bool = False,
        task: str = "",
    ) -> None:
        self._fetches = {"loss": loss, "lr": lr, "tokens": tokens, "step": step}
        self._every = max(1, int(every))
        self._model_dir = model_dir
        self._train_steps = train_steps
        self._progress = progress
        self._prefix = f"{task}: " if task else ""
        self._bar: Any = None
        self._bar_tokens = 0
        self._bar_started = 0.0
        self._tokens = 0
        self._created = time.monotonic()
        self._start: tuple[float, int] | None = None

    def before_run(self, run_context: Any) -> Any:
        return tf1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        r = run_values.results
        step = int(r["step"])
        now = time.monotonic()
        if self._start is None:
            self._start = (now, step)
            self._log(
                "step %d  loss %.4f  lr %.3g  (graph set-up and first step: %.1f s)",
                step,
                r["loss"],
                r["lr"],
                now - self._created,
            )
            self._open_bar(step)
            return
        self._tokens += int(r["tokens"])
        if self._bar is not None:
            self._bar_tokens += int(r["tokens"])
            rate = self._bar_tokens / max(now - self._bar_started, 1e-9)
            self._bar.set_postfix_str(f"loss {r['loss']:.4f}, {rate:.0f} tokens/s", refresh=False)
            self._bar.update(step - self._bar.n)
        if step % self._every:
            return
        elapsed = max(now - self._start[0], 1e-9)
        steps_per_s = (step - self._start[1]) / elapsed
        tokens_per_s = self._tokens / elapsed
        eta = ""
        if self._train_steps and steps_per_s > 0 and step < self._train_steps:
            eta = f"  eta {_duration((self._train_steps - step) / steps_per_s)}"
        self._log(
            "step %d  loss %.4f  lr %.3g  %.2f steps/s  %.0f tokens/s%s",
            step,
            r["loss"],
            r["lr"],
            steps_per_s,
            tokens_per_s,
            eta,
        )
        if self._model_dir is None:  # a worker that is not the chief: the chief summarises
            self._start = (now, step)
            self._tokens = 0
            return
        writer = tf1.summary.FileWriterCache.get(self._model_dir)
        writer.add_summary(
            tf1.Summary(
                value=[
                    tf1.Summary.Value(tag="steps_per_sec", simple_value=steps_per_s),
                    tf1.Summary.Value(tag="tokens_per_sec", simple_value=tokens_per_s),
                ]
            ),
            step,
        )
        self._start = (now, step)
        self._tokens = 0

    def end(self, session: Any) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _open_bar(self, step: int) -> None:
        if not self._progress:
            return
        from tqdm import tqdm

        self._bar = tqdm(
            total=self._train_steps, initial=step, unit="step", desc="training", file=sys.stderr, dynamic_ncols=True
        )
        self._bar_started = time.monotonic()

    def _log(self, fmt: str, *args: Any) -> None:
        fmt = self._prefix + fmt
        if self._bar is None:
            logging.info(fmt, *args)
            return
        with self._bar.external_write_mode(file=sys.stderr):
            logging.info(fmt, *args)


def write_initial_checkpoint(estimator: tf.estimator.Estimator, hp: HParams) -> None:
    """Saves the model as training would before its first step: variables initialised (from
    the init checkpoint when there is one), optimizer slots included, as step 0.

    This is `t2t-train --train_steps=0`: a model_dir that eval, decode and export use, and
    that a later t2t-train resumes, without a step of training.
    """
    with tf.Graph().as_default():
        batch = inputs.batch_size(hp)
        features = {
            "inputs": tf.zeros([batch, int(hp.inputs_length)], tf.int32),
            "targets": tf.zeros([batch, int(hp.targets_length)], tf.int32),
        }
        spec = estimator.model_fn(features, None, ModeKeys.TRAIN, estimator.config)
        config = tf1.ConfigProto()
        config.CopyFrom(estimator.config.session_config)
        with tf1.train.MonitoredTrainingSession(
            scaffold=spec.scaffold, chief_only_hooks=spec.training_chief_hooks, config=config
        ):
            pass  # the checkpoint saver hook saves step 0 once the session is made


def session_config(hp: HParams) -> tf1.ConfigProto:
    """Enough logical CPU devices for the mesh (when there is no GPU); in a TF_CONFIG
    cluster, a task sees only the parameter servers and itself, so that workers do not
    wait on each other (what Estimator sets when given no session config)."""
    spec = meshlib.spec_from_hparams(hp)
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    config = tf1.ConfigProto(
        device_count={"CPU": meshlib.cpu_device_count(spec)},
        allow_soft_placement=True,
        # In a cluster, every worker's session must see the variables the parameter servers hold.
        isolate_session_state=not task,
    )
    if task.get("type") in ("chief", "worker", "master"):
        config.device_filters.extend(["/job:ps", f"/job:{task['type']}/task:{int(task.get('index', 0))}"])
    elif task.get("type") == "evaluator":
        config.device_filters.append(f"/job:evaluator/task:{int(task.get('index', 0))}")
    return config


@dataclasses.dataclass
class TPUSettings:
    """Where the TPU is and how many steps run on it between host round trips."""

    tpu: str
    tpu_topology: str = ""
    iterations_per_loop: int = 100
    zone: str | None = None
    gcp_project: str | None = None


def build_estimator(
    model_dir: str,
    hparams: HParams,
    vocab_size: int,
    train: TrainSettings | None = None,
    tpu: TPUSettings | None = None,
    params: dict[str, Any] | None = None,
) -> tf.estimator.Estimator:
    """An Estimator for the Bitransformer of `hparams` (see the module docstring).

    Checkpoints are written by the model_fn's own saver hook (mesh-tf must copy sliced
    variables back to their masters first), so the RunConfig's saver is switched off.
    """
    train = train or TrainSettings()
    spec = meshlib.spec_from_hparams(hparams)
    if tpu is not None:
        if tpu.tpu_topology:
            meshlib.check_tpu(spec, tpu.tpu_topology)
        resolver = tf1.distribute.cluster_resolver.TPUClusterResolver(tpu.tpu, zone=tpu.zone, project=tpu.gcp_project)
        config = tpu_config_lib.RunConfig(
            cluster=resolver,
            model_dir=model_dir,
            save_checkpoints_steps=None,
            save_checkpoints_secs=None,
            log_step_count_steps=None,
            save_summary_steps=train.log_every_steps,
            tf_random_seed=train.random_seed,
            tpu_config=tpu_config_lib.TPUConfig(
                num_shards=spec.size,
                iterations_per_loop=tpu.iterations_per_loop,
                per_host_input_for_training=tpu_config_lib.InputPipelineConfig.BROADCAST,
            ),
        )
        return tpu_estimator.TPUEstimator(
            model_fn=make_model_fn(hparams, vocab_size, model_dir, train, use_tpu=True),
            config=config,
            use_tpu=True,
            train_batch_size=hparams.batch_size,
            eval_batch_size=hparams.batch_size,
            predict_batch_size=hparams.batch_size,
            params=dict(params or {}),
        )
    config = tf.estimator.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=train.log_every_steps,
        keep_checkpoint_max=train.keep_checkpoint_max,
        session_config=session_config(hparams),
        tf_random_seed=train.random_seed,
    )
    return tf.estimator.Estimator(
        model_fn=make_model_fn(hparams, vocab_size, model_dir, train),
        config=config,
        params=dict(params or {}),
    )


def variable_names(hparams: HParams, vocab_size: int) -> dict[str, list[int]]:
    """Names and shapes of the model's variables (e.g. to compare with a T5 checkpoint)."""
    hp = hparams.copy()
    hp.mesh_shape = ""
    with tf.Graph().as_default():
        g = _Graph(hp, vocab_size, meshlib.placement_mesh_impl(meshlib.spec_from_hparams(hp), [""]))
        batch = mtf.Dimension("batch", 1)
        length = mtf.Dimension("length", 4)
        ids = mtf.zeros(g.mesh, mtf.Shape([batch, length]), tf.int32)
        g.logits({"inputs": ids}, ids, ModeKeys.EVAL, compute_loss=False)
        return {v.name: v.shape.to_integer_list for v in g.graph.all_variables if not re.match(r"^stacked/", v.name)}
