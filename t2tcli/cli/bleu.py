"""t2t-bleu: BLEU of a translation file against a reference file, as tensorflow2tensor prints it.

t2t-bleu --translation=FILE --reference=FILE

One sentence a line in each, the same number of lines. Scored by sacreBLEU with its
international tokenization (`intl`, tensorflow2tensor's bleu_tokenize), cased and
lowercased, printed as T2T's `BLEU_uncased = ...` and `BLEU_cased = ...` lines.
"""

from __future__ import annotations

from absl import flags

from t2tcli.cli import common
from t2tcli.errors import UserError

flags.DEFINE_string("translation", None, "The system's output, one sentence a line.")
flags.DEFINE_string("reference", None, "The reference translations, one sentence a line, in the same order.")

FLAGS = flags.FLAGS


def _lines(path: str, flag: str) -> list[str]:
    from t2tcli.io import fs

    if not fs.exists(path):
        raise UserError(f"--{flag}={path}: no such file")
    try:
        return fs.read_bytes(path).decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"--{flag}={path}: not UTF-8 text (byte {exc.start + 1})") from None


def bleu_lines(translation: list[str], reference: list[str]) -> list[str]:
    """T2T's two output lines for these sentences."""
    import sacrebleu

    if len(translation) != len(reference):
        raise UserError(f"{len(translation)} translated lines but {len(reference)} reference lines")
    scores = {
        case: sacrebleu.corpus_bleu(translation, [reference], tokenize="intl", lowercase=case == "uncased").score
        for case in ("uncased", "cased")
    }
    return [f"BLEU_{case} = {score:6.2f}" for case, score in scores.items()]


def main() -> None:
    common.require("translation", "reference")
    for line in bleu_lines(_lines(FLAGS.translation, "translation"), _lines(FLAGS.reference, "reference")):
        print(line)


def run() -> None:
    common.run(main)
