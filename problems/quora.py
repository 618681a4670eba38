"""Kaggle Quora Question Pairs: duplicate detection, paraphrase generation, and both.

Reads `train.csv` (id,qid1,qid2,question1,question2,is_duplicate) and `test.csv`
(test_id,question1,question2, unlabeled) from --tmp_dir, or the small stand-in shipped
in examples/data/quora. Questions are lowercased and stripped of double quotes, with
whitespace (including newlines inside a question) collapsed, as T5 users do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
    """`normalize_question` of each, with the character-level steps done once on the joined column.

    Most questions are already single-spaced, so the per-question whitespace collapse
    runs only on those where a scan of the joined column finds irregular spacing.
    """
    joined = "\0".join(texts)
    if joined.count("\0") != max(len(texts) - 1, 0):  # a NUL inside a question: no safe separator
        return list(map(normalize_question, texts))
    joined = joined.replace('"', "").replace("\u201c", "").replace("\u201d", "").lower()
    out = joined.split("\0") if texts else []
    positions = _irregular_spacing(joined)
    if positions:
        ends = np.cumsum(np.fromiter(map(len, out), dtype=np.int64, count=len(out)) + 1)
        for i in np.unique(np.searchsorted(ends, positions, side="right")).tolist():
            out[i] = " ".join(out[i].split())
    return out


# What str.split() splits on besides the space; U+3000 is the last whitespace character (a test checks).
_OTHER_WHITESPACE = tuple(c for c in map(chr, range(0x3001)) if c.isspace() and c != " ")


def _irregular_spacing(joined: str) -> list[int]:
    """Positions in NUL-joined texts of whatever " ".join(text.split()) would change.

    That is: whitespace other than a space, two spaces in a row, and a space at either
    end of a text. ASCII text is checked with numpy (any control character counts, which
    only costs a needless collapse); other text with one C-level search per pattern.
    """
    if not joined:
        return []
    if joined.isascii():
        codes = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        space = codes == 0x20
        ends = space | (codes == 0)  # a space, or the NUL where a text ends and the next starts
        irregular = (codes - np.uint8(1)) < np.uint8(0x1F)  # 0x01-0x1f: tab, newline and the like
        irregular[1:] |= space[1:] & ends[:-1]  # after a space, or first in a text
        irregular[:-1] |= space[:-1] & (codes[1:] == 0)  # last in a text
        irregular[[0, -1]] |= space[[0, -1]]  # first in the first text, last in the last
        return np.flatnonzero(irregular).tolist()
    positions = []
    find = joined.find
    # (pattern, offset in it of a character of the text to fix): the NUL of "\0 " ends the text before.
    for pattern, offset in (*((c, 0) for c in _OTHER_WHITESPACE), ("  ", 0), (" \0", 0), ("\0 ", 1)):
        at = find(pattern)
        while at >= 0:
            positions.append(at + offset)
            at = find(pattern, at + 1)
    if joined.startswith(" "):
        positions.append(0)
    if joined.endswith(" "):
        positions.append(len(joined) - 1)
    return positions


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


def _labels(values: list[str]) -> list[str]:
    """`_label` of each; a column of clean labels (the usual case) is returned as it is."""
    return values if set(values) <= {"0", "1"} else list(map(_label, values))


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
        labels = _labels(frame["is_duplicate"].tolist()) if "is_duplicate" in frame else [""] * len(frame)
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
