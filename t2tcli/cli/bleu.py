"""t2t-bleu: BLEU of translations against a reference file, as tensor2tensor prints it.

t2t-bleu --translation=FILE --reference=FILE
t2t-bleu --translations_dir=DIR --reference=FILE --event_dir=DIR [--wait_minutes=N]

One sentence a line in each, the same number of lines. Scored by sacreBLEU with its
international tokenization (`intl`, tensor2tensor's bleu_tokenize), lowercased and
cased (--bleu_variant), printed as T2T's `BLEU_uncased = ...` and `BLEU_cased = ...`
lines. With --translations_dir, every file there named `*-STEP` (a decode of the
checkpoint of that step) is scored in step order into TensorBoard events in --event_dir,
which remembers the last step scored, so a rerun scores only newer files.
"""

from __future__ import annotations

from absl import flags

from t2tcli.cli import common
from t2tcli.errors import UserError

flags.DEFINE_string("translation", None, "The system's output, one sentence a line.")
flags.DEFINE_string("reference", None, "The reference translations, one sentence a line, in the same order.")
flags.DEFINE_string("source", None, "tensor2tensor's source-language file flag: accepted, unused (as in T2T).")
flags.DEFINE_string(
    "translations_dir", None, "Score every file here named *-STEP (one decode per checkpoint), in step order."
)
flags.DEFINE_string("event_dir", None, "--translations_dir: where the TensorBoard events and last step go.")
flags.DEFINE_enum(
    "bleu_variant", "both", ["both", "uncased", "cased"], "Which BLEU: uncased, cased (case-sensitive) or both."
)
flags.DEFINE_string("tag_suffix", "", "--translations_dir: appended to the BLEU_cased / BLEU_uncased event tags.")
flags.DEFINE_integer(
    "min_steps",
    -1,
    "--translations_dir: score only files of at least this step (-1: those after the last step --event_dir scored).",
)
flags.DEFINE_integer("wait_minutes", 0, "--translations_dir: wait up to this long for each next translated file.")
flags.DEFINE_boolean(
    "report_zero", None, "--translations_dir: record BLEU 0 at step 0 (default: when scoring from step 0)."
)

FLAGS = flags.FLAGS


def _variant_lines(translation: list[str], reference: list[str]) -> list[str]:
    from t2tcli.evaluate import metrics

    wanted = ("uncased", "cased") if FLAGS.bleu_variant == "both" else (FLAGS.bleu_variant,)
    return [line for line in metrics.t2t_bleu_lines(translation, reference) if line.split()[0][5:] in wanted]


def main() -> None:
    if FLAGS.translation and FLAGS.translations_dir:
        raise UserError("--translation and --translations_dir: give one of them")
    if not FLAGS.translation and not FLAGS.translations_dir:
        raise UserError("--translation=FILE or --translations_dir=DIR is required")
    common.require("reference")
    from t2tcli.io import text_files

    reference = list(text_files.read_lines(FLAGS.reference, "reference"))
    if FLAGS.translation:
        translation = list(text_files.read_lines(FLAGS.translation, "translation"))
        for line in _variant_lines(translation, reference):
            print(line)
        return
    common.require("event_dir")
    from t2tcli.cli import bleu_dir

    wanted = ("uncased", "cased") if FLAGS.bleu_variant == "both" else (FLAGS.bleu_variant,)
    bleu_dir.score_dir(
        bleu_dir.Settings(
            translations_dir=FLAGS.translations_dir,
            event_dir=FLAGS.event_dir,
            variants=wanted,
            tag_suffix=FLAGS.tag_suffix,
            min_steps=FLAGS.min_steps,
            wait_minutes=FLAGS.wait_minutes,
            report_zero=FLAGS.report_zero,
        ),
        reference,
    )


def run() -> None:
    common.run(main)
