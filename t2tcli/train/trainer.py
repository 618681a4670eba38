"""A training run: resolve hparams, record the run in model_dir, train (and evaluate).

Everything eval, decode and export need later is written to model_dir before the first
step, so they need only `--model_dir`. A model_dir that already holds a run resumes it
with its recorded hparams (a killed run loses nothing but the steps since its last
checkpoint); one that already reached `--train_steps` is left alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
from typing import Any

from absl import logging

from t2tcli import interrupts, registry
from t2tcli.compat import tf
from t2tcli.data import layout
from t2tcli.data.input import inputs
from t2tcli.data.vocabulary.vocab import Vocabulary
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.interop import hf_t5
from t2tcli.io import atomic, fs, lock
from t2tcli.model import activation_dtype, checkpoints, graph, run_records
from t2tcli.model import mesh as meshlib
from t2tcli.train import estimator as estimator_lib
from t2tcli.train import init_checkpoint, model_fn

SCHEDULES = ("train", "train_and_evaluate")
# hparams a resumed run may change.
_PER_RUN_HPARAMS = ("activation_dtype",)


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
    save_checkpoints_secs: int = 0
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


def _apply_flags(cfg: TrainConfig, hp: HParams) -> HParams:
    """--hparams overrides, then --mesh_shape / --layout."""
    hp.parse(cfg.hparams)
    if cfg.mesh_shape is not None:
        hp.mesh_shape = cfg.mesh_shape
    if cfg.layout is not None:
        hp.layout = cfg.layout
    return hp


def resolve_hparams(cfg: TrainConfig, pretrained: hf_t5.HfModel | None = None, vocab_size: int = 0) -> HParams:
    """A new run's hparams: the set (or, for a Hugging Face --init_checkpoint without
    --hparams_set, the set matching its config) plus the flags' overrides."""
    if cfg.hparams_set:
        hp = registry.hparams(cfg.hparams_set)
    elif pretrained is not None:
        cfg.hparams_set, hp = hf_t5.hparams_for(pretrained, vocab_size)
        logging.info("hparams set %s, as %s's config.json describes", cfg.hparams_set, pretrained.path)
    else:
        raise UserError("--hparams_set is required; run with --registry_help to list them")
    return _apply_flags(cfg, hp)


def _resumed_hparams(cfg: TrainConfig, info: run_records.RunInfo, recorded: HParams) -> HParams:
    """A model_dir's recorded hparams; flags that would change them are an error."""
    if cfg.hparams_set and cfg.hparams_set != info.hparams_set:
        raise UserError(
            f"--model_dir={cfg.model_dir} holds a run of hparams set '{info.hparams_set}', not '{cfg.hparams_set}'; "
            "use a new --model_dir to train with it"
        )
    cfg.hparams_set = info.hparams_set
    wanted = _apply_flags(cfg, recorded.copy())
    # The activation dtype is how this machine computes, not what the weights are
    # (variables stay float32): a model_dir recorded as bfloat16 may resume as auto.
    changed = sorted(k for k in wanted if wanted.get(k) != recorded.get(k) and k not in _PER_RUN_HPARAMS)
    if changed:
        raise UserError(
            f"--model_dir={cfg.model_dir} was trained with different hparams ({', '.join(changed)}); "
            "use a new --model_dir to train with these"
        )
    return wanted


def vocabulary(data_dir: str, problem_name: str) -> tuple[str, int]:
    """(vocabulary path, vocabulary size) of the problem (or of its first component)."""
    path = layout.vocab_file(data_dir, problem_name)
    # The size comes from the vocabulary itself, as eval and decode (which have only the
    # copy in model_dir) compute it.
    return path, Vocabulary(path).vocab_size


def _pieces(proto: bytes) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _run_vocabulary(cfg: TrainConfig, pretrained: hf_t5.HfModel | None) -> bytes:
    """The vocabulary this run trains with, checked against the pretrained model's and the
    model_dir's: ids that mean other words would silently ruin a model."""
    if cfg.problem:
        path, _ = vocabulary(cfg.data_dir, cfg.problem)
        layout.data_files(cfg.data_dir, registry.problem(cfg.problem).components()[0][0].name, "train")
        proto = fs.read_bytes(path)
        if pretrained is not None and _pieces(proto) != _pieces(pretrained.vocabulary_proto()):
            raise UserError(
                f"the vocabulary of --data_dir ({path}) is not the one of --init_checkpoint={pretrained.path}; "
                f"generate the data with it: t2t-datagen --problem={cfg.problem} --vocab_from={pretrained.path} "
                f"--data_dir=NEW_DIR"
            )
    elif pretrained is not None and cfg.train_steps == 0:
        proto, path = pretrained.vocabulary_proto(), os.path.join(pretrained.path, hf_t5.SPIECE)
    else:
        raise UserError(
            "--problem is required (without it, t2t-train only writes a Hugging Face model's weights as step 0: "
            "--init_checkpoint=HF_DIR --train_steps=0)"
        )
    recorded = os.path.join(cfg.model_dir, run_records.VOCAB_FILE)
    if fs.exists(recorded):
        same = fs.read_bytes(recorded) == proto
        if not same:
            raise UserError(
                f"--model_dir={cfg.model_dir} was trained with the vocabulary {recorded}, and {path} differs from it; "
                "use the data_dir it was trained on, or a new --model_dir"
            )
    return proto


def run(cfg: TrainConfig) -> int:
    """Trains to cfg.train_steps; returns the final global step.

    Everything is checked before anything is written: a run that fails its checks
    leaves no model_dir behind, and an existing one unchanged.
    """
    if cfg.schedule not in SCHEDULES:
        raise UserError(f"--schedule={cfg.schedule}: use one of {', '.join(SCHEDULES)}")
    if cfg.train_steps < 0:
        raise UserError("--train_steps must be 0 (write the initial checkpoint only) or more")
    pretrained = init_checkpoint.pretrained(cfg.init_checkpoint)
    resumed = run_records.exists(cfg.model_dir)
    if resumed:
        info, recorded, _ = run_records.load(cfg.model_dir)
        if info.problem and info.problem != cfg.problem:
            raise UserError(
                f"--model_dir={cfg.model_dir} holds a run of problem '{info.problem}', not '{cfg.problem}'; "
                "use a new --model_dir (or --init_checkpoint to fine-tune from it)"
            )
        hp = _resumed_hparams(cfg, info, recorded)
    elif cfg.hparams_set:  # names and values checked before the data is looked at
        hp = resolve_hparams(cfg)
    proto = _run_vocabulary(cfg, pretrained)
    vocab_size = len(_pieces(proto))
    if not resumed and not cfg.hparams_set:
        hp = resolve_hparams(cfg, pretrained, vocab_size)
    spec = meshlib.spec_from_hparams(hp)
    meshlib.check_batch(spec, inputs.batch_size(hp))
    if cfg.tpu and cfg.tpu_topology:
        meshlib.check_tpu(spec, cfg.tpu_topology)
    graph.validate(hp, vocab_size, use_tpu=bool(cfg.tpu))
    if cfg.problem and cfg.train_steps:
        splits = ("train", "dev") if cfg.schedule == "train_and_evaluate" else ("train",)
        inputs.check_ready(cfg.data_dir, cfg.problem, hp, splits)
    if cfg.tpu:
        estimator_lib.tpu_resolver(_tpu_settings(cfg))
    step = checkpoints.latest_step(cfg.model_dir)
    if not resumed:
        warn_short_warmup(hp, cfg.train_steps)
    pretrained_values = init_checkpoint.check(cfg.init_checkpoint, pretrained, hp, vocab_size, step)

    if step >= cfg.train_steps and (step or tf.train.latest_checkpoint(cfg.model_dir)):
        logging.info(
            "%s is already trained to step %d (--train_steps=%d): nothing to do", cfg.model_dir, step, cfg.train_steps
        )
        print(f"already trained to step {step} (--train_steps={cfg.train_steps}); nothing to do", flush=True)
        return step
    if step:
        logging.info("resuming %s from step %d", cfg.model_dir, step)

    info = run_records.RunInfo(
        problem=cfg.problem or "",
        hparams_set=cfg.hparams_set,
        data_dir=os.path.abspath(cfg.data_dir) if cfg.data_dir and not fs.is_remote(cfg.data_dir) else cfg.data_dir,
        usr_dirs=run_records.absolute_usr_dirs(cfg.usr_dirs),
        flags=cfg.flags,
        activation_dtype=activation_dtype.resolve(hp.activation_dtype, use_tpu=bool(cfg.tpu)),
    )
    writes = _writes_checkpoints()
    with lock.hold(cfg.model_dir, "a training run") if writes else contextlib.nullcontext():
        if writes:
            _remove_partial_saves(cfg.model_dir)
        run_records.save(cfg.model_dir, info, hp, proto)
        logging.info("hparams: %s", json.dumps(hp.values(), sort_keys=True))
        try:
            return _train(cfg, hp, vocab_size, pretrained, pretrained_values, step)
        except tf.errors.OpError as exc:
            if not atomic.is_disk_full(exc):
                raise
            if writes:
                _remove_partial_saves(cfg.model_dir)
            raise UserError(
                f"--model_dir={cfg.model_dir}: no space left on device while training; free some and run the same "
                f"command to resume from step {checkpoints.latest_step(cfg.model_dir)}"
            ) from None


def warn_short_warmup(hp: HParams, train_steps: int) -> str | None:
    """Logs (and returns) a one-line warning when the run ends before its warm-up does: its
    learning rate would never reach the peak the hparams set (a set made for long runs)."""
    warmup = int(hp.warmup_steps)
    if not 0 < train_steps < warmup:
        return None
    suggested = max(1, train_steps // 10)
    message = (
        f"warmup_steps={warmup} is more than --train_steps={train_steps}: the learning rate climbs for the whole "
        f"run and ends at {train_steps / warmup:.0%} of learning_rate={hp.learning_rate}; for a run this short "
        f"set --hparams=warmup_steps={suggested} (a tenth of it) or so"
    )
    logging.warning("%s", message)
    return message


def _tpu_settings(cfg: TrainConfig) -> estimator_lib.TPUSettings | None:
    if not cfg.tpu:
        return None
    return estimator_lib.TPUSettings(
        tpu=cfg.tpu,
        tpu_topology=cfg.tpu_topology,
        iterations_per_loop=cfg.iterations_per_loop,
        zone=cfg.tpu_zone or None,
        gcp_project=cfg.gcp_project or None,
    )


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


def _train(
    cfg: TrainConfig,
    hp: HParams,
    vocab_size: int,
    pretrained: hf_t5.HfModel | None,
    pretrained_values: dict[str, Any] | None,
    step: int,
) -> int:
    """Trains (or writes step 0) once the run is recorded; a stop signal saves the step reached."""
    converted = None
    try:
        init, label = cfg.init_checkpoint, ""
        if pretrained_values is not None:
            # Inside model_dir, which a TPU's workers read: on GCS when training runs there.
            converted = fs.mkdtemp(cfg.model_dir, ".pretrained.")
            init, label = f"{converted}/model.ckpt", f"the Hugging Face model {pretrained.path}"
            checkpoints.write_checkpoint(pretrained_values, init)
            del pretrained_values
        elif pretrained is not None or step or tf.train.latest_checkpoint(cfg.model_dir):
            init = ""  # resuming: the model_dir's checkpoint holds the weights
        elif init:
            init = init_checkpoint.checkpoint_prefix(init)
        estimator = estimator_lib.build_estimator(
            cfg.model_dir,
            hp,
            vocab_size,
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
            tpu=_tpu_settings(cfg),
        )
        if cfg.train_steps == 0:
            estimator_lib.write_initial_checkpoint(estimator, hp)
            logging.info("wrote step 0 to %s", cfg.model_dir)
            return 0
        inputs.log_truncation(cfg.data_dir, cfg.problem, "train", hp)
        train_fn = inputs.input_fn(cfg.data_dir, cfg.problem, "train", hp, training=True, seed=cfg.random_seed)
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
