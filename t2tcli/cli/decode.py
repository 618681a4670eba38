"""t2t-decode: decode (or score) a file of lines with a trained model_dir.

Without --decode_from_file it decodes the dev split of the run's problem
(--decode_hparams=num_samples=N: its first N examples). Run as t2t-decoder,
tensor2tensor's name, it writes what T2T's decoder writes: a decode of FILE without
--decode_to_file goes to FILE.<model>.<hparams_set>.<problem>.beam<N>.alpha<A>.decodes,
beam scores with two decimals, and the dev split to --decode_to_file's .decodes,
.targets and .inputs files (logged when no --decode_to_file is given).
"""

from __future__ import annotations

from collections.abc import Iterator

from absl import flags, logging

from t2tcli.cli import common, recorded_run, t2t_decodes
from t2tcli.cli.flags import show_progress
from t2tcli.errors import UserError

flags.DEFINE_string("decode_from_file", None, "Input lines to decode; '-' reads stdin.")
flags.DEFINE_string(
    "decode_to_file",
    "-",
    "One output line per input line; '-' writes stdout. t2t-decoder without it writes tensor2tensor's "
    "<decode_from_file>.<model>.<hparams_set>.<problem>.beam<N>.alpha<A>.decodes.",
)
flags.DEFINE_string(
    "decode_hparams",
    "",
    'Decode settings, e.g. "beam_size=4,alpha=0.6,temperature=0.0,top_k=0,batch_size=64,'
    "max_decode_length=0,max_input_length=0\" (0 lengths: the model's own).",
)
flags.DEFINE_string(
    "checkpoint_path", None, "Checkpoint to use: a path prefix, a step number or a directory; default the latest."
)
flags.DEFINE_boolean(
    "raw_inputs", False, "Feed lines to the model as they are, not formatted as the problem formats them."
)
flags.DEFINE_boolean(
    "decode_interactive",
    False,
    "Read a line from stdin, print its decode at once, until EOF (--decode_from_file=- one line at a time).",
)
flags.DEFINE_string(
    "decode_reference",
    None,
    "Reference translations, a line per input line: once decoded, --decode_to_file's BLEU against them is logged "
    "as t2t-bleu prints it.",
)
flags.DEFINE_integer(
    "decode_shards",
    1,
    "tensor2tensor's sharded decode: with N > 1 this run reads --decode_from_file plus --worker_id as 3 digits "
    "(in.txt003) and writes --decode_to_file with the same suffix.",
)
flags.DEFINE_integer("worker_id", 0, "--decode_shards: which shard this run decodes, 0 to N - 1.")
flags.DEFINE_string(
    "score_file", None, "Lines 'input<TAB>target'; writes the log-likelihood of each target to --decode_to_file."
)

flags.DEFINE_boolean(
    "eval_use_test_set", False, "Without --decode_from_file: decode the test split instead of the dev split."
)

FLAGS = flags.FLAGS
T2T_NAME = "t2t-decoder"


def _take_shard(output_derived: bool) -> None:
    """tensor2tensor's --decode_shards / --worker_id: this run's input and output files
    (an output named after the input takes the input's suffix with its name)."""
    shards, worker = FLAGS.decode_shards, FLAGS.worker_id
    if shards < 1:
        raise UserError(f"--decode_shards={shards}: must be at least 1")
    if shards == 1:
        return
    if not 0 <= worker < shards:
        raise UserError(f"--worker_id={worker}: one of the {shards} shards, 0 to {shards - 1}")
    if FLAGS.decode_from_file in (None, "-") or (FLAGS.decode_to_file == "-" and not output_derived):
        raise UserError("--decode_shards reads and writes files: give --decode_from_file and --decode_to_file")
    FLAGS.decode_from_file += f"{worker:03d}"
    if not output_derived:
        FLAGS.decode_to_file += f"{worker:03d}"


def _check_output(source_flag: str, source: str) -> None:
    from t2tcli.io import atomic, preflight

    if FLAGS.decode_to_file != "-":
        preflight.check_output_file(FLAGS.decode_to_file, "decode_to_file")
        atomic.refuse_inputs(FLAGS.decode_to_file, [(source_flag, source)], "decode_to_file")


def _decodes_name(base: str, model, decode_hp) -> str:
    """T2T's .decodes file name for `base`, with the names this run goes by."""
    return t2t_decodes.decodes_filename(
        base,
        FLAGS.model or t2t_decodes.DEFAULT_MODEL_NAME,
        FLAGS.hparams_set or recorded_run.given_set_name(model.info),
        FLAGS.problem or model.info.problem,
        decode_hp.beam_size,
        decode_hp.alpha,
    )


def _load():
    from t2tcli.decode import settings as decode_settings
    from t2tcli.model import loading

    model = loading.load(FLAGS.model_dir, FLAGS.problem, FLAGS.hparams, FLAGS.trust_usr_dir)
    recorded_run.warn_if_other_set(FLAGS.hparams_set, model.info, FLAGS.model_dir)
    return model, decode_settings.parse_decode_hparams(FLAGS.decode_hparams, model.hparams, model.vocab.vocab_size)


def main() -> None:
    common.require("model_dir")
    t2t_named = common.prog_name() == T2T_NAME
    if FLAGS.decode_interactive:
        if FLAGS.decode_from_file not in (None, "-") or FLAGS.score_file or FLAGS.decode_to_file != "-":
            raise UserError("--decode_interactive reads stdin and writes stdout: drop the file flags")
        FLAGS.decode_from_file = "-"
    if FLAGS.decode_from_file and FLAGS.score_file:
        raise UserError("pass exactly one of --decode_from_file and --score_file")
    if not FLAGS.decode_from_file and not FLAGS.score_file:
        _decode_split(t2t_named)
        return
    derived = (
        t2t_named and not FLAGS["decode_to_file"].present and FLAGS.decode_from_file not in (None, "-")
    )  # T2T's <input>...decodes, named once the run's settings are known
    _take_shard(derived)
    if FLAGS.decode_reference and ((FLAGS.decode_to_file == "-" and not derived) or FLAGS.score_file):
        raise UserError("--decode_reference scores a decode written to a file: give --decode_to_file=FILE")
    from t2tcli.decode import engines, memory_bound
    from t2tcli.decode import lines as decode_lines
    from t2tcli.decode import settings as decode_settings
    from t2tcli.io import text_files
    from t2tcli.model import checkpoints, loading

    source_flag = "score_file" if FLAGS.score_file else "decode_from_file"
    source = FLAGS.score_file or FLAGS.decode_from_file
    if not derived:
        _check_output(source_flag, source)

    model, decode_hp = _load()
    if derived:
        FLAGS.decode_to_file = _decodes_name(FLAGS.decode_from_file, model, decode_hp)
        logging.info("writing the decodes to %s", FLAGS.decode_to_file)
        _check_output(source_flag, source)
    delimiter = text_files.unescape(decode_hp.delimiter)

    def records(lines: Iterator[str]) -> Iterator[str]:
        return decode_lines.records(lines, delimiter, decode_hp.num_samples)

    job = decode_lines.LineJob(
        encode=model.vocab.encode,
        decode=loading.text_decoder(model.vocab),
        inputs_length=decode_hp.max_input_length or model.hparams.inputs_length,
        targets_length=decode_hp.max_decode_length or model.hparams.targets_length,
        batch_size=1 if FLAGS.decode_interactive else decode_hp.batch_size,
        format_input=decode_lines.input_formatter(model.problem, FLAGS.raw_inputs),
        source_name=source if source != "-" else "<stdin>",
        interactive=FLAGS.decode_interactive,
        beam_scores=decode_hp.write_beam_scores,
        delimiter=delimiter,
        batch_multiple=decode_settings.batch_split(model.config),
    )
    if t2t_named:
        job.score_format = t2t_decodes.SCORE_FORMAT if FLAGS.score_file else t2t_decodes.BEAM_SCORE_FORMAT
    job.max_chars = model.vocab.chars_for(max(job.inputs_length, job.targets_length))
    if text_files.rereadable(source) and not decode_hp.max_input_length:
        # A regular file can be read twice: size the static input length to its longest
        # line. A pipe, FIFO or stdin is read once, padded to the model's length.
        longest_inputs, longest_targets = decode_lines.scan_lengths(
            records(text_files.read_lines(source, source_flag)), job, bool(FLAGS.score_file)
        )
        job.inputs_length = min(job.inputs_length, decode_lines.bucket(longest_inputs))
        if FLAGS.score_file:
            job.targets_length = min(job.targets_length, decode_lines.bucket(longest_targets))
        logging.info("inputs padded to %d tokens (longest line: %d)", job.inputs_length, longest_inputs)
    if not FLAGS.score_file:
        in_flight = engines.batches_in_flight(model, decode_hp, read_ahead=not FLAGS.decode_interactive)
        job.check_batch = lambda rows: memory_bound.check(
            decode_hp, model.hparams, rows, job.inputs_length, in_flight=in_flight
        )
    with checkpoints.reading(FLAGS.model_dir, FLAGS.checkpoint_path) as (step, checkpoint, readable):
        logging.info(
            "%s with checkpoint %s (step %d): %s",
            "scoring" if FLAGS.score_file else "decoding",
            checkpoint,
            step,
            ", ".join(f"{k}={v}" for k, v in decode_hp.engine_fields().items()),
        )
        # Decoded text needs no scores; skipping them saves a teacher-forced pass per batch.
        settings = decode_hp.replace(compute_scores=bool(FLAGS.score_file) or decode_hp.write_beam_scores)
        predict = engines.predictor(
            model, settings, readable, scoring=bool(FLAGS.score_file), read_ahead=not FLAGS.decode_interactive
        )
        lines = records(text_files.read_lines(source, source_flag))
        with text_files.atomic_output(FLAGS.decode_to_file, "decode_to_file") as out, progress_bar(source) as bar:
            stats = decode_lines.run(lines, out, job, predict, scoring=bool(FLAGS.score_file), progress=bar)
    logging.info("%s", stats.summary())
    if FLAGS.decode_reference:
        from t2tcli.evaluate import metrics

        translation = list(text_files.read_lines(FLAGS.decode_to_file, "decode_to_file"))
        reference = list(text_files.read_lines(FLAGS.decode_reference, "decode_reference"))
        for line in metrics.t2t_bleu_lines(translation, reference):
            logging.info("%s", line)


def _decode_split(t2t_named: bool) -> None:
    """No input file: the dev (or test) split of the run's problem, as T2T's decoder decodes it."""
    if FLAGS.decode_shards > 1:
        raise UserError("--decode_shards splits a --decode_from_file; without one the split is decoded whole")
    if FLAGS.decode_reference:
        raise UserError("--decode_reference scores a --decode_from_file decode; a split is decoded beside its targets")
    from t2tcli.decode import settings as decode_settings
    from t2tcli.io import text_files

    split = "test" if FLAGS.eval_use_test_set else "dev"
    model, decode_hp = _load()
    decode_settings.refuse_beam_output(decode_hp, f"decoding the {split} split writes the best decode")
    to_files = FLAGS.decode_to_file != "-"
    paths = {}
    if to_files:
        decodes = _decodes_name(FLAGS.decode_to_file, model, decode_hp) if t2t_named else FLAGS.decode_to_file
        paths = {"output": decodes}
        if t2t_named:
            paths |= {
                "target": t2t_decodes.sibling(decodes, "targets"),
                "inputs": t2t_decodes.sibling(decodes, "inputs"),
            }
        from t2tcli.io import preflight

        for path in paths.values():
            preflight.check_output_file(path, "decode_to_file")
    data_dir = FLAGS.data_dir or model.info.data_dir
    decoded = list(t2t_decodes.decode_split(model, decode_hp, data_dir, split, FLAGS.checkpoint_path))
    for row in decoded:
        if t2t_named:
            logging.info("Inference results INPUT: %s", row.inputs)
            logging.info("Inference results OUTPUT: %s", row.output)
            logging.info("Inference results TARGET: %s", row.target)
    if not to_files and t2t_named and not FLAGS["decode_to_file"].present:
        return
    if not to_files:
        with text_files.atomic_output("-", "decode_to_file") as out:
            for row in decoded:
                out.write(text_files.escape(row.output) + "\n")
        return
    for field, path in paths.items():
        with text_files.atomic_output(path, "decode_to_file") as out:
            for row in decoded:
                out.write(text_files.escape(getattr(row, field)) + "\n")
        logging.info("wrote %s", path)


class progress_bar:  # noqa: N801 - used like a function in a with statement
    """A tqdm bar on stderr when it is a terminal (or --progress); otherwise nothing."""

    def __init__(self, source: str) -> None:
        self.bar = None
        if show_progress():
            from t2tcli import progress
            from t2tcli.io import text_files

            self.bar = progress.bar(text_files.count_lines(source), "line")

    def __enter__(self):
        return self.bar.update if self.bar is not None else None

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def run() -> None:
    common.run(main)
