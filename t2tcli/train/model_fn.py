"""The tf.estimator model_fn of the Bitransformer: TRAIN and EVAL here, PREDICT delegated.

Contract (used by t2t-train, t2t-eval, t2t-decode and t2t-export)
-----------------------------------------------------------------
`t2tcli.train.estimator.build_estimator(model_dir, config, ...)` returns an
Estimator (a TPUEstimator with `tpu=...`) whose input_fn must yield static shapes (mtf
needs them; the caller pads the last batch to the full batch size; only the fast decode
engine's PREDICT takes batches of any size):

* TRAIN / EVAL features: `inputs`, `targets` int32 [batch, length] (ids ending in
  EOS=1, 0-padded); optionally packed, with `inputs_segmentation`,
  `inputs_position`, `targets_segmentation`, `targets_position` (see t2tcli.data.input.inputs).
  EVAL's `loss` is the token-weighted mean cross-entropy of the batch (no label
  smoothing, no z-loss); metrics `token_accuracy`, `xent` (token-weighted over the
  whole eval set) and `perplexity` = exp(xent).
* PREDICT runs the `predict` given to make_model_fn (t2tcli.decode.tf_predict.predict_spec
  for every decoding binary; its docstring holds the PREDICT features and predictions).
  Training needs no decoder, so this layer imports none.

Imports: core, model and train.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from t2tcli.compat import tf
from t2tcli.model import graph, optimization
from t2tcli.model import mesh as meshlib
from t2tcli.model.config import ModelConfig
from t2tcli.train import hooks, init_checkpoint

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from tensorflow_estimator.python.estimator.tpu import tpu_estimator

tf1 = tf.compat.v1
ModeKeys = tf.estimator.ModeKeys
# config, features, params -> the PREDICT EstimatorSpec
PredictSpec = Callable[[ModelConfig, dict[str, tf.Tensor], dict[str, Any]], Any]


@dataclasses.dataclass
class TrainSettings:
    """What the TRAIN graph needs besides hparams: checkpointing and logging."""

    train_steps: int | None = None
    save_checkpoints_steps: int = 1000
    save_checkpoints_secs: int = 0  # > 0: a checkpoint every this many seconds instead
    keep_checkpoint_max: int = 5
    log_every_steps: int = 100
    init_checkpoint: str | None = None
    init_checkpoint_label: str = ""  # what the log names as the source (default: init_checkpoint)
    progress: bool = False  # a progress bar on stderr besides the log lines
    random_seed: int | None = None  # the graph's seed: the same initial weights every run


def make_model_fn(
    model_config: ModelConfig, model_dir: str, train: TrainSettings | None = None, predict: PredictSpec | None = None
) -> Any:
    """The Estimator model_fn for `model_config`; see the module docstring for its contract."""
    train = train or TrainSettings()

    def model_fn(
        features: dict[str, tf.Tensor],
        labels: Any,
        mode: str,
        params: dict[str, Any] | None = None,
        config: Any = None,  # the Estimator's RunConfig, passed by this name
    ) -> Any:
        del labels
        params = params or {}
        if mode == ModeKeys.PREDICT:
            if predict is None:
                raise ValueError("this Estimator was built without a decoder: build it with t2tcli.decode.tf_predict")
            return predict(model_config, features, params)
        check_static_batch(model_config, features)
        g, f = graph.for_batch(model_config, features, params)
        if mode == ModeKeys.TRAIN:
            return _train_spec(g, f, features, model_dir, train, _task_name(config))
        return _eval_spec(g, f)

    return model_fn


def check_static_batch(model_config: ModelConfig, features: dict[str, tf.Tensor]) -> None:
    """A mesh-tensorflow graph needs a batch size known when it is built, that its mesh splits evenly."""
    batch_size = features["inputs"].shape[0]
    if batch_size is None:
        raise ValueError("model_fn needs a static batch size: batch with drop_remainder=True (pad the last batch)")
    meshlib.check_batch(model_config.mesh, int(batch_size))


def estimator_spec(use_tpu: bool, **kwargs: Any) -> Any:
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
    g: graph.Graph,
    f: dict[str, mtf.Tensor],
    features: dict[str, tf.Tensor],
    model_dir: str,
    train: TrainSettings,
    task: str = "",
) -> Any:
    hp = g.hp
    use_tpu = g.config.use_tpu
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
    # The step reads the global step (the learning rate, Adafactor's decay) where it uses it:
    # an increment free to run first would give a step its successor's rates, at random.
    with tf.control_dependencies(tf_updates):
        tf_updates.append(tf1.assign_add(global_step, 1))
    train_op = tf.group(tf_updates)
    with tf.control_dependencies([train_op]):
        step_after = tf.identity(global_step.read_value())  # ordered after this step's update
    tokens = tf.add_n([tf.reduce_sum(tf.cast(tf.not_equal(features[k], 0), tf.int64)) for k in graph.FEATURE_KEYS])

    tf1.summary.scalar("loss", tf_loss)
    tf1.summary.scalar("learning_rate", lr)
    tf1.summary.scalar("tokens_per_batch", tokens)
    with mtf.utils.outside_all_rewrites():
        # Once model_dir holds a checkpoint (a later round of train_and_evaluate), it is restored instead.
        if train.init_checkpoint and not tf.train.latest_checkpoint(model_dir):
            init_checkpoint.init_from_checkpoint(
                train.init_checkpoint, g.graph, g.hp, label=train.init_checkpoint_label
            )
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
                save_steps=None if train.save_checkpoints_secs > 0 else train.save_checkpoints_steps,
                save_secs=train.save_checkpoints_secs if train.save_checkpoints_secs > 0 else None,
                saver=saver,
                listeners=[mtf.MtfCheckpointSaverListener(lowering)],
            ),
        ]
        worker_hooks = []
        if not use_tpu:
            # On TPU these tensors live inside the TPU loop; TPUEstimator logs loss and
            # steps/s itself and the summaries leave through host_call.
            log = hooks.TrainLogHook(
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
        return estimator_spec(
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


def _eval_spec(g: graph.Graph, f: dict[str, mtf.Tensor]) -> Any:
    targets = f["targets"]
    logits, _ = g.logits(f, targets, ModeKeys.EVAL, compute_loss=False)
    xent, weights = graph.token_xent(logits, targets)
    predictions = mtf.cast(mtf.argmax(logits, logits.shape.dims[-1]), tf.int32)
    batch_loss = mtf.reduce_sum(xent) / mtf.maximum(mtf.reduce_sum(weights), 1.0)
    anonymous = [mtf.anonymize(t) for t in (xent, weights, predictions, targets)]
    lowering = g.lower()
    out = [lowering.export_to_tf_tensor(t) for t in anonymous]
    tf_loss = tf.cast(lowering.export_to_tf_tensor(batch_loss), tf.float32)
    with mtf.utils.outside_all_rewrites():
        restore = [mtf.MtfRestoreHook(lowering)]
    return estimator_spec(
        g.config.use_tpu, mode=ModeKeys.EVAL, loss=tf_loss, eval_metrics=(_metric_fn, out), evaluation_hooks=restore
    )
