"""Kaggle Quora Question Pairs: duplicate detection, paraphrase generation, and both.

Reads `train.csv` (id,qid1,qid2,question1,question2,is_duplicate) and `test.csv`
(test_id,question1,question2, unlabeled) from --tmp_dir, or the small stand-in shipped
in examples/data/quora. Questions are lowercased and stripped of double quotes, with
whitespace (including newlines inside a question) collapsed, as T5 users do.
"""

from __future__ import annotations

from typing import Any

from t2tcli.errors import UserError
from t2tcli.problem import Mixture, Text2TextProblem, VocabSpec
from t2tcli.registry import REPO_ROOT, register_mixture, register_problem
from t2tcli.sources import CsvSource, raw_dir

SHIPPED = REPO_ROOT / "examples" / "data" / "quora"
QP_VOCAB = VocabSpec(name="qp", size=8000, user_defined_symbols=("<SEP>",))


def normalize_question(text: str) -> str:
    # Chained replace() beats str.translate() several times over on short strings.
    return " ".join(text.replace('"', "").replace("\u201c", "").replace("\u201d", "").lower().split())


def normalize_questions(texts: list[str]) -> list[str]:
    """`normalize_question` of each, with the character-level steps done once on the joined column."""
    joined = "\0".join(texts)
    if joined.count("\0") != max(len(texts) - 1, 0):  # a NUL inside a question: no safe separator
        return list(map(normalize_question, texts))
    joined = joined.replace('"', "").replace("\u201c", "").replace("\u201d", "").lower()
    return [" ".join(text.split()) for text in joined.split("\0")] if texts else []


def train_csv(tmp_dir: str | None) -> CsvSource:
    return CsvSource(
        f"{raw_dir(tmp_dir, SHIPPED)}/train.csv",
        columns=("id", "question1", "question2", "is_duplicate"),
        required=("question1", "question2", "is_duplicate"),
        key="id",
    )


def test_csv(tmp_dir: str | None) -> CsvSource:
    return CsvSource(f"{raw_dir(tmp_dir, SHIPPED)}/test.csv", columns=("test_id", "question1", "question2"))


def _label(value: str) -> str:
    label = value.strip()
    if label not in ("0", "1"):
        raise UserError(f"is_duplicate must be 0 or 1, got {value!r}")
    return label


@register_problem("qp_is_duplicate")
class QpIsDuplicate(Text2TextProblem):
    """Are two questions duplicates? `is duplicate: <q1> <SEP> <q2>` -> 0 / 1."""

    vocab = QP_VOCAB
    metrics = ("accuracy", "f1")

    def source(self, tmp_dir: str | None) -> dict[str, CsvSource]:
        return {"train": train_csv(tmp_dir), "test": test_csv(tmp_dir)}

    @staticmethod
    def inputs(question1: str, question2: str) -> str:
        return f"is duplicate: {normalize_question(question1)} <SEP> {normalize_question(question2)}"

    def preprocess(self, record: dict[str, Any]) -> dict[str, str] | None:
        label = _label(record["is_duplicate"]) if "is_duplicate" in record else ""
        return {"inputs": self.inputs(record["question1"], record["question2"]), "targets": label}

    def preprocess_frame(self, frame: Any) -> tuple[list[str | None], list[str | None]]:
        first = normalize_questions(frame["question1"].tolist())
        second = normalize_questions(frame["question2"].tolist())
        inputs = [f"is duplicate: {a} <SEP> {b}" for a, b in zip(first, second, strict=True)]
        labels = list(map(_label, frame["is_duplicate"].tolist())) if "is_duplicate" in frame else [""] * len(frame)
        return inputs, labels

    def format_input(self, line: str) -> str:
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 2:
            raise UserError(f"expected 'question1<TAB>question2', got {len(fields)} tab-separated field(s)")
        return self.inputs(*fields)


@register_problem("generate_similar_question")
class GenerateSimilarQuestion(Text2TextProblem):
    """Paraphrase a question: `paraphrase: <q1>` -> q2, on duplicate pairs only."""

    vocab = QP_VOCAB
    metrics = ("bleu",)

    def source(self, tmp_dir: str | None) -> CsvSource:
        return train_csv(tmp_dir)

    def preprocess(self, record: dict[str, Any]) -> dict[str, str] | None:
        if _label(record["is_duplicate"]) != "1":
            return None
        return {
            "inputs": f"paraphrase: {normalize_question(record['question1'])}",
            "targets": normalize_question(record["question2"]),
        }

    def format_input(self, line: str) -> str:
        return f"paraphrase: {normalize_question(line)}"


@register_mixture("qp_all")
class QpAll(Mixture):
    """Both question-pair tasks, sampled in proportion to their train sizes."""

    vocab = QP_VOCAB
    problems = [("qp_is_duplicate", "examples"), ("generate_similar_question", "examples")]
