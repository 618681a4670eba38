"""The tensor side of t2tcli.data.objectives: noise masks, sentinels, and the tf.data stage
that turns a problem's documents into corrupted examples.

Every random draw is stateless, from a seed pair (the run's seed, the piece's index in
the stream), so a piece's corruption depends on nothing but those two numbers.
Imports: core, data (objectives).
"""

from __future__ import annotations

from t2tcli.compat import tf
from t2tcli.data.objectives import MIN_PIECE, IidDenoising, Objective, PrefixLM, Room, SpanCorruption
from t2tcli.errors import UserError


def _random_partition(total: tf.Tensor, parts: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """`parts` positive lengths summing to `total`, uniformly among such partitions."""
    order = tf.argsort(tf.random.stateless_uniform([total - 1], seed))
    starts = tf.cast(order < parts - 1, tf.int32)  # parts - 1 cut points among total - 1 gaps
    segment = tf.cumsum(tf.concat([[0], starts], axis=0))
    return tf.math.unsorted_segment_sum(tf.ones([total], tf.int32), segment, parts)


def span_mask(tokens: tf.Tensor, density: float, mean_span: float, seed: tf.Tensor) -> tf.Tensor:
    """T5's noise mask: kept and noised spans alternate, a kept span first, with the noise
    tokens and span count fixed by the length and random span lengths."""
    length = tf.size(tokens)
    n = tf.cast(length, tf.float32)
    noise = tf.clip_by_value(tf.cast(tf.round(n * density), tf.int32), 1, length - 1)
    spans = tf.maximum(tf.cast(tf.round(tf.cast(noise, tf.float32) / mean_span), tf.int32), 1)
    spans = tf.minimum(spans, tf.minimum(noise, length - noise))
    seeds = tf.random.experimental.stateless_split(seed, 2)
    noise_lengths = _random_partition(noise, spans, seeds[0])
    kept_lengths = _random_partition(length - noise, spans, seeds[1])
    interleaved = tf.reshape(tf.stack([kept_lengths, noise_lengths], axis=1), [-1])
    span_of_token = tf.repeat(tf.range(2 * spans), interleaved)
    return tf.equal(span_of_token % 2, 1)


def _spans_to_sentinels(tokens: tf.Tensor, drop: tf.Tensor, room: Room) -> tf.Tensor:
    """Each run of tokens where `drop` is true -> one sentinel: the k-th run becomes
    <extra_id_k> (id vocab_size - 1 - k; runs past the last sentinel reuse it)."""
    before = tf.concat([[False], drop[:-1]], axis=0)
    starts = tf.logical_and(drop, tf.logical_not(before))
    run = tf.minimum(tf.cumsum(tf.cast(starts, tf.int32)), room.sentinels)
    marked = tf.where(starts, room.vocab_size - run, tokens)
    return tf.boolean_mask(marked, tf.logical_not(tf.logical_and(drop, before)))


def split_by_mask(tokens: tf.Tensor, noise: tf.Tensor, room: Room) -> dict[str, tf.Tensor]:
    return {
        "inputs": _spans_to_sentinels(tokens, noise, room),
        "targets": _spans_to_sentinels(tokens, tf.logical_not(noise), room),
    }


def iid_mask(tokens: tf.Tensor, density: float, seed: tf.Tensor) -> tf.Tensor:
    """Each token noised with probability `density`, except the first: kept first, as in
    span_mask, so <extra_id_k> comes before the k-th noise span in the targets too."""
    noised = tf.random.stateless_uniform(tf.shape(tokens), seed) < density
    return tf.logical_and(noised, tf.range(tf.size(tokens)) > 0)


def split_at_random(tokens: tf.Tensor, seed: tf.Tensor, room: Room) -> dict[str, tf.Tensor]:
    """A prefix and the rest, both non-empty and each within its length."""
    n = tf.size(tokens)
    low = tf.maximum(1, n - (room.targets_length - 1))
    high = tf.maximum(tf.minimum(room.inputs_length - 1, n - 1), low)
    cut = tf.random.stateless_uniform([], seed, minval=low, maxval=high + 1, dtype=tf.int32)
    return {"inputs": tokens[:cut], "targets": tokens[cut:]}


def corrupt(objective: Objective, tokens: tf.Tensor, seed: tf.Tensor, room: Room) -> dict[str, tf.Tensor]:
    """One piece of token ids -> {"inputs", "targets"} (without EOS) as `objective` makes
    them, from a stateless seed [2]."""
    if isinstance(objective, SpanCorruption):
        mask = span_mask(tokens, objective.noise_density, objective.mean_noise_span_length, seed)
        return split_by_mask(tokens, mask, room)
    if isinstance(objective, IidDenoising):
        return split_by_mask(tokens, iid_mask(tokens, objective.noise_density, seed), room)
    if isinstance(objective, PrefixLM):
        return split_at_random(tokens, seed, room)
    raise UserError(
        f"objective {type(objective).__name__}: use SpanCorruption, IidDenoising or PrefixLM (from t2tcli.problem)"
    )


def check_fits(objective: Objective, room: Room, origin: str) -> int:
    """The objective's piece length at the room's lengths, or a one-line error when its
    examples cannot fit them or the vocabulary (`origin`) has too few sentinels.

    Training runs it before it writes anything, so a run refused here leaves nothing behind.
    """
    piece = objective.piece_length(room.inputs_length, room.targets_length)
    needed = objective.sentinels_needed(room.inputs_length, room.targets_length)
    if needed > room.sentinels:
        raise UserError(
            f"{origin}: a vocabulary of {room.vocab_size} ids with {room.sentinels} sentinels (<extra_id_N>); "
            f"{objective.name} at inputs_length={room.inputs_length} needs {needed}: remake it with "
            f"VocabSpec(extra_ids={max(needed, 100)}) or t2t-datagen --vocab_extra_ids={max(needed, 100)}"
        )
    return piece


def corrupted(documents: tf.data.Dataset, objective: Objective, room: Room, seed: int, origin: str) -> tf.data.Dataset:
    """Documents (1-D token ids, EOS-free) -> the objective's examples, without EOS.

    The documents are concatenated and cut into pieces of the objective's length (a last
    piece under `MIN_PIECE` tokens is dropped); piece k is corrupted from the stateless
    seed (seed, k). `origin` names the vocabulary in the error for a lack of sentinels.
    """
    piece = check_fits(objective, room, origin)
    pieces = documents.unbatch().batch(piece).filter(lambda tokens: tf.size(tokens) >= MIN_PIECE)

    def piece_example(index: tf.Tensor, tokens: tf.Tensor) -> dict[str, tf.Tensor]:
        pair = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)])
        return corrupt(objective, tokens, pair, room)

    return pieces.enumerate().map(piece_example, num_parallel_calls=tf.data.AUTOTUNE)
