"""t2t-datagen: raw data -> sharded TFRecords, vocabulary and meta file."""

from __future__ import annotations

from absl import flags

from t2tcli import registry
from t2tcli.cli import common, scratch
from t2tcli.cli.flags import FLAGS, show_progress
from t2tcli.errors import UserError
from t2tcli.io import preflight

flags.DEFINE_boolean("overwrite", False, "Regenerate outputs even when complete ones exist.")
flags.DEFINE_string(
    "tfds_data_dir",
    None,
    "Directory of prepared TensorFlow Datasets (default: $TFDS_DATA_DIR or ~/tensorflow_datasets).",
)
flags.DEFINE_integer("num_shards", None, "Number of train shards (default: the problem's).")
flags.DEFINE_integer("chunk_rows", 20_000, "Records read, preprocessed and encoded per batch; bounds memory.")
flags.DEFINE_string(
    "vocab_from",
    None,
    "Use this vocabulary instead of the problem's: a SentencePiece .model file, or a Hugging Face T5 "
    "directory (its spiece.model and <extra_id_N> sentinels), to fine-tune that pretrained model.",
)
flags.DEFINE_integer(
    "vocab_extra_ids",
    None,
    "With --vocab_from=FILE.model: append this many T5 sentinels <extra_id_N> (100 for T5's released "
    "sentencepiece.model, to fit its checkpoints' 32,128 rows). Default: the problem's extra_ids.",
)
flags.DEFINE_list(
    "leave_out_dev_of",
    [],
    "PROBLEM[,PROBLEM...]: a self-supervised problem's text leaves out every text of these problems' dev and test "
    "splits (compared whole, whitespace collapsed), so a model pretrained on it has not seen what it is later "
    "evaluated on. They are read with the same --tmp_dir.",
)
flags.DEFINE_string(
    "beam_runner",
    None,
    "Run as an Apache Beam pipeline on this runner (DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, "
    "PortableRunner; FnApiRunner or InProcess: in this process). Writes the same files as the local run.",
)
flags.DEFINE_string(
    "beam_options",
    "",
    'Options for the Beam runner, as on its command line, e.g. "--project=P --region=R '
    "--temp_location=gs://B/tmp --num_workers=8\" (handed to Beam's PipelineOptions as they are).",
)
flags.DEFINE_boolean(
    "dry_run", False, "With --beam_runner: build and check the pipeline, print its steps; run nothing."
)


def main() -> None:
    common.require("problem", "data_dir")
    if FLAGS.num_shards is not None and FLAGS.num_shards < 1:
        raise UserError(f"--num_shards={FLAGS.num_shards}: must be at least 1")
    if FLAGS.chunk_rows < 1:
        raise UserError(f"--chunk_rows={FLAGS.chunk_rows}: must be at least 1")
    if FLAGS.vocab_extra_ids is not None and (FLAGS.vocab_extra_ids < 0 or not FLAGS.vocab_from):
        raise UserError("--vocab_extra_ids takes a count of 0 or more, with --vocab_from")
    if not FLAGS.dry_run:  # a dry run builds the job offline, touching no store
        preflight.check_output_dir(FLAGS.data_dir, "data_dir")
    problem = registry.problem(FLAGS.problem)
    from t2tcli.data.datagen import run as datagen

    options = datagen.Options(
        data_dir=FLAGS.data_dir,
        tmp_dir=scratch.raw_dir_for(problem, FLAGS.tmp_dir),
        overwrite=FLAGS.overwrite,
        tfds_data_dir=FLAGS.tfds_data_dir,
        num_train_shards=FLAGS.num_shards,
        chunk_rows=FLAGS.chunk_rows,
        progress=show_progress(),
        vocab_from=FLAGS.vocab_from,
        vocab_extra_ids=FLAGS.vocab_extra_ids,
        leave_out_dev_of=tuple(FLAGS.leave_out_dev_of),
    )
    if FLAGS.beam_runner:
        from t2tcli.data.datagen import beam_runner

        lines = beam_runner.generate(
            problem, options, FLAGS.beam_runner, FLAGS.beam_options, FLAGS.usr_dir, FLAGS.dry_run
        )
    elif FLAGS.dry_run or FLAGS.beam_options:
        raise UserError(f"--{'dry_run' if FLAGS.dry_run else 'beam_options'} needs --beam_runner")
    else:
        lines = datagen.generate(problem, options)
    for line in lines:
        print(line, flush=True)


def run() -> None:
    common.run(main)
