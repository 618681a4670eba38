"""The Estimator around the model_fn: one RunConfig for CPU, GPU meshes and TPUs.

Imports: core, data, model, train.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any

from t2tcli.compat import tf
from t2tcli.data.input import inputs
from t2tcli.errors import UserError
from t2tcli.model import gin_bindings, xla_logs
from t2tcli.model import mesh as meshlib
from t2tcli.model.config import ModelConfig
from t2tcli.train.model_fn import PredictSpec, TrainSettings, make_model_fn

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
from tensorflow_estimator.python.estimator.tpu import tpu_config as tpu_config_lib
from tensorflow_estimator.python.estimator.tpu import tpu_estimator

tf1 = tf.compat.v1
ModeKeys = tf.estimator.ModeKeys


@dataclasses.dataclass(frozen=True)
class TPUSettings:
    """Where the TPU is and how many steps run on it between host round trips."""

    tpu: str
    tpu_topology: str = ""
    iterations_per_loop: int = 100
    zone: str | None = None
    gcp_project: str | None = None


@functools.cache
def tpu_resolver(tpu: TPUSettings) -> Any:
    """The TPU's cluster resolver, asked for its address once; a TPU that cannot be reached
    (no such name, no network, no credentials, another zone) is one line naming it, before
    anything is written."""
    try:
        resolver = tf1.distribute.cluster_resolver.TPUClusterResolver(tpu.tpu, zone=tpu.zone, project=tpu.gcp_project)
        resolver.master()
    except Exception as exc:  # noqa: BLE001 - the Cloud TPU client raises many kinds
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        where = ", ".join(f"{k}={v}" for k, v in (("tpu_zone", tpu.zone), ("gcp_project", tpu.gcp_project)) if v)
        raise UserError(
            f"--tpu={tpu.tpu}{f' ({where})' if where else ''}: no TPU reachable ({detail}); run on a Cloud VM "
            "that can reach it, with --tpu_zone / --gcp_project where the TPU is not in the VM's own"
        ) from None
    return resolver


def session_config(config: ModelConfig) -> tf1.ConfigProto:
    """Enough logical CPU devices for the mesh (when there is no GPU); in a TF_CONFIG
    cluster, a task sees only the parameter servers and itself, so that workers do not
    wait on each other (what Estimator sets when given no session config)."""
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    session = tf1.ConfigProto(
        device_count={"CPU": meshlib.cpu_device_count(config.mesh)},
        allow_soft_placement=True,
        # In a cluster, every worker's session must see the variables the parameter servers hold.
        isolate_session_state=not task,
    )
    if task.get("type") in ("chief", "worker", "master"):
        session.device_filters.extend(["/job:ps", f"/job:{task['type']}/task:{int(task.get('index', 0))}"])
    elif task.get("type") == "evaluator":
        session.device_filters.append(f"/job:evaluator/task:{int(task.get('index', 0))}")
    return session


def build_estimator(
    model_dir: str,
    config: ModelConfig,
    train: TrainSettings | None = None,
    tpu: TPUSettings | None = None,
    params: dict[str, Any] | None = None,
    predict: PredictSpec | None = None,
) -> tf.estimator.Estimator:
    """An Estimator for the Bitransformer of `config` (the contract: t2tcli.train.model_fn);
    a TPUEstimator with `tpu` (for a config built with use_tpu).

    Checkpoints are written by the model_fn's own saver hook (mesh-tf must copy sliced
    variables back to their masters first), so the RunConfig's saver is switched off.
    `predict` is the PREDICT step (t2tcli.decode.tf_predict builds decoding Estimators);
    only training and evaluation graphs hold XLA functions (the fused loss and norms), so
    only their Estimators spend the first XLA compile's log lines.
    """
    if config.use_tpu != (tpu is not None):
        raise ValueError("a TPU Estimator needs a ModelConfig built with use_tpu=True, and only it does")
    train = train or TrainSettings()
    hparams = config.hparams
    model_fn = make_model_fn(config, model_dir, train, predict=predict)
    run = {
        "model_dir": model_dir,
        "save_checkpoints_steps": None,
        "save_checkpoints_secs": None,
        "log_step_count_steps": None,
        "save_summary_steps": train.log_every_steps,
        "tf_random_seed": train.random_seed,
    }
    if tpu is None:
        if predict is None and gin_bindings.uses_xla(config):
            xla_logs.spend_first_compile_logs()
        run_config = tf.estimator.RunConfig(
            keep_checkpoint_max=train.keep_checkpoint_max, session_config=session_config(config), **run
        )
        return tf.estimator.Estimator(model_fn=model_fn, config=run_config, params=dict(params or {}))
    if tpu.tpu_topology:
        meshlib.check_tpu(config.mesh, tpu.tpu_topology)
    run_config = tpu_config_lib.RunConfig(
        cluster=tpu_resolver(tpu),
        tpu_config=tpu_config_lib.TPUConfig(
            num_shards=config.mesh.size,
            iterations_per_loop=tpu.iterations_per_loop,
            per_host_input_for_training=tpu_config_lib.InputPipelineConfig.BROADCAST,
        ),
        **run,
    )
    return tpu_estimator.TPUEstimator(
        model_fn=model_fn,
        config=run_config,
        use_tpu=True,
        train_batch_size=hparams.batch_size,
        eval_batch_size=hparams.batch_size,
        predict_batch_size=hparams.batch_size,
        params=dict(params or {}),
    )


def write_initial_checkpoint(estimator: tf.estimator.Estimator, config: ModelConfig) -> None:
    """Saves the model as training would before its first step: variables initialised (from
    the init checkpoint when there is one), optimizer slots included, as step 0.

    This is `t2t-train --train_steps=0`: a model_dir that eval, decode and export use, and
    that a later t2t-train resumes, without a step of training.
    """
    with tf.Graph().as_default():
        if estimator.config.tf_random_seed is not None:
            tf1.set_random_seed(estimator.config.tf_random_seed)  # as Estimator.train seeds its graph
        hp = config.hparams
        batch = inputs.batch_size(hp)
        features = {
            "inputs": tf.zeros([batch, int(hp.inputs_length)], tf.int32),
            "targets": tf.zeros([batch, int(hp.targets_length)], tf.int32),
        }
        spec = estimator.model_fn(features, None, ModeKeys.TRAIN, estimator.config)
        session = tf1.ConfigProto()
        session.CopyFrom(estimator.config.session_config)
        with tf1.train.MonitoredTrainingSession(
            scaffold=spec.scaffold, chief_only_hooks=spec.training_chief_hooks, config=session
        ):
            pass  # the checkpoint saver hook saves step 0 once the session is made
