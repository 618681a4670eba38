"""t2t-train: train a Mesh TensorFlow transformer on a generated problem.

t2t-train --problem=P --hparams_set=H [--hparams=...] --data_dir=D --model_dir=M
"""

from __future__ import annotations

from absl import flags, logging

from t2tcli.cli import common, schedules, scratch
from t2tcli.cli import eval as eval_cli  # its flags serve tensor2tensor's evaluating schedules
from t2tcli.cli.flags import FLAGS, show_progress
from t2tcli.errors import UserError
from t2tcli.io import preflight
from t2tcli.train import trainer

flags.DEFINE_integer(
    "train_steps", 1000, "Train until the global step reaches this; 0 writes the initial weights as step 0."
)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Write a checkpoint every this many steps (and at the end).")
flags.DEFINE_integer("save_checkpoints_secs", 0, "Write a checkpoint every this many seconds instead (0: by steps).")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Keep this many most recent checkpoints.")
flags.DEFINE_integer("log_every_steps", 100, "Log step, loss, learning rate, steps/s and tokens/s this often.")
flags.DEFINE_string(
    "schedule",
    None,
    "tensor2tensor's schedules: train; train_and_evaluate or continuous_train_and_eval (dev loss every "
    "--eval_every_steps); evaluate (= t2t-eval: the latest checkpoint's metrics); continuous_eval (= t2t-eval "
    "--wait: each checkpoint as it is written); test (1 step, then 1 dev batch); T2T's others name the binary that "
    "does their work. Default: t2t-trainer continuous_train_and_eval, as T2T's; t2t-train train, or "
    "train_and_evaluate when --eval_steps or --eval_every_steps is given.",
)
flags.DEFINE_boolean(
    "generate_data", False, "Run t2t-datagen for --problem into --data_dir (raw files from --tmp_dir) first."
)
flags.DEFINE_integer("eval_every_steps", 0, "train_and_evaluate: evaluate this often (0: --save_checkpoints_steps).")
flags.DEFINE_integer(
    "eval_steps",
    0,
    "Batches per dev evaluation, fewer when the split ends first (0: the whole dev split; t2t-trainer's default "
    "is tensor2tensor's 100).",
)
flags.DEFINE_string(
    "init_checkpoint",
    "",
    "Fine-tune from this checkpoint: a mesh-tf / T5 / t2t-train checkpoint (directory or prefix), or a Hugging "
    "Face T5 directory (config.json, model.safetensors, spiece.model; its hparams set is picked from config.json).",
)
flags.DEFINE_string("mesh_shape", None, "Overrides hparam mesh_shape, e.g. model:2,batch:2.")
flags.DEFINE_string("layout", None, "Overrides hparam layout, e.g. batch:batch;d_ff:model;heads:model.")
flags.DEFINE_string("tpu", "", "TPU name or grpc:// address; trains with TPUEstimator + SimdMeshImpl.")
flags.DEFINE_string("tpu_topology", "", "TPU topology (2x2, v3-32...); the mesh must use all its cores.")
flags.DEFINE_integer("iterations_per_loop", 100, "TPU steps per host round trip.")
flags.DEFINE_string("tpu_zone", "", "GCE zone of the TPU (if the resolver cannot infer it).")
flags.DEFINE_string("gcp_project", "", "GCP project of the TPU (if the resolver cannot infer it).")
flags.DEFINE_integer(
    "worker_gpu",
    None,
    "tensor2tensor's GPUs per worker: N > 1 splits each batch over N GPUs (--mesh_shape=batch:N); 0 or 1 "
    "runs on one device, as without it.",
)
flags.DEFINE_integer(
    "random_seed", None, "Seeds initial weights, data order and dropout: a rerun on one machine repeats it."
)

_RECORDED = (
    "problem",
    "hparams_set",
    "hparams",
    "data_dir",
    "model_dir",
    "train_steps",
    "save_checkpoints_steps",
    "save_checkpoints_secs",
    "keep_checkpoint_max",
    "log_every_steps",
    "schedule",
    "eval_every_steps",
    "eval_steps",
    "init_checkpoint",
    "mesh_shape",
    "layout",
    "tpu",
    "tpu_topology",
    "iterations_per_loop",
    "random_seed",
    "usr_dir",
)


def _mesh_shape() -> str | None:
    """--mesh_shape, or the batch split over GPUs that tensor2tensor's --worker_gpu asks for."""
    gpus = FLAGS.worker_gpu
    if gpus is None or gpus <= 1:
        if gpus is not None and gpus < 0:
            raise UserError(f"--worker_gpu={gpus}: a count of GPUs, 0 or more")
        return FLAGS.mesh_shape
    if FLAGS.mesh_shape and FLAGS.mesh_shape != f"batch:{gpus}":
        raise UserError(f"--worker_gpu={gpus} and --mesh_shape={FLAGS.mesh_shape} disagree: give one of them")
    return f"batch:{gpus}"


def _generate_data() -> None:
    """tensor2tensor's --generate_data: t2t-datagen for --problem before training (a complete
    data_dir is left as it is)."""
    common.require("problem", "data_dir")
    from t2tcli import registry
    from t2tcli.data.datagen import run as datagen

    problem = registry.problem(FLAGS.problem)
    preflight.check_output_dir(FLAGS.data_dir, "data_dir")
    options = datagen.Options(
        data_dir=FLAGS.data_dir, tmp_dir=scratch.raw_dir_for(problem, FLAGS.tmp_dir), progress=show_progress()
    )
    for line in datagen.generate(problem, options):
        logging.info("%s", line)


def main() -> None:
    schedule = schedules.resolve(
        FLAGS.schedule,
        common.prog_name(),
        eval_flags_given=bool(FLAGS["eval_steps"].present or FLAGS["eval_every_steps"].present),
    )
    if common.prog_name() == schedules.T2T_TRAINER and not FLAGS["eval_steps"].present:
        FLAGS.eval_steps = schedules.T2T_EVAL_STEPS
    if schedule in schedules.EVALUATING:
        FLAGS.wait = FLAGS.wait or schedule == "continuous_eval"
        eval_cli.main()
        return
    common.require("model_dir")
    if FLAGS.save_checkpoints_secs < 0:
        raise UserError(f"--save_checkpoints_secs={FLAGS.save_checkpoints_secs}: must be 0 or more")
    if FLAGS.eval_steps < 0 or FLAGS.eval_every_steps < 0:
        bad = "eval_steps" if FLAGS.eval_steps < 0 else "eval_every_steps"
        raise UserError(f"--{bad}={FLAGS[bad].value}: must be 0 or more")
    if FLAGS.problem:
        common.require("data_dir")
    if schedule == "test":
        logging.info("--schedule=test: training to step 1, then one dev batch")
        FLAGS.train_steps, FLAGS.eval_steps, FLAGS.eval_every_steps = 1, 1, 1
    if FLAGS.generate_data:
        _generate_data()
    preflight.check_output_dir(FLAGS.model_dir, "model_dir")
    cfg = trainer.TrainConfig(
        problem=FLAGS.problem or "",
        hparams_set=FLAGS.hparams_set or "",
        data_dir=FLAGS.data_dir or "",
        model_dir=FLAGS.model_dir,
        hparams=FLAGS.hparams,
        mesh_shape=_mesh_shape(),
        layout=FLAGS.layout,
        train_steps=FLAGS.train_steps,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        save_checkpoints_secs=FLAGS.save_checkpoints_secs,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        log_every_steps=FLAGS.log_every_steps,
        schedule=schedules.TRAINER[schedule],
        eval_every_steps=FLAGS.eval_every_steps,
        eval_steps=FLAGS.eval_steps,
        init_checkpoint=FLAGS.init_checkpoint,
        tpu=FLAGS.tpu,
        tpu_topology=FLAGS.tpu_topology,
        iterations_per_loop=FLAGS.iterations_per_loop,
        tpu_zone=FLAGS.tpu_zone,
        gcp_project=FLAGS.gcp_project,
        random_seed=FLAGS.random_seed,
        progress=show_progress(),
        usr_dirs=list(FLAGS.usr_dir),
        flags={**{name: FLAGS[name].value for name in _RECORDED}, "schedule": schedule},
    )
    trainer.run(cfg)


def run() -> None:
    common.run(main)
