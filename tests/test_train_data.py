"""Tiny datagen-format data for the model, input and training tests.

Writes what t2t-datagen writes (TFRecord shards of int64 `inputs` / `targets` ending in
EOS, a meta file and a SentencePiece vocabulary) for copy / reverse problems registered
from a generated --usr_dir, so these tests depend only on the documented file format.
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap

import numpy as np

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data.vocabulary.vocab import EOS_ID, train_vocabulary

VOCAB_NAME = "t2ttest"
VOCAB_SIZE = 40
PROBLEMS = ("t2ttest_copy", "t2ttest_reverse")
MIXTURE = "t2ttest_mix"

_USR = textwrap.dedent(
    f'''
    from t2tcli.data.problem import Mixture, Text2TextProblem, VocabSpec
    from t2tcli.registry import register_mixture, register_problem

    V = VocabSpec(name="{VOCAB_NAME}", size={VOCAB_SIZE})

    @register_problem("{PROBLEMS[0]}")
    class T2tTestCopy(Text2TextProblem):
        vocab = V

    @register_problem("{PROBLEMS[1]}")
    class T2tTestReverse(Text2TextProblem):
        vocab = V

    @register_mixture("{MIXTURE}")
    class T2tTestMix(Mixture):
        vocab = V
        problems = [("{PROBLEMS[0]}", "examples"), ("{PROBLEMS[1]}", "examples")]
    '''
)


def sequences(n: int, seed: int, min_len: int = 3, max_len: int = 10) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB_SIZE, size=int(rng.integers(min_len, max_len + 1))).tolist() for _ in range(n)]


def write_problem(data_dir: str, name: str, rows: dict[str, int], seed: int = 0, max_len: int = 10) -> None:
    reverse = name.endswith("reverse")
    meta_splits = {}
    for i, (split, n) in enumerate(rows.items()):
        path = os.path.join(data_dir, f"{name}-{split}-00000-of-00001")
        with tf.io.TFRecordWriter(path) as w:
            for seq in sequences(n, seed + i, max_len=max_len):
                target = seq[::-1] if reverse else seq
                feats = {
                    "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=seq + [EOS_ID])),
                    "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=target + [EOS_ID])),
                }
                w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
        meta_splits[split] = {"examples": n, "shards": 1, "files": [os.path.basename(path)]}
    meta = {
        "vocab_file": f"vocab.{VOCAB_NAME}.model",
        "vocab_size": VOCAB_SIZE,
        "splits": meta_splits,
        "lengths": {},
    }
    with open(os.path.join(data_dir, f"{name}.meta.json"), "w") as f:
        json.dump(meta, f)


_USR_DIR: list[str] = []


def usr_dir() -> str:
    """One usr_dir per test process: registering the same problem names twice is an error."""
    if not _USR_DIR:
        path = tempfile.mkdtemp(prefix="t2ttest_usr_")
        with open(os.path.join(path, "t2ttest_problems.py"), "w") as f:
            f.write(_USR)
        registry.import_usr_dir(path)
        _USR_DIR.append(path)
    return _USR_DIR[0]


def make_data_dir(root: str, train_rows: int = 2000, dev_rows: int = 64) -> tuple[str, str]:
    """(data_dir, usr_dir) with both toy problems, their mixture and a vocabulary."""
    data_dir = os.path.join(root, "data")
    os.makedirs(data_dir, exist_ok=True)
    vocab = os.path.join(data_dir, f"vocab.{VOCAB_NAME}.model")
    if not os.path.exists(vocab):
        words = [" ".join("abcdefgh"[j % 8] * (1 + j % 3) for j in range(i, i + 6)) for i in range(400)]
        train_vocabulary(words, vocab, vocab_size=VOCAB_SIZE)
    for k, name in enumerate(PROBLEMS):
        write_problem(data_dir, name, {"train": train_rows, "dev": dev_rows}, seed=10 * k)
    return data_dir, usr_dir()


def test_fixture_writes_the_datagen_format(tmp_path):
    data_dir, _ = make_data_dir(str(tmp_path), train_rows=10, dev_rows=2)
    path = os.path.join(data_dir, f"{PROBLEMS[1]}-train-00000-of-00001")
    ex = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path).as_numpy_iterator())))
    inputs = list(ex.features.feature["inputs"].int64_list.value)
    targets = list(ex.features.feature["targets"].int64_list.value)
    assert inputs[-1] == targets[-1] == EOS_ID
    assert targets[:-1] == inputs[:-1][::-1]
