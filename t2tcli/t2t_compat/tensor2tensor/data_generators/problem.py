"""tensor2tensor.data_generators.problem: `DatasetSplit` and the `Problem` base class.

Only what a T2T user's problem reads or overrides is here; the work T2T's Problem does
itself (writing and reading TFRecords, encoders, modalities) is this toolkit's datagen
and input pipeline, so a subclass that overrides it is refused by name
(t2tcli.t2t_compat.problem_adapter).
"""

from __future__ import annotations

from typing import Any


class DatasetSplit:
    """T2T's split names; EVAL is the split called dev here."""

    TRAIN = "train"
    EVAL = "eval"
    TEST = "test"


class Problem:
    """The base every T2T problem derives from. Registered subclasses get `name`."""

    REGISTERED_NAME = ""

    def __init__(self, was_reversed: bool = False, was_copy: bool = False) -> None:
        self._was_reversed = was_reversed
        self._was_copy = was_copy

    @property
    def name(self) -> str:
        return self.REGISTERED_NAME or type(self).__name__

    @property
    def multiprocess_generate(self) -> bool:
        return False

    @property
    def num_generate_tasks(self) -> int:
        return 1

    def generate_data(self, data_dir: str, tmp_dir: str, task_id: int = -1) -> None:
        raise NotImplementedError

    def feature_encoders(self, data_dir: str) -> Any:
        raise NotImplementedError

    def hparams(self, defaults: Any, model_hparams: Any) -> None:
        return None

    def example_reading_spec(self) -> Any:
        raise NotImplementedError

    def preprocess_example(self, example: Any, mode: Any, hparams: Any) -> Any:
        return example

    def eval_metrics(self) -> list[str]:
        return []
