"""t2t-bleu: BLEU of a translation file against a reference file, as tensor2tensor prints it.

t2t-bleu --translation=FILE --reference=FILE

One sentence a line in each, the same number of lines. Scored by sacreBLEU with its
international tokenization (`intl`, tensor2tensor's bleu_tokenize), cased and
lowercased, printed as T2T's `BLEU_uncased = ...` and `BLEU_cased = ...` lines.
"""

from __future__ import annotations

from absl import flags

from t2tcli.cli import common

flags.DEFINE_string("translation", None, "The system's output, one sentence a line.")
flags.DEFINE_string("reference", None, "The reference translations, one sentence a line, in the same order.")

FLAGS = flags.FLAGS


def main() -> None:
    common.require("translation", "reference")
    from t2tcli.evaluate import metrics
    from t2tcli.io import text_files

    translation = list(text_files.read_lines(FLAGS.translation, "translation"))
    reference = list(text_files.read_lines(FLAGS.reference, "reference"))
    for line in metrics.t2t_bleu_lines(translation, reference):
        print(line)


def run() -> None:
    common.run(main)
