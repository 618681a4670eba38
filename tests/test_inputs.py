"""The input pipeline: EOS and truncation, packing, static shapes, mixtures."""

from __future__ import annotations

import pytest
from test_train_data import MIXTURE, PROBLEMS, make_data_dir

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data.input import inputs
from t2tcli.errors import UserError


def tiny(**overrides):
    hp = registry.hparams("mtf_transformer_tiny")
    hp.override_from_dict(overrides)
    return hp


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data_dir(str(tmp_path_factory.mktemp("inputs")), train_rows=200, dev_rows=20)[0]


@pytest.mark.parametrize(
    "ids, length, expected",
    [
        ([5, 6, 1], 8, [5, 6, 1]),
        ([5, 6], 8, [5, 6, 1]),
        ([5, 6, 7, 8, 9, 1], 4, [5, 6, 7, 1]),
        ([], 4, [1]),
    ],
)
def test_fit_ends_in_one_eos_and_truncates(ids, length, expected):
    assert inputs._fit(tf.constant(ids, tf.int32), length).numpy().tolist() == expected


def _segments(row, seg):
    return [row[seg == s].tolist() for s in range(1, seg.max() + 1)]


def test_packed_batches_have_static_shapes_and_recover_the_examples(data):
    hp = tiny(inputs_length=16, targets_length=16, batch_size=4)
    ds = inputs.input_fn(data, PROBLEMS[1], "dev", hp, training=False, pack=True)()
    batch = next(iter(ds))
    for key in ("inputs", "targets"):
        for suffix in ("", "_segmentation", "_position"):
            assert batch[key + suffix].shape == (4, 16), key + suffix
    b = {k: v.numpy() for k, v in batch.items()}
    assert (b["inputs_segmentation"].max(axis=1) > 1).any(), "several examples share a row"
    for i in range(4):
        ins = _segments(b["inputs"][i], b["inputs_segmentation"][i])
        outs = _segments(b["targets"][i], b["targets_segmentation"][i])
        assert len(ins) == len(outs)
        for x, y in zip(ins, outs, strict=True):
            assert x[-1] == y[-1] == 1 and y[:-1] == x[:-1][::-1]
        pos = b["inputs_position"][i][b["inputs_segmentation"][i] == 1]
        assert pos.tolist() == list(range(len(pos)))


def test_unpacked_eval_batches_are_padded_and_truncated(data):
    hp = tiny(inputs_length=6, targets_length=6, batch_size=5)
    batches = list(inputs.input_fn(data, PROBLEMS[0], "dev", hp, training=False)().as_numpy_iterator())
    assert len(batches) == 4  # 20 dev rows, static batch of 5
    for b in batches:
        assert set(b) == {"inputs", "targets"} and b["inputs"].shape == (5, 6)
        for row in b["targets"]:
            assert (row == 1).sum() == 1
    counts = inputs.count_truncated(data, PROBLEMS[0], "dev", hp)
    assert counts["examples"] == 20 and 0 < counts["inputs"] == counts["targets"] < 20


def test_training_input_repeats_and_shuffles(data):
    hp = tiny(batch_size=8)
    ds = inputs.input_fn(data, PROBLEMS[0], "train", hp, training=True, seed=1)()
    rows = [b["inputs"] for b, _ in zip(ds.as_numpy_iterator(), range(40), strict=False)]
    assert len(rows) == 40 and rows[0].shape == (8, 32)  # more than one pass over 200 rows


def test_training_order_is_shuffled_by_the_seed_and_covers_every_example(data):
    hp = tiny(batch_size=8, pack=False)

    def rows(training: bool, seed: int | None = None, batches: int = 25) -> list[tuple[int, ...]]:
        ds = inputs.input_fn(data, PROBLEMS[0], "train", hp, training=training, pack=False, seed=seed)()
        out: list[tuple[int, ...]] = []
        for batch, _ in zip(ds.as_numpy_iterator(), range(batches), strict=False):
            out += [tuple(row[row > 0]) for row in batch["inputs"]]
        return out

    stored = rows(training=False)  # the shards' order: 200 rows, one pass
    first, again, other = rows(True, seed=1), rows(True, seed=1), rows(True, seed=2)
    assert first == again, "a seed repeats its order"
    assert first != other, "another seed gives another order"
    position = {row: i for i, row in enumerate(stored)}
    neighbours = sum(position[b] == position[a] + 1 for a, b in zip(first, first[1:], strict=False))
    assert neighbours < len(first) // 10, f"{neighbours} of {len(first)} rows still follow their stored neighbour"
    # Shuffled after repeating (as T5 and tensor2tensor do), so passes mix: over 20 passes a
    # row missed would have a chance of about e**-20.
    assert set(rows(True, seed=1, batches=500)) == set(stored), "every example comes, and only those"


def test_mixture_samples_all_components(data):
    hp = tiny(inputs_length=16, targets_length=16, batch_size=64, pack=False)
    b = next(inputs.input_fn(data, MIXTURE, "train", hp, training=True, pack=False, seed=0)().as_numpy_iterator())
    copies = reverses = 0
    for x, y in zip(b["inputs"], b["targets"], strict=True):
        x, y = x[x > 1].tolist(), y[y > 1].tolist()
        if x == y and x != x[::-1]:
            copies += 1
        elif y == x[::-1] and x != y:
            reverses += 1
    assert copies > 10 and reverses > 10


def test_batch_size_in_tokens():
    assert inputs.batch_size(tiny(batch_size=1024, batch_size_unit="tokens")) == 32
    with pytest.raises(UserError, match="batch_size_unit"):
        inputs.batch_size(tiny(batch_size_unit="bytes"))


def test_missing_split_is_a_clear_error(data):
    with pytest.raises(UserError, match="no 'test' data"):
        inputs.input_fn(data, PROBLEMS[0], "test", tiny(), training=False)()


def test_heavy_truncation_warns_with_the_length_that_fits(tmp_path, monkeypatch):
    """Above a few percent cut, a WARNING names datagen's length percentiles and the
    --hparams value that fits p99."""
    from t2tcli.data.datagen import run as datagen

    datagen.generate(registry.problem("copy_sequence"), datagen.Options(data_dir=str(tmp_path)))
    warnings: list[str] = []
    monkeypatch.setattr(inputs.logging, "warning", lambda msg, *args: warnings.append(msg % args))
    cut = inputs.log_truncation(str(tmp_path), "copy_sequence", "dev", tiny(inputs_length=3, targets_length=3))
    assert cut["inputs"] > 0 and any("--hparams=inputs_length=" in w and "p99" in w for w in warnings), warnings
    warnings.clear()
    inputs.log_truncation(str(tmp_path), "copy_sequence", "dev", tiny(inputs_length=512, targets_length=512))
    assert warnings == []
