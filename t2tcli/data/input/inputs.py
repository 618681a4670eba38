"""The tf.data pipeline from t2t-datagen's shards to static-shape model batches.

Reads `{problem}-{split}-NNNNN-of-NNNNN` TFRecord shards of tf.train.Example with int64
`inputs` / `targets` (or samples a mixture's problems by rate), makes sure every
sequence ends in EOS, truncates to the hparams' sequence lengths (keeping the EOS),
packs several examples into one row with segment ids and positions (training default),
pads to static shapes (mtf and TPUs need them), batches with a fixed batch size and
prefetches. Shards are found through `layout`. Imports: core and data
(corruption, layout, objectives, registry and vocabulary.vocab); and mesh-tensorflow's dataset code.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from absl import logging

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data import layout
from t2tcli.data.input import corruption
from t2tcli.data.objectives import Room
from t2tcli.data.vocabulary.vocab import EOS_ID, Vocabulary, sentinel_count
from t2tcli.errors import UserError
from t2tcli.hparams import HParams

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
from mesh_tensorflow.transformer import dataset as mtf_dataset

KEYS = ("inputs", "targets")


def lengths(hp: HParams) -> dict[str, int]:
    return {"inputs": int(hp.inputs_length), "targets": int(hp.targets_length)}


def batch_size(hp: HParams) -> int:
    """Sequences per batch: `batch_size` itself, or tokens / the longest sequence length."""
    if hp.batch_size_unit == "sequences":
        return int(hp.batch_size)
    if hp.batch_size_unit == "tokens":
        return max(1, int(hp.batch_size) // max(lengths(hp).values()))
    raise UserError(f"hparam batch_size_unit='{hp.batch_size_unit}': use 'sequences' or 'tokens'")


def _parse(record: tf.Tensor) -> dict[str, tf.Tensor]:
    spec = {k: tf.io.VarLenFeature(tf.int64) for k in KEYS}
    parsed = tf.io.parse_single_example(record, spec)
    return {k: tf.cast(tf.sparse.to_dense(parsed[k]), tf.int32) for k in KEYS}


def _fit(ids: tf.Tensor, length: int) -> tf.Tensor:
    """Ends `ids` in exactly one EOS and truncates it to `length` (EOS kept)."""
    ends_in_eos = tf.reduce_any(tf.equal(ids[-1:], EOS_ID))
    body = tf.cond(ends_in_eos, lambda: ids[:-1], lambda: ids)
    return tf.concat([body[: length - 1], tf.constant([EOS_ID], tf.int32)], axis=0)


def _rates(components: list[tuple[Any, Any]], data_dir: str, split: str) -> list[float]:
    """Each component's sampling rate: a number, or a function of the generated data."""
    rates = [float(rate(task, data_dir, split) if callable(rate) else rate) for task, rate in components]
    if not sum(rates) > 0:
        raise UserError("mixture rates are all zero")
    return rates


def _problem_records(data_dir: str, name: str, split: str, shuffle: bool, seed: int | None) -> tf.data.Dataset:
    files = layout.data_files(data_dir, name, split)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed)
    return ds.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE)


def room(vocab_file: str, inputs_length: int, targets_length: int) -> Room:
    """What a self-supervised objective must fit, read from the vocabulary datagen wrote."""
    vocab = Vocabulary(vocab_file)
    return Room(
        vocab_size=vocab.vocab_size,
        sentinels=sentinel_count(vocab.model_proto),
        inputs_length=inputs_length,
        targets_length=targets_length,
    )


def check_ready(data_dir: str, problem_name: str, hp: HParams, splits: tuple[str, ...] = ("train",)) -> None:
    """A one-line error when a component's shards of `splits` are missing, or a
    self-supervised component's examples cannot fit `hp`'s lengths or its vocabulary's
    sentinels: what reading would fail on, checked before a run writes anything."""
    components = registry.problem(problem_name).components()
    for task, _ in components:
        for split in splits:
            layout.data_files(data_dir, task.name, split)
        if task.objective is not None:
            vocab_file = task.vocab_file(data_dir)
            fit = room(vocab_file, int(hp.inputs_length), int(hp.targets_length))
            corruption.check_fits(task.objective, fit, vocab_file)
    if len(components) > 1:
        for split in splits:
            _rates(components, data_dir, split)


def documents(ds: tf.data.Dataset) -> tf.data.Dataset:
    """A self-supervised problem's parsed records -> its texts' token ids, EOS dropped."""

    def text(ex: dict[str, tf.Tensor]) -> tf.Tensor:
        ids = ex["targets"]
        return tf.cond(tf.reduce_any(tf.equal(ids[-1:], EOS_ID)), lambda: ids[:-1], lambda: ids)

    return ds.map(text, num_parallel_calls=tf.data.AUTOTUNE)


# The seed evaluation corrupts a self-supervised problem's dev text with.
EVAL_SEED = 0


def run_seed(seed: int | None) -> int:
    """The seed a run corrupts text with: `--random_seed`, else one drawn for this run."""
    return int(seed) if seed is not None else random.SystemRandom().randrange(1 << 31)


def examples(
    data_dir: str,
    problem_name: str,
    split: str,
    shuffle: bool,
    repeat: bool,
    seed: int | None = None,
    hp: HParams | None = None,
) -> tf.data.Dataset:
    """Parsed examples of a problem, or of a mixture's problems sampled by rate.

    A self-supervised problem's text is corrupted here, by its objective (anew each
    epoch, from `seed`), to fit `hp`'s sequence lengths.
    """
    components = registry.problem(problem_name).components()
    datasets = []
    for task, _ in components:
        ds = _problem_records(data_dir, task.name, split, shuffle, seed)
        if repeat:
            ds = ds.repeat()
        ds = ds.map(_parse, num_parallel_calls=tf.data.AUTOTUNE)
        if task.objective is not None:
            if hp is None:
                raise UserError(f"problem '{task.name}' is self-supervised: its examples need the model's lengths")
            vocab_file = task.vocab_file(data_dir)
            fit = room(vocab_file, int(hp.inputs_length), int(hp.targets_length))
            ds = corruption.corrupted(documents(ds), task.objective, fit, run_seed(seed), vocab_file)
        datasets.append(ds)
    if len(datasets) == 1:
        return datasets[0]
    rates = _rates(components, data_dir, split)
    total = sum(rates)
    return tf.data.Dataset.sample_from_datasets(
        datasets, weights=[r / total for r in rates], seed=seed, stop_on_empty_dataset=not repeat
    )


def prepare(ds: tf.data.Dataset, hp: HParams, pack: bool, batch: int, drop_remainder: bool = True) -> tf.data.Dataset:
    """EOS + truncation, packing or padding to static lengths, batching, prefetch."""
    lens = lengths(hp)
    ds = ds.map(lambda ex: {k: _fit(ex[k], lens[k]) for k in KEYS}, num_parallel_calls=tf.data.AUTOTUNE)
    if pack:
        ds = mtf_dataset.pack_dataset(ds, lens, keys=list(KEYS))
    else:
        ds = ds.map(
            lambda ex: {k: tf.pad(ex[k], [[0, lens[k] - tf.size(ex[k])]]) for k in KEYS},
            num_parallel_calls=tf.data.AUTOTUNE,
        ).map(lambda ex: {k: tf.reshape(ex[k], [lens[k]]) for k in KEYS})
    ds = ds.batch(batch, drop_remainder=drop_remainder)
    return ds.prefetch(tf.data.AUTOTUNE)


def input_fn(
    data_dir: str,
    problem_name: str,
    split: str,
    hp: HParams,
    training: bool,
    pack: bool | None = None,
    seed: int | None = None,
) -> Callable[..., tf.data.Dataset]:
    """An Estimator input_fn: shuffled, repeated and packed (hp.pack) when training.

    Evaluation reads the split once, unpacked, dropping a last partial batch (the model
    needs static shapes; t2t-eval pads the last batch itself when it must count it).
    """
    pack = hp.pack if pack is None and training else bool(pack)
    batch = batch_size(hp)

    def fn(params: dict[str, Any] | None = None) -> tf.data.Dataset:
        del params
        # Evaluation corrupts self-supervised text with one fixed seed, so checkpoints compare.
        run = seed if training else EVAL_SEED
        ds = examples(data_dir, problem_name, split, shuffle=training, repeat=training, seed=run, hp=hp)
        if training:
            ds = ds.shuffle(10_000, seed=seed)
        return prepare(ds, hp, pack=pack, batch=batch)

    return fn


def training_input_fn(
    data_dir: str, problem_name: str, hp: HParams, seed: int | None
) -> Callable[..., tf.data.Dataset]:
    """A training run's input_fn over the train split, once the share of examples its
    lengths cut is logged (`log_truncation`)."""
    log_truncation(data_dir, problem_name, "train", hp)
    return input_fn(data_dir, problem_name, "train", hp, training=True, seed=seed)


def count_truncated(data_dir: str, problem_name: str, split: str, hp: HParams, limit: int = 20_000) -> dict[str, Any]:
    """How many of (up to `limit`) examples exceed the sequence lengths; logged by training.

    Counted on the host before training so the number is exact for the records read,
    and cheap: a few seconds for the default limit.
    """
    lens = lengths(hp)
    counts = {"examples": 0, "inputs": 0, "targets": 0}
    for task, _ in registry.problem(problem_name).components():
        if task.objective is not None:  # its text is cut into pieces that fit, never truncated
            continue
        for path in layout.data_files(data_dir, task.name, split):
            for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
                ex = tf.train.Example.FromString(record).features.feature
                counts["examples"] += 1
                for k in KEYS:
                    ids = list(ex[k].int64_list.value)
                    n = len(ids) if ids and ids[-1] == EOS_ID else len(ids) + 1
                    counts[k] += n > lens[k]
                if counts["examples"] >= limit:
                    break
            if counts["examples"] >= limit:
                break
    return counts


# Truncated examples above this share get a WARNING with a length that would fit.
TRUNCATION_WARNING = 0.02


def log_truncation(data_dir: str, problem_name: str, split: str, hp: HParams) -> dict[str, Any]:
    """Counts the examples the sequence lengths cut; above a few percent, warns and names the
    length that would fit 99% of them (from datagen's length percentiles)."""
    counts = count_truncated(data_dir, problem_name, split, hp)
    if not counts["examples"]:  # only self-supervised problems: their text is cut to fit, never truncated
        return counts
    n = max(counts["examples"], 1)
    lens = lengths(hp)
    logging.info(
        "truncation (first %d %s examples): inputs %d (%.1f%%) longer than %d, targets %d (%.1f%%) longer than %d",
        counts["examples"],
        split,
        counts["inputs"],
        100.0 * counts["inputs"] / n,
        lens["inputs"],
        counts["targets"],
        100.0 * counts["targets"] / n,
        lens["targets"],
    )
    for key in KEYS:
        if counts[key] / n <= TRUNCATION_WARNING:
            continue
        percentiles = _length_percentiles(data_dir, problem_name, key)
        shown = ", ".join(f"{p} {v}" for p, v in percentiles.items() if p != "max")
        fits = f"; --hparams={key}_length={percentiles['p99']} fits 99% of them" if "p99" in percentiles else ""
        logging.warning(
            "%.1f%% of the %s examples have %s longer than %s_length=%d and are cut (their lengths in tokens, "
            "EOS included: %s)%s",
            100.0 * counts[key] / n,
            split,
            key,
            key,
            lens[key],
            shown or "unknown",
            fits,
        )
    return counts


def _length_percentiles(data_dir: str, problem_name: str, key: str) -> dict[str, int]:
    """The largest of each length percentile over the problem's components (meta.json)."""
    out: dict[str, int] = {}
    for task, _ in registry.problem(problem_name).components():
        summary = layout.read_meta(data_dir, task.name).get("lengths", {}).get(key, {})
        for name, value in summary.items():
            out[name] = max(out.get(name, 0), int(value))
    return out
