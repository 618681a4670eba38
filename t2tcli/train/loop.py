"""The steps of a recorded run: the Estimator built for its plan, trained to --train_steps
(evaluating on the dev split between rounds under train_and_evaluate), and a stop signal
turned into a saved checkpoint and an exit status.

Imports: core, io, data, model and train.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from typing import Any

from absl import logging

from t2tcli import interrupts
from t2tcli.compat import tf
from t2tcli.data.input import inputs
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.io import fs
from t2tcli.model import checkpoints
from t2tcli.train import estimator as estimator_lib
from t2tcli.train import init_checkpoint, model_fn
from t2tcli.train.run_plan import RunPlan, TrainConfig, tpu_settings


def train(cfg: TrainConfig, plan: RunPlan) -> int:
    """Trains (or writes step 0) once the run is recorded; a stop signal saves the step reached."""
    config, pretrained, step = plan.config, plan.pretrained, plan.step
    hp = config.hparams
    converted = None
    try:
        init, label = cfg.init_checkpoint, ""
        if plan.pretrained_values is not None:
            # Inside model_dir, which a TPU's workers read: on GCS when training runs there.
            converted = fs.mkdtemp(cfg.model_dir, ".pretrained.")
            init, label = f"{converted}/model.ckpt", f"the Hugging Face model {pretrained.path}"
            checkpoints.write_checkpoint(plan.pretrained_values, init)
        elif pretrained is not None or step or tf.train.latest_checkpoint(cfg.model_dir):
            init = ""  # resuming: the model_dir's checkpoint holds the weights
        elif init:
            init = init_checkpoint.checkpoint_prefix(init)
        estimator = estimator_lib.build_estimator(
            cfg.model_dir,
            config,
            train=model_fn.TrainSettings(
                train_steps=cfg.train_steps,
                save_checkpoints_steps=cfg.save_checkpoints_steps,
                save_checkpoints_secs=cfg.save_checkpoints_secs,
                keep_checkpoint_max=cfg.keep_checkpoint_max,
                log_every_steps=cfg.log_every_steps,
                init_checkpoint=init or None,
                init_checkpoint_label=label,
                progress=cfg.progress,
                random_seed=cfg.random_seed,
            ),
            tpu=tpu_settings(cfg),
        )
        if cfg.train_steps == 0:
            estimator_lib.write_initial_checkpoint(estimator, config)
            logging.info("wrote step 0 to %s", cfg.model_dir)
            return 0
        train_fn = inputs.training_input_fn(cfg.data_dir, cfg.problem, hp, cfg.random_seed)
        stop = interrupts.GracefulStop()
        try:
            with stop.during():
                if cfg.schedule == "train" and not os.environ.get("TF_CONFIG"):
                    estimator.train(train_fn, max_steps=cfg.train_steps, hooks=[stop.hook()])
                else:
                    _train_and_evaluate(cfg, hp, estimator, train_fn, step, stop)
        except tf.errors.DataLossError as exc:  # shards damaged after their sizes were checked
            detail = str(exc.message).strip().splitlines()[0][:200]
            raise UserError(
                f"reading the data in --data_dir={cfg.data_dir} failed ({detail}); "
                f"t2t-datagen --problem={cfg.problem} --data_dir={cfg.data_dir} --overwrite regenerates it"
            ) from None
        reached = checkpoints.latest_step(cfg.model_dir)
        if stop.signum is not None:
            raise interrupts.Interrupted(
                stop.signum,
                f"stopped by {signal.Signals(stop.signum).name} at step {reached}, saved in {cfg.model_dir}; "
                "the same command resumes from there",
            )
        return reached
    finally:
        if converted is not None:
            with contextlib.suppress(OSError):
                fs.rmtree(converted)


def _train_and_evaluate(
    cfg: TrainConfig, hp: HParams, estimator: Any, train_fn: Any, step: int, stop: interrupts.GracefulStop
) -> None:
    """Alternates training and dev evaluation every `eval_every_steps`.

    Under TF_CONFIG (several machines, whatever --schedule says), Estimator's own
    train_and_evaluate runs this task's part: a parameter server serves the variables,
    the chief and each worker train (asynchronously, on the variables the parameter
    servers hold), an evaluator task evaluates each new checkpoint.
    """
    eval_fn = inputs.input_fn(cfg.data_dir, cfg.problem, "dev", hp, training=False)
    eval_steps = cfg.eval_steps or None
    if os.environ.get("TF_CONFIG"):
        tf.estimator.train_and_evaluate(
            estimator,
            tf.estimator.TrainSpec(train_fn, max_steps=cfg.train_steps, hooks=[stop.hook()]),
            tf.estimator.EvalSpec(eval_fn, steps=eval_steps, throttle_secs=0),
        )
        return
    every = cfg.eval_every_steps or cfg.save_checkpoints_steps
    target = step
    while target < cfg.train_steps and stop.signum is None:
        target = min(cfg.train_steps, (target // every + 1) * every)
        estimator.train(train_fn, max_steps=target, hooks=[stop.hook()])
        if stop.signum is not None:
            return
        metrics = estimator.evaluate(eval_fn, steps=eval_steps, name="dev")
        xent = float(metrics.get("xent", metrics["loss"]))
        logging.info(
            "step %d  dev loss %.4f  perplexity %.3f  token accuracy %.4f",
            int(metrics["global_step"]),
            xent,
            math.exp(min(xent, 80.0)),
            float(metrics.get("token_accuracy", float("nan"))),
        )
