"""A training run: resolve hparams, record the run in model_dir, train (and evaluate).

Everything eval, decode and export need later is written to model_dir before the first
step, so they need only `--model_dir`. A model_dir that already holds a run resumes it
with its recorded hparams (a killed run loses nothing but the steps since its last
checkpoint); one that already reached `--train_steps` is left alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

from absl import logging

from t2tcli import inputs, model, numerics, registry, run_info
from t2tcli import mesh as meshlib
from t2tcli import problem as problem_lib
from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.vocab import Vocabulary

SCHEDULES = ("train", "train_and_evaluate")


@dataclasses.dataclass
class TrainConfig:
    problem: str
    hparams_set: str
    data_dir: str
    model_dir: str
    hparams: str = ""
    mesh_shape: str | None = None
    layout: str | None = None
    train_steps: int = 1000
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_steps: int = 100
    schedule: str = "train"
    eval_every_steps: int = 0  # 0: save_checkpoints_steps
    eval_steps: int = 0  # 0: the whole dev split
    init_checkpoint: str = ""
    tpu: str = ""
    tpu_topology: str = ""
    iterations_per_loop: int = 100
    tpu_zone: str = ""
    gcp_project: str = ""
    random_seed: int | None = None
    progress: bool = False
    usr_dirs: list[str] = dataclasses.field(default_factory=list)
    flags: dict[str, Any] = dataclasses.field(default_factory=dict)


def resolve_hparams(cfg: TrainConfig) -> HParams:
    """The set plus --hparams overrides plus --mesh_shape / --layout, validated."""
    hp = registry.hparams(cfg.hparams_set)
    hp.parse(cfg.hparams)
    if cfg.mesh_shape is not None:
        hp.mesh_shape = cfg.mesh_shape
    if cfg.layout is not None:
        hp.layout = cfg.layout
    return hp


def vocabulary(data_dir: str, problem_name: str) -> tuple[str, int]:
    """(vocabulary path, vocabulary size) of the problem (or of its first component)."""
    components = registry.problem(problem_name).components()
    meta = problem_lib.read_meta(data_dir, components[0][0].name)
    if "vocab_file" in meta:
        path = os.path.join(data_dir, meta["vocab_file"])
    else:
        path = problem_lib.vocab_path(data_dir, components[0][0].vocab.name)
    if not os.path.exists(path):
        raise UserError(f"vocabulary {path} not found; run t2t-datagen --problem={problem_name} --data_dir={data_dir}")
    # The size comes from the vocabulary itself, as eval and decode (which have only the
    # copy in model_dir) compute it.
    return path, Vocabulary(path).vocab_size


def latest_step(model_dir: str) -> int:
    path = tf.train.latest_checkpoint(model_dir)
    if not path:
        return 0
    return int(tf.train.load_checkpoint(path).get_tensor("global_step"))


def _check_resume(cfg: TrainConfig, hp: HParams) -> HParams:
    """A model_dir with a recorded run continues with that run's problem and hparams."""
    if not run_info.exists(cfg.model_dir):
        return hp
    info, recorded, _ = run_info.load(cfg.model_dir)
    if info.problem != cfg.problem:
        raise UserError(
            f"--model_dir={cfg.model_dir} holds a run of problem '{info.problem}', not '{cfg.problem}'; "
            "use a new --model_dir (or --init_checkpoint to fine-tune from it)"
        )
    if recorded != hp:
        changed = sorted(k for k in set(recorded) | set(hp) if recorded.get(k) != hp.get(k))
        raise UserError(
            f"--model_dir={cfg.model_dir} was trained with different hparams ({', '.join(changed)}); "
            "use a new --model_dir to train with these"
        )
    return recorded


def run(cfg: TrainConfig) -> int:
    """Trains to cfg.train_steps; returns the final global step."""
    if cfg.schedule not in SCHEDULES:
        raise UserError(f"--schedule={cfg.schedule}: use one of {', '.join(SCHEDULES)}")
    if cfg.train_steps < 1:
        raise UserError("--train_steps must be positive")
    hp = _check_resume(cfg, resolve_hparams(cfg))
    spec = meshlib.spec_from_hparams(hp)
    meshlib.check_batch(spec, inputs.batch_size(hp))
    if cfg.tpu and cfg.tpu_topology:
        meshlib.check_tpu(spec, cfg.tpu_topology)
    if cfg.init_checkpoint and not tf.train.latest_checkpoint(cfg.init_checkpoint):
        if not tf.io.gfile.exists(cfg.init_checkpoint + ".index"):
            raise UserError(f"--init_checkpoint={cfg.init_checkpoint}: no checkpoint there")
    vocab_path, vocab_size = vocabulary(cfg.data_dir, cfg.problem)
    problem_lib.data_files(cfg.data_dir, registry.problem(cfg.problem).components()[0][0].name, "train")
    model.validate(hp, vocab_size, use_tpu=bool(cfg.tpu))

    step = latest_step(cfg.model_dir)
    if step >= cfg.train_steps:
        logging.info(
            "%s is already trained to step %d (--train_steps=%d): nothing to do", cfg.model_dir, step, cfg.train_steps
        )
        print(f"already trained to step {step} (--train_steps={cfg.train_steps}); nothing to do", flush=True)
        return step
    if step:
        logging.info("resuming %s from step %d", cfg.model_dir, step)

    info = run_info.RunInfo(
        problem=cfg.problem,
        hparams_set=cfg.hparams_set,
        data_dir=os.path.abspath(cfg.data_dir),
        usr_dir=",".join(cfg.usr_dirs),
        flags=cfg.flags,
        activation_dtype=numerics.resolve(hp.activation_dtype, use_tpu=bool(cfg.tpu)),
    )
    run_info.save(cfg.model_dir, info, hp, vocab_path)
    logging.info("hparams: %s", json.dumps(hp.values(), sort_keys=True))
    inputs.log_truncation(cfg.data_dir, cfg.problem, "train", hp)

    init = cfg.init_checkpoint
    if init and tf.train.latest_checkpoint(init):
        init = tf.train.latest_checkpoint(init)
    estimator = model.build_estimator(
        cfg.model_dir,
        hp,
        vocab_size,
        train=model.TrainSettings(
            train_steps=cfg.train_steps,
            save_checkpoints_steps=cfg.save_checkpoints_steps,
            keep_checkpoint_max=cfg.keep_checkpoint_max,
            log_every_steps=cfg.log_every_steps,
            init_checkpoint=init or None,
            progress=cfg.progress,
        ),
        tpu=model.TPUSettings(
            tpu=cfg.tpu,
            tpu_topology=cfg.tpu_topology,
            iterations_per_loop=cfg.iterations_per_loop,
            zone=cfg.tpu_zone or None,
            gcp_project=cfg.gcp_project or None,
        )
        if cfg.tpu
        else None,
    )
    train_fn = inputs.input_fn(cfg.data_dir, cfg.problem, "train", hp, training=True, seed=cfg.random_seed)
    if cfg.schedule == "train":
        estimator.train(train_fn, max_steps=cfg.train_steps)
        return latest_step(cfg.model_dir)
    return _train_and_evaluate(cfg, hp, estimator, train_fn, step)


def _train_and_evaluate(cfg: TrainConfig, hp: HParams, estimator: Any, train_fn: Any, step: int) -> int:
    """Alternates training and dev evaluation every `eval_every_steps`.

    Under TF_CONFIG (multi-worker), Estimator's own train_and_evaluate coordinates the
    chief, workers and evaluator instead.
    """
    eval_fn = inputs.input_fn(cfg.data_dir, cfg.problem, "dev", hp, training=False)
    eval_steps = cfg.eval_steps or None
    if os.environ.get("TF_CONFIG"):
        tf.estimator.train_and_evaluate(
            estimator,
            tf.estimator.TrainSpec(train_fn, max_steps=cfg.train_steps),
            tf.estimator.EvalSpec(eval_fn, steps=eval_steps, throttle_secs=0),
        )
        return latest_step(cfg.model_dir)
    every = cfg.eval_every_steps or cfg.save_checkpoints_steps
    target = step
    while target < cfg.train_steps:
        target = min(cfg.train_steps, (target // every + 1) * every)
        estimator.train(train_fn, max_steps=target)
        metrics = estimator.evaluate(eval_fn, steps=eval_steps, name="dev")
        xent = float(metrics.get("xent", metrics["loss"]))
        logging.info(
            "step %d  dev loss %.4f  perplexity %.3f  token accuracy %.4f",
            int(metrics["global_step"]),
            xent,
            math.exp(min(xent, 80.0)),
            float(metrics.get("token_accuracy", float("nan"))),
        )
    return latest_step(cfg.model_dir)
