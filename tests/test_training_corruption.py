"""A self-supervised problem's own objective, and the run's seed, reach the training input.

The corruption ops are tested on their own in test_self_supervised; here the problem is
read as training reads it (inputs.examples and inputs.input_fn over datagen-format
shards), so an objective setting or a seed dropped on the way shows.
"""

from __future__ import annotations

import os
import tempfile
import textwrap

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data.input import inputs
from t2tcli.data.vocabulary.vocab import EOS_ID, Vocabulary, sentinel_count, train_vocabulary

PROBLEM = "t2tguard_dense_spans"
DENSITY = 0.5  # far from the default 0.15, so a default used instead shows
LENGTH = 64  # inputs_length and targets_length

_USR = textwrap.dedent(
    f'''
    from t2tcli.problem import SelfSupervisedProblem, SpanCorruption, VocabSpec
    from t2tcli.registry import register_problem

    @register_problem("{PROBLEM}")
    class T2tGuardDenseSpans(SelfSupervisedProblem):
        objective = SpanCorruption(noise_density={DENSITY}, mean_noise_span_length=2.0)
        vocab = VocabSpec(name="t2tguard", size=60, extra_ids=24)
    '''
)


def _feature(ids: list[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=ids))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> str:
    """A data_dir holding PROBLEM's train split as t2t-datagen writes a self-supervised
    problem's (each text as `targets`, inputs empty) and its vocabulary with sentinels."""
    usr = tempfile.mkdtemp(prefix="t2tguard_usr_")
    with open(os.path.join(usr, "t2tguard_problems.py"), "w") as f:
        f.write(_USR)
    registry.import_usr_dir(usr)
    data = tmp_path_factory.mktemp("dense_spans")
    words = [" ".join("abcdefgh"[j % 8] * (1 + j % 3) for j in range(i, i + 6)) for i in range(400)]
    train_vocabulary(words, str(data / "vocab.t2tguard.model"), vocab_size=36, sentinels=24)
    vocab = Vocabulary(str(data / "vocab.t2tguard.model"))
    assert sentinel_count(vocab.model_proto) == 24
    plain = vocab.vocab_size - 24  # ids below the sentinels
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(str(data / f"{PROBLEM}-train-00000-of-00001")) as w:
        for n in (150, 230, 90, 310, 170):
            text = rng.integers(3, plain, size=n).tolist()
            feats = {"inputs": _feature([]), "targets": _feature(text + [EOS_ID])}
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return str(data)


def _hparams():
    hp = registry.hparams("mtf_transformer_tiny")
    hp.override_from_dict({"inputs_length": LENGTH, "targets_length": LENGTH})
    return hp


def _examples(data_dir: str, seed: int) -> list[dict[str, list[int]]]:
    ds = inputs.examples(data_dir, PROBLEM, "train", shuffle=False, repeat=False, seed=seed, hp=_hparams())
    return [{k: v.tolist() for k, v in ex.items()} for ex in ds.as_numpy_iterator()]


def _first_sentinel(data_dir: str) -> int:
    return Vocabulary(os.path.join(data_dir, "vocab.t2tguard.model")).vocab_size - 24


def test_the_problems_noise_density_is_the_one_training_corrupts_with(data_dir):
    sentinel = _first_sentinel(data_dir)
    examples = _examples(data_dir, seed=5)
    assert len(examples) > 10
    full = 0
    for ex in examples:
        kept = [t for t in ex["inputs"] if t < sentinel]
        noise = [t for t in ex["targets"] if t < sentinel]
        piece = len(kept) + len(noise)
        # T5's count: round(piece * density) tokens noised, at least one and one kept.
        assert len(noise) == min(max(round(piece * DENSITY), 1), piece - 1), (piece, len(noise))
        assert len(ex["inputs"]) < LENGTH and len(ex["targets"]) < LENGTH  # room for EOS
        if len(ex["inputs"]) >= LENGTH - 4:
            full += 1
    # Pieces are cut to the length whose corruption at DENSITY fills inputs_length: cut for
    # another density, the inputs would come out far shorter (or the targets too long).
    assert full >= len(examples) - 1, [len(ex["inputs"]) for ex in examples]


def test_the_run_seed_decides_the_corruption_training_reads(data_dir):
    sentinel = _first_sentinel(data_dir)
    first, again, other = _examples(data_dir, 1), _examples(data_dir, 1), _examples(data_dir, 2)
    assert first == again, "one seed, the same corruption"
    assert len(first) == len(other)

    def tokens(ex: dict[str, list[int]]) -> list[int]:
        return sorted(t for t in ex["inputs"] + ex["targets"] if t < sentinel)

    assert [tokens(ex) for ex in first] == [tokens(ex) for ex in other], "the same pieces of text..."
    changed = sum(a["inputs"] != b["inputs"] for a, b in zip(first, other, strict=True))
    assert changed >= len(first) - 1, "...corrupted otherwise in (nearly) every piece by another seed"


@pytest.mark.parametrize("training, expected", [(True, 7), (False, inputs.EVAL_SEED)])
def test_the_input_fn_hands_training_the_run_seed_and_evaluation_a_fixed_one(data_dir, monkeypatch, training, expected):
    seen = []
    real = inputs.examples

    def spy(*args, **kwargs):
        seen.append(kwargs.get("seed"))
        return real(*args, **kwargs)

    monkeypatch.setattr(inputs, "examples", spy)
    inputs.input_fn(data_dir, PROBLEM, "train", _hparams(), training=training, pack=False, seed=7)()
    assert seen == [expected]
