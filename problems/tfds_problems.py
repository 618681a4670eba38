"""Problems read from prepared TensorFlow Datasets (offline; see --tfds_data_dir)."""

from __future__ import annotations

from typing import Any

from t2tcli.problem import VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import TfdsSource
from t2tcli.text import choice

from .quora import QpIsDuplicate, clean

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

    def preprocess(self, record: dict[str, Any]) -> dict[str, Any]:
        inputs = "is duplicate: " + clean(record["question1"]) + " <SEP> " + clean(record["question2"])
        # GLUE marks the unlabeled test split's labels -1.
        return {"inputs": inputs, "targets": choice(record["label"], ("0", "1"), "label", default="")}
