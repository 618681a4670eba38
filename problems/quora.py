"""Kaggle Quora Question Pairs: duplicate detection, paraphrase generation, and both.

Reads `train.csv` (id,qid1,qid2,question1,question2,is_duplicate) and, when it is there,
`test.csv` (test_id,question1,question2, unlabeled) from --tmp_dir, or the small
stand-in shipped in problems/data/quora. Questions are lowercased and stripped of
double quotes, with whitespace (newlines inside a question too) squashed, as T5 users do.
A t2t-decode line is `question1<TAB>question2` (paraphrase: `question1`).
"""

from __future__ import annotations

from typing import Any

from t2tcli.io import fs
from t2tcli.problem import Mixture, Text2TextProblem, VocabSpec, by_examples
from t2tcli.registry import register_mixture, register_problem
from t2tcli.sources import CsvSource, raw_dir, shipped_data
from t2tcli.text import choice, squash_spaces

SHIPPED = shipped_data(__package__, "data", "quora")
QP_VOCAB = VocabSpec(name="qp", size=8000, user_defined_symbols=("<SEP>",))


def clean(question: Any) -> Any:
    """A question (or a column of them) lowercased, without double quotes, single-spaced."""
    return squash_spaces(question.replace('"', "").replace("\u201c", "").replace("\u201d", "").lower())


def label(record: dict[str, Any]) -> Any:
    """is_duplicate as "0" / "1"; "" where the record has none (test split, decode lines)."""
    return choice(record["is_duplicate"], ("0", "1"), "is_duplicate") if "is_duplicate" in record else ""


def train_csv(tmp_dir: str | None) -> CsvSource:
    return CsvSource(
        f"{raw_dir(tmp_dir, SHIPPED)}/train.csv",
        columns=("id", "question1", "question2", "is_duplicate"),
        required=("question1", "question2", "is_duplicate"),
        key="id",
    )


def sources(tmp_dir: str | None) -> dict[str, CsvSource]:
    """train.csv, and the unlabeled test.csv when the directory has one."""
    out = {"train": train_csv(tmp_dir)}
    test = f"{raw_dir(tmp_dir, SHIPPED)}/test.csv"
    if fs.exists(test):  # tmp_dir may be gs://
        out["test"] = CsvSource(test, columns=("test_id", "question1", "question2"))
    return out


@register_problem("qp_is_duplicate")
class QpIsDuplicate(Text2TextProblem):
    """Are two questions duplicates? `is duplicate: <q1> <SEP> <q2>` -> 0 / 1."""

    vocab = QP_VOCAB
    metrics = ("accuracy", "f1")
    decode_fields = ("question1", "question2")
    columnwise = True

    def source(self, tmp_dir: str | None) -> dict[str, CsvSource]:
        return sources(tmp_dir)

    def preprocess(self, record: dict[str, Any]) -> dict[str, Any]:
        inputs = "is duplicate: " + clean(record["question1"]) + " <SEP> " + clean(record["question2"])
        return {"inputs": inputs, "targets": label(record)}


@register_problem("generate_similar_question")
class GenerateSimilarQuestion(Text2TextProblem):
    """Paraphrase a question: `paraphrase: <q1>` -> q2, on duplicate pairs only."""

    vocab = QP_VOCAB
    metrics = ("bleu",)

    def source(self, tmp_dir: str | None) -> CsvSource:
        return train_csv(tmp_dir)

    def preprocess(self, record: dict[str, Any]) -> dict[str, Any] | None:
        if label(record) == "0":
            return None
        return {"inputs": "paraphrase: " + clean(record["question1"]), "targets": clean(record["question2"])}


@register_mixture("qp_all")
class QpAll(Mixture):
    """Both question-pair tasks, sampled in proportion to their train sizes."""

    vocab = QP_VOCAB
    problems = [("qp_is_duplicate", by_examples), ("generate_similar_question", by_examples)]
