"""User dirs written as a tensor2tensor user writes them (imports, decorators, sets),
for the tests of t2tcli's tensor2tensor layer. Written for these tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

VERSE = '''
"""Next line of a verse, in the shape of a problem from T2T's docs/new_problem.md."""
import re

from tensor2tensor.data_generators import problem
from tensor2tensor.data_generators import text_problems
from tensor2tensor.models import transformer
from tensor2tensor.utils import registry

WORDS = "the sea the sky a bird sings over hills and rivers under bright stars".split()


@registry.register_problem
class VerseLines(text_problems.Text2TextProblem):
    """Predict the next line of a verse from the line before."""

    @property
    def approx_vocab_size(self):
        return 2**13

    @property
    def is_generate_per_split(self):
        return False

    @property
    def dataset_splits(self):
        return [
            {"split": problem.DatasetSplit.TRAIN, "shards": 9},
            {"split": problem.DatasetSplit.EVAL, "shards": 1},
        ]

    def generate_samples(self, data_dir, tmp_dir, dataset_split):
        del data_dir, tmp_dir, dataset_split
        lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 4)) for i in range(400)]
        for previous, line in zip(lines, lines[1:]):
            yield {"inputs": re.sub("[^a-z]+", " ", previous), "targets": line}


@registry.register_hparams
def transformer_verse():
    hparams = transformer.transformer_base()
    hparams.num_hidden_layers = 1
    hparams.hidden_size = 32
    hparams.filter_size = 64
    hparams.num_heads = 2
    hparams.max_length = 16
    hparams.batch_size = 256
    hparams.attention_dropout = 0.6
    hparams.add_hparam("verse_style", "free")
    return hparams
'''

WEATHER = '''
"""Calm or stormy: a text classification problem split by T2T itself."""
from tensor2tensor.data_generators import problem, text_problems
from tensor2tensor.layers import common_hparams
from tensor2tensor.utils import registry

SEEN = []


@registry.register_problem("weather_words")
class WeatherWords(text_problems.Text2ClassProblem):
    @property
    def is_generate_per_split(self):
        return True

    @property
    def dataset_splits(self):
        return [
            {"split": problem.DatasetSplit.TRAIN, "shards": 2},
            {"split": problem.DatasetSplit.EVAL, "shards": 1},
        ]

    @property
    def vocab_type(self):
        return text_problems.VocabType.CHARACTER

    @property
    def num_classes(self):
        return 2

    def class_labels(self, data_dir):
        return ["calm", "stormy"]

    def generate_samples(self, data_dir, tmp_dir, dataset_split):
        SEEN.append(dataset_split)
        rows = 30 if dataset_split == problem.DatasetSplit.TRAIN else 6
        for i in range(rows):
            stormy = i % 2
            yield {"inputs": ("wind and rain" if stormy else "sun and still air") + f" day {i}", "label": stormy}


@registry.register_problem
class BadLabels(text_problems.Text2ClassProblem):
    @property
    def is_generate_per_split(self):
        return False

    @property
    def num_classes(self):
        return 2

    def generate_samples(self, data_dir, tmp_dir, dataset_split):
        yield {"inputs": "x", "label": 7}


@registry.register_problem
class SongText(text_problems.Text2SelfProblem):
    @property
    def is_generate_per_split(self):
        return False

    def generate_samples(self, data_dir, tmp_dir, dataset_split):
        for i in range(20):
            yield {"targets": f"la la song number {i}"}


@registry.register_problem
class OwnTokens(text_problems.Text2TextProblem):
    @property
    def is_generate_per_split(self):
        return False

    @property
    def vocab_type(self):
        return text_problems.VocabType.TOKEN


@registry.register_problem
class TensorTweaks(text_problems.Text2TextProblem):
    @property
    def is_generate_per_split(self):
        return False

    def preprocess_example(self, example, mode, hparams):
        example["inputs"] = example["inputs"][:10]
        return example


@registry.register_problem
class OwnEncoders(text_problems.Text2TextProblem):
    @property
    def is_generate_per_split(self):
        return False

    def feature_encoders(self, data_dir):
        return {}


@registry.register_problem
class Broken(text_problems.Text2TextProblem):
    @property
    def is_generate_per_split(self):
        return False

    def generate_samples(self, data_dir, tmp_dir, dataset_split):
        yield {"inputs": "a", "targets": "b"}
        raise KeyError("no such column")


@registry.register_hparams
def basic_weather():
    hp = common_hparams.basic_params1()
    hp.num_hidden_layers = 2
    hp.add_hparam("filter_size", 256)
    return hp
'''

CUSTOM_MODEL = """
from tensor2tensor.utils import registry
from tensor2tensor.utils import t2t_model


@registry.register_model
class MyOwnTransformer(t2t_model.T2TModel):
    def body(self, features):
        return features["inputs"]
"""


def write_usr_dir(root: Path, name: str, source: str) -> Path:
    """A user dir `root/name` holding `source` as `<name>.py`."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip())
    return folder
