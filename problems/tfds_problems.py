"""Problems read from prepared TensorFlow Datasets (offline; see --tfds_data_dir)."""

from __future__ import annotations

from typing import Any

from t2tcli.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import TfdsSource

from .quora import QpIsDuplicate

_QQP_FIELDS = {"idx": "idx", "question1": "question1", "question2": "question2", "label": "label"}


@register_problem("glue_qqp")
class GlueQqp(QpIsDuplicate):
    """GLUE's QQP (glue/qqp:2.0.0): train / validation as train / dev; test is unlabeled."""

    vocab = VocabSpec(name="glue_qqp", size=8000, user_defined_symbols=("<SEP>",))
    tfds_name = "glue/qqp:2.0.0"

    def source(self, tmp_dir: str | None) -> dict[str, TfdsSource]:
        required = ("question1", "question2")
        return {
            split: TfdsSource(self.tfds_name, tfds_split, _QQP_FIELDS, required)
            for split, tfds_split in (("train", "train"), ("dev", "validation"), ("test", "test"))
        }

    def preprocess(self, record: dict[str, Any]) -> dict[str, str] | None:
        label = record["label"].strip()
        return {
            "inputs": self.inputs(record["question1"], record["question2"]),
            "targets": label if label in ("0", "1") else "",
        }

    # Row by row: QpIsDuplicate's column-wise version expects Kaggle's is_duplicate column.
    preprocess_frame = Text2TextProblem.preprocess_frame
