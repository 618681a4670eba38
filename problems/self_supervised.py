"""T5's self-supervised objectives on plain text: pretrain, or keep pretraining, on your own.

`span_corruption`, `prefix_lm` and `iid_denoising` read every `*.txt` and `*.txt.gz` file
of `--tmp_dir`, one document a line, and share the vocabulary `text` (trained on that
text, T5's 100 sentinels appended), so they mix with each other and with any problem of
that vocabulary. `t2t-datagen --leave_out_dev_of=PROBLEM` (or a subclass's
`leave_out_dev_of`) leaves out of the text every dev and test text of PROBLEM, so the
problem a model pretrained here is fine-tuned on is evaluated on text it has not read.
`verses_span_corruption` is the same objective on the shipped Bible
verses (English and Spanish), with no `--tmp_dir` needed: a small corpus to try the
recipe on, pretraining before `translate_en_es`.
"""

from __future__ import annotations

from typing import Any

from t2tcli.errors import UserError
from t2tcli.problem import IidDenoising, PrefixLM, SelfSupervisedProblem, SpanCorruption, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import CsvSource, TextSource, raw_dir, shipped_data
from t2tcli.text import squash_spaces

TEXT_FILES = ("*.txt", "*.txt.gz")


class _TextFiles(SelfSupervisedProblem):
    """The text files of --tmp_dir."""

    def source(self, tmp_dir: str | None) -> TextSource:
        if not tmp_dir:
            raise UserError(
                f"problem '{self.name}' reads the {' and '.join(TEXT_FILES)} files of --tmp_dir: "
                "pass --tmp_dir=DIR holding your text, one document a line"
            )
        return TextSource([f"{tmp_dir.rstrip('/')}/{pattern}" for pattern in TEXT_FILES])


@register_problem("span_corruption")
class SpanCorruptionText(_TextFiles):
    objective = SpanCorruption()


@register_problem("prefix_lm")
class PrefixLMText(_TextFiles):
    objective = PrefixLM()


@register_problem("iid_denoising")
class IidDenoisingText(_TextFiles):
    objective = IidDenoising()


@register_problem("verses_span_corruption")
class VersesSpanCorruption(SelfSupervisedProblem):
    """translate_en_es's verses as unlabeled text: each verse's English and Spanish.

    Its train and dev splits hold the same verses as translate_en_es's (one key, one
    dev_fraction, one split hash), so a model pretrained on this train split has not
    read the verses that translate_en_es is evaluated on.
    """

    vocab = VocabSpec(name="verses", size=8000, extra_ids=100)

    def source(self, tmp_dir: str | None) -> CsvSource:
        path = f"{raw_dir(tmp_dir, shipped_data(__package__, 'data'))}/translate_en_es.csv"
        return CsvSource(path, columns=("id", "english", "spanish"), key="id")

    def preprocess(self, record: dict[str, Any]) -> dict[str, str]:
        return {"inputs": "", "targets": squash_spaces(record["english"] + " " + record["spanish"])}
