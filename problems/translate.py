"""English -> Spanish translation on public-domain Bible verses (KJV -> Reina-Valera 1909)."""

from __future__ import annotations

from typing import Any

from t2tcli.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import CsvSource, raw_dir, shipped_data
from t2tcli.text import squash_spaces

SHIPPED = shipped_data(__package__, "data")
PREFIX = "translate English to Spanish: "


@register_problem("translate_en_es")
class TranslateEnEs(Text2TextProblem):
    """Reads translate_en_es.csv (id,book,chapter,verse,english,spanish) from --tmp_dir or problems/data."""

    vocab = VocabSpec(name="translate_en_es", size=8000)
    metrics = ("bleu",)
    columnwise = True

    def source(self, tmp_dir: str | None) -> CsvSource:
        path = f"{raw_dir(tmp_dir, SHIPPED)}/translate_en_es.csv"
        return CsvSource(path, columns=("id", "english", "spanish"), key="id")

    def preprocess(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"inputs": PREFIX + squash_spaces(record["english"]), "targets": squash_spaces(record["spanish"])}
