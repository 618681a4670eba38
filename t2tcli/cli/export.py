"""t2t-export: a SavedModel that decodes strings to strings, for serving."""

from __future__ import annotations

from absl import flags, logging

from t2tcli.cli import common, recorded_run
from t2tcli.errors import UserError

flags.DEFINE_string(
    "export_dir",
    None,
    "saved_model: base directory, the SavedModel goes into a numbered (timestamp) subdirectory (default: "
    "model_dir/export, where tensor2tensor's exporter puts it); hf: the Hugging Face model directory itself "
    "(new or empty).",
)
flags.DEFINE_enum(
    "export_format",
    "saved_model",
    ["saved_model", "hf"],
    "saved_model: a TensorFlow SavedModel decoding strings to strings (TF Serving); hf: a Hugging Face T5 "
    "directory (config.json, model.safetensors, spiece.model) for transformers and CTranslate2.",
)
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
    common.require("model_dir")
    if not FLAGS.export_dir:
        if FLAGS.export_format != "saved_model":
            raise UserError("--export_dir is required with --export_format=hf")
        FLAGS.export_dir = FLAGS.model_dir.rstrip("/") + "/export"
    from t2tcli.decode import saved_model
    from t2tcli.decode import settings as decode_settings
    from t2tcli.io import preflight
    from t2tcli.model import checkpoints, loading

    preflight.check_output_dir(FLAGS.export_dir, "export_dir")

    model = loading.load(FLAGS.model_dir, FLAGS.problem, FLAGS.hparams, FLAGS.trust_usr_dir)
    recorded_run.warn_if_other_set(FLAGS.hparams_set, model.info, FLAGS.model_dir)
    decode_hp = decode_settings.parse_decode_hparams(FLAGS.decode_hparams, model.hparams, model.vocab.vocab_size)
    decode_settings.refuse_beam_output(decode_hp, "the SavedModel returns the best decode")
    with checkpoints.reading(FLAGS.model_dir, FLAGS.checkpoint_path) as (step, checkpoint, readable):
        logging.info("exporting checkpoint %s (step %d)", checkpoint, step)
        if FLAGS.export_format == "hf":
            from t2tcli.interop import hf_t5

            size = model.vocab.vocab_size
            values = hf_t5.mesh_values_from_checkpoint(readable, model.hparams, size)
            hf_t5.export(values, model.hparams, model.vocab.model_proto, size, FLAGS.export_dir)
            print(FLAGS.export_dir, flush=True)
            return
        path = saved_model.export(model, FLAGS.export_dir, readable, decode_hp, recorded_checkpoint=checkpoint)
    print(path, flush=True)


def run() -> None:
    common.run(main)
