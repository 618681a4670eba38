"""t2t-export: a SavedModel that decodes strings to strings, for serving."""

from __future__ import annotations

from absl import flags, logging

from t2tcli.cli import common

flags.DEFINE_string("export_dir", None, "Base directory; the SavedModel goes into a numbered (timestamp) subdirectory.")
flags.DEFINE_string(
    "checkpoint_path", None, "Checkpoint to export: a path prefix, a step or a directory; default latest."
)
flags.DEFINE_string(
    "decode_hparams",
    "",
    'Decode settings baked into the SavedModel, e.g. "beam_size=4,alpha=0.6,batch_size=8" '
    "(batch_size: the most strings one request may hold).",
)

FLAGS = flags.FLAGS


def main() -> None:
    common.require("model_dir", "export_dir")
    from t2tcli import checkpoints, decoding, export, loading

    model = loading.load(FLAGS.model_dir, FLAGS.problem, FLAGS.hparams)
    decode_hp = decoding.parse_decode_hparams(FLAGS.decode_hparams, model.hparams)
    step, checkpoint = checkpoints.resolve(FLAGS.model_dir, FLAGS.checkpoint_path)
    logging.info("exporting checkpoint %s (step %d)", checkpoint, step)
    params = decoding.estimator_params(decode_hp)
    path = export.export(model, FLAGS.export_dir, checkpoint, params, decode_hp.batch_size)
    print(path, flush=True)


def run() -> None:
    common.run(main)
