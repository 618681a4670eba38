"""A training run: plan it, record it in model_dir, train (and evaluate).

Everything eval, decode and export need later is written to model_dir before the first
step, so they need only `--model_dir`. A model_dir that already holds a run resumes it
with its recorded hparams (a killed run loses nothing but the steps since its last
checkpoint); one that already reached `--train_steps` is left alone. What the run is
comes from t2tcli.train.run_plan, its steps from t2tcli.train.loop.

Imports: core, io, model and train.
"""

from __future__ import annotations

import contextlib
import json
import os

from absl import logging

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.io import atomic, fs, lock
from t2tcli.model import checkpoints, run_records
from t2tcli.train import loop, run_plan
from t2tcli.train.run_plan import SCHEDULES, TrainConfig

__all__ = ["SCHEDULES", "TrainConfig", "run"]


def run(cfg: TrainConfig) -> int:
    """Trains to cfg.train_steps; returns the final global step.

    Everything is checked before anything is written: a run that fails its checks
    leaves no model_dir behind, and an existing one unchanged.
    """
    plan = run_plan.plan(cfg)
    if plan.done(cfg.train_steps, cfg.model_dir):
        logging.info(
            "%s is already trained to step %d (--train_steps=%d): nothing to do",
            cfg.model_dir,
            plan.step,
            cfg.train_steps,
        )
        print(f"already trained to step {plan.step} (--train_steps={cfg.train_steps}); nothing to do", flush=True)
        return plan.step
    if plan.step:
        logging.info("resuming %s from step %d", cfg.model_dir, plan.step)
    hp = plan.config.hparams
    info = run_records.RunInfo(
        problem=cfg.problem or "",
        hparams_set=plan.hparams_set,
        data_dir=os.path.abspath(cfg.data_dir) if cfg.data_dir and not fs.is_remote(cfg.data_dir) else cfg.data_dir,
        usr_dirs=run_records.absolute_usr_dirs(cfg.usr_dirs),
        flags=cfg.flags,
        activation_dtype=plan.config.activation_dtype,
    )
    writes = _writes_checkpoints()
    with lock.hold(cfg.model_dir, "a training run") if writes else contextlib.nullcontext():
        if writes:
            _remove_partial_saves(cfg.model_dir)
        run_records.save(cfg.model_dir, info, hp, plan.vocabulary_proto)
        logging.info("hparams: %s", json.dumps(hp.values(), sort_keys=True))
        try:
            return loop.train(cfg, plan)
        except tf.errors.OpError as exc:
            if not atomic.is_disk_full(exc):
                raise
            if writes:
                _remove_partial_saves(cfg.model_dir)
            raise UserError(
                f"--model_dir={cfg.model_dir}: no space left on device while training; free some and run the same "
                f"command to resume from step {checkpoints.latest_step(cfg.model_dir)}"
            ) from None


def _writes_checkpoints() -> bool:
    """Whether this task writes the model_dir: the only one, or a cluster's chief (its
    workers and parameter servers share the chief's model_dir and run)."""
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return not task or task.get("type") in ("chief", "master")


def _remove_partial_saves(model_dir: str) -> None:
    """Removes what a save cut short left: a checkpoint's `_temp` shards directory, a
    half-written graph file. Only the lock holder calls it, so no save is in progress."""
    for pattern in ("*.ckpt-*_temp*", "graph.pbtxt.tmp*"):
        for path in fs.glob_in(model_dir, pattern):
            logging.info("removing %s, left by an interrupted save", path)
            if fs.isdir(path):
                fs.rmtree(path)
            else:
                fs.remove(path)
