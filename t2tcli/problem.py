"""The public names a user's Problem imports (`from t2tcli.problem import ...`, as docs/your-own-data.md shows).

They are defined in `t2tcli.data.problem`; this module keeps the import path users write
stable while the library's own layout may change.
"""

from t2tcli.data.layout import SPLITS
from t2tcli.data.objectives import IidDenoising, PrefixLM, SpanCorruption
from t2tcli.data.problem import (
    Mixture,
    Problem,
    SelfSupervisedProblem,
    Text2TextProblem,
    VocabSpec,
    by_examples,
)

__all__ = [
    "SPLITS",
    "IidDenoising",
    "Mixture",
    "PrefixLM",
    "Problem",
    "SelfSupervisedProblem",
    "SpanCorruption",
    "Text2TextProblem",
    "VocabSpec",
    "by_examples",
]
