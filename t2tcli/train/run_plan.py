"""What a training run will be, worked out and checked before anything is written.

The flags, the model_dir's records (a run to resume), the data_dir's vocabulary and
shards and a pretrained model all bear on it; `plan` reads them once and returns the
run's `RunPlan` (its model config among it), so a run that fails a check leaves no
model_dir behind and an existing one unchanged. `TrainConfig` holds only what the user
asked for; everything worked out from it is in the plan.

Imports: core, io, data, model, interop and train (estimator, init_checkpoint).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from absl import logging

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data import layout
from t2tcli.data.input import inputs
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.interop import hf_t5
from t2tcli.io import fs
from t2tcli.model import checkpoints, run_records
from t2tcli.model import config as model_config
from t2tcli.model import mesh as meshlib
from t2tcli.train import estimator as estimator_lib
from t2tcli.train import init_checkpoint

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


@dataclasses.dataclass(frozen=True, eq=False)
class RunPlan:
    """A checked run: the model it trains and where it starts from."""

    config: model_config.ModelConfig
    hparams_set: str
    vocabulary_proto: bytes
    step: int  # the model_dir's latest checkpoint step (0: none)
    pretrained: hf_t5.HfModel | None  # a Hugging Face --init_checkpoint
    pretrained_values: dict[str, Any] | None  # its weights as the model's variables, for a new run

    def done(self, train_steps: int, model_dir: str) -> bool:
        """Whether model_dir already holds a checkpoint at train_steps or later."""
        return self.step >= train_steps and bool(self.step or tf.train.latest_checkpoint(model_dir))


def plan(cfg: TrainConfig) -> RunPlan:
    """The run `cfg` asks for, every check made; nothing is written."""
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
        hparams_set, hp = _resumed_hparams(cfg, info, recorded)
    elif cfg.hparams_set:  # names and values checked before the data is looked at
        hparams_set, hp = resolve_hparams(cfg)
    proto = _run_vocabulary(cfg, pretrained)
    vocab_size = len(_pieces(proto))
    if not resumed and not cfg.hparams_set:
        hparams_set, hp = resolve_hparams(cfg, pretrained, vocab_size)
    config = model_config.build(hp, vocab_size, use_tpu=bool(cfg.tpu))
    meshlib.check_batch(config.mesh, inputs.batch_size(hp))
    if cfg.tpu and cfg.tpu_topology:
        meshlib.check_tpu(config.mesh, cfg.tpu_topology)
    if cfg.problem and cfg.train_steps:
        splits = ("train", "dev") if cfg.schedule == "train_and_evaluate" else ("train",)
        inputs.check_ready(cfg.data_dir, cfg.problem, hp, splits)
    if cfg.tpu:
        estimator_lib.tpu_resolver(tpu_settings(cfg))
    step = checkpoints.latest_step(cfg.model_dir)
    if not resumed:
        warn_short_warmup(hp, cfg.train_steps)
    pretrained_values = init_checkpoint.check(cfg.init_checkpoint, pretrained, hp, vocab_size, step)
    return RunPlan(config, hparams_set, proto, step, pretrained, pretrained_values)


def _apply_flags(cfg: TrainConfig, hp: HParams) -> HParams:
    """--hparams overrides, then --mesh_shape / --layout."""
    hp.parse(cfg.hparams)
    if cfg.mesh_shape is not None:
        hp.mesh_shape = cfg.mesh_shape
    if cfg.layout is not None:
        hp.layout = cfg.layout
    return hp


def resolve_hparams(
    cfg: TrainConfig, pretrained: hf_t5.HfModel | None = None, vocab_size: int = 0
) -> tuple[str, HParams]:
    """A new run's hparams set and hparams: the set (or, for a Hugging Face --init_checkpoint
    without --hparams_set, the set matching its config) plus the flags' overrides."""
    if cfg.hparams_set:
        name, hp = cfg.hparams_set, registry.hparams(cfg.hparams_set)
    elif pretrained is not None:
        name, hp = hf_t5.hparams_for(pretrained, vocab_size)
        logging.info("hparams set %s, as %s's config.json describes", name, pretrained.path)
    else:
        raise UserError("--hparams_set is required; run with --registry_help to list them")
    return name, _apply_flags(cfg, hp)


def _resumed_hparams(cfg: TrainConfig, info: run_records.RunInfo, recorded: HParams) -> tuple[str, HParams]:
    """A model_dir's recorded hparams set and hparams; flags that would change them are an error."""
    if cfg.hparams_set and cfg.hparams_set != info.hparams_set:
        raise UserError(
            f"--model_dir={cfg.model_dir} holds a run of hparams set '{info.hparams_set}', not '{cfg.hparams_set}'; "
            "use a new --model_dir to train with it"
        )
    wanted = _apply_flags(cfg, recorded.copy())
    # The activation dtype is how this machine computes, not what the weights are
    # (variables stay float32): a model_dir recorded as bfloat16 may resume as auto.
    changed = sorted(k for k in wanted if wanted.get(k) != recorded.get(k) and k not in _PER_RUN_HPARAMS)
    if changed:
        raise UserError(
            f"--model_dir={cfg.model_dir} was trained with different hparams ({', '.join(changed)}); "
            "use a new --model_dir to train with these"
        )
    return info.hparams_set, wanted


def _pieces(proto: bytes) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _run_vocabulary(cfg: TrainConfig, pretrained: hf_t5.HfModel | None) -> bytes:
    """The vocabulary this run trains with, checked against the pretrained model's and the
    model_dir's: ids that mean other words would silently ruin a model."""
    if cfg.problem:
        path = layout.training_vocab_file(cfg.data_dir, cfg.problem)
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


def tpu_settings(cfg: TrainConfig) -> estimator_lib.TPUSettings | None:
    if not cfg.tpu:
        return None
    return estimator_lib.TPUSettings(
        tpu=cfg.tpu,
        tpu_topology=cfg.tpu_topology,
        iterations_per_loop=cfg.iterations_per_loop,
        zone=cfg.tpu_zone or None,
        gcp_project=cfg.gcp_project or None,
    )
