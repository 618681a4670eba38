"""The fast engine's search loops: greedy, sampled and beam decoding over
`t2tcli.fast_decode`'s incremental decoder step.

fast_decode computes the model (encoder, one decoder step with its growing caches, the
logits); this module decides which tokens to feed it next and when to stop. Both are
plain TensorFlow on one device, and what the model_fn's PREDICT and the SavedModel run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from t2tcli.compat import tf
from t2tcli.fast_decode import NEG_INF, Caches, Encoded, Stepper, Weights, encode, logits_blocks, top_log_probs
from t2tcli.vocab import EOS_ID

# Finished inputs leave the decode loop once at least this share of the inputs still
# in it has finished: each step then computes only the rows that can still change, as
# a batch's lines end at different lengths. Dropping them copies the encoder's keys and
# values of those that stay (and, for greedy, their caches), so it waits for a share
# rather than happening at every line's end.
COMPACT_SHARE = 0.25


@dataclasses.dataclass
class Decoded:
    """A batch's decode: int32 [batch, length] ids (0 after the first EOS), float32 [batch]
    scores, the int32 scalar number of steps the loop ran, and the int32 scalar number
    of rows it computed, summed over its steps (less than rows x steps when finished
    inputs left the loop)."""

    ids: tf.Tensor
    scores: tf.Tensor
    steps: tf.Tensor
    row_steps: tf.Tensor


def _while(cond: Callable, body: Callable, fixed: tuple, leaving: tuple, caches: Caches) -> list[tf.Tensor]:
    """tf.while_loop over `fixed` (shapes that do not change), then `leaving` (per input or
    per row: fewer once finished inputs leave), then the caches' loop_vars()."""
    shapes = (
        *(t.shape for t in fixed),
        *(tf.TensorShape([None, *t.shape[1:]]) for t in leaving),
        *caches.loop_shapes(),
    )
    initial = (*fixed, *leaving, *caches.loop_vars())
    return tf.while_loop(cond, body, initial, shape_invariants=shapes, parallel_iterations=1)


def _should_leave(finished: tf.Tensor) -> tf.Tensor:
    """Whether the finished entries of bool [inputs] leave the loop now (see COMPACT_SHARE);
    never all of them: the loop ends then anyway."""
    gone = tf.reduce_sum(tf.cast(finished, tf.int32))
    count = tf.size(finished)
    share = tf.cast(gone, tf.float32) >= COMPACT_SHARE * tf.cast(count, tf.float32)
    return (gone > 0) & (gone < count) & share


def _record(results: tuple[tf.Tensor, ...], slot: tf.Tensor, values: tuple[tf.Tensor, ...]) -> list[tf.Tensor]:
    """`results` (whole-batch tensors) with rows `slot` set to `values`."""
    at = slot[:, None]
    return [tf.tensor_scatter_nd_update(r, at, v) for r, v in zip(results, values, strict=True)]


def _top_k_filter(logits: tf.Tensor, top_k: int) -> tf.Tensor:
    kth = tf.math.top_k(logits, k=top_k).values[:, -1:]
    return tf.where(logits < kth, NEG_INF, logits)


def sample(
    w: Weights, inputs: tf.Tensor, length: int, temperature: float = 0.0, top_k: int = 0, scores: bool = True
) -> Decoded:
    """Greedy (temperature 0) or sampled decode; without `scores`, the scores are zeros."""
    rows = int(inputs.shape[0])
    stepper = Stepper(w, encode(w, inputs), length)
    encoded = stepper.encoded.tensors()

    def body(step, row_steps, out_ids, out_total, prev, done, total, ids, slot, *rest):  # noqa: ANN001, ANN202
        enc, caches = Encoded.from_tensors(rest[: len(encoded)]), list(rest[len(encoded) :])
        logits, caches = stepper(step, prev, caches, enc)
        n = tf.shape(prev)[0]
        if temperature > 0:
            chooser = logits / temperature
            if top_k:
                chooser = _top_k_filter(chooser, top_k)
            token = tf.cast(tf.random.categorical(chooser, 1)[:, 0], tf.int32)
        else:
            token = tf.argmax(logits, axis=-1, output_type=tf.int32)
        token = tf.where(done, 0, token)
        if scores:
            # log p(token): its logit less the log-sum-exp, with no [rows, vocab] log-softmax.
            # A padding id (which an undertrained model may emit) scores 0, as in teacher forcing.
            logp = tf.gather(logits, token, batch_dims=1) - tf.reduce_logsumexp(logits, axis=-1)
            total += tf.where(done | tf.equal(token, 0), 0.0, logp)
        ids = tf.tensor_scatter_nd_update(ids, tf.stack([tf.range(n), tf.fill([n], step)], axis=1), token)
        done = done | tf.equal(token, EOS_ID)
        staying = (token, done, total, ids, slot, *enc.tensors(), *caches)

        def leave() -> tuple:
            gone, kept = tf.where(done)[:, 0], tf.where(~done)[:, 0]
            out = _record((out_ids, out_total), tf.gather(slot, gone), (tf.gather(ids, gone), tf.gather(total, gone)))
            return (*out, *(tf.gather(t, kept) for t in staying))

        out = tf.cond(_should_leave(done), leave, lambda: (out_ids, out_total, *staying))
        return (step + 1, row_steps + n, *out)

    def cond(step, row_steps, out_ids, out_total, prev, done, *_):  # noqa: ANN001, ANN202
        return (step < length) & ~tf.reduce_all(done)

    fixed = (tf.constant(0), tf.constant(0), tf.zeros([rows, length], tf.int32), tf.zeros([rows], tf.float32))
    leaving = (
        tf.zeros([rows], tf.int32),
        tf.zeros([rows], tf.bool),
        tf.zeros([rows], tf.float32),
        tf.zeros([rows, length], tf.int32),
        tf.range(rows),
        *encoded,
    )
    step, row_steps, out_ids, out_total, _, _, total, ids, slot = _while(cond, body, fixed, leaving, stepper.caches)[:9]
    out_ids, out_total = _record((out_ids, out_total), slot, (ids, total))
    return Decoded(out_ids, out_total, step, row_steps)


def _length_penalty(length: tf.Tensor, alpha: float) -> tf.Tensor:
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(w: Weights, inputs: tf.Tensor, length: int, beam_size: int, alpha: float) -> Decoded:
    """Beam search: each input's best finished hypothesis, by log-probability /
    ((5 + length) / 6) ** alpha, and its score as teacher forcing computes it.

    An input with no hypothesis ending in EOS within `length` steps gets its most
    probable unfinished one. An input is settled when none of its unfinished hypotheses
    can still beat its best finished one: its answer can no longer change, so settled
    inputs leave the loop (COMPACT_SHARE), and the loop stops when all are settled.
    Cache rows follow their hypotheses as the next step appends to them; rows of inputs
    that left are dropped by the same gather. Hypotheses are ranked by all their tokens'
    log-probabilities, as mesh-tensorflow ranks them; the score reported leaves out
    padding ids (which an undertrained model may emit), as teacher forcing does.
    """
    batch, k = int(inputs.shape[0]), beam_size
    stepper = Stepper(w, encode(w, inputs), length, beams=k)
    encoded = stepper.encoded.tensors()
    blocks = logits_blocks(w, batch * k)
    neg = tf.constant(-1e30)

    def settled(alive_logp: tf.Tensor, fin_score: tf.Tensor) -> tf.Tensor:
        return fin_score[:, 0] >= alive_logp[:, 0] / _length_penalty(length, alpha)

    def answers(alive_ids, alive_kept, fin_ids, fin_score, fin_logp):  # noqa: ANN001, ANN202
        finished = fin_score[:, 0] > neg / 2
        ids = tf.where(finished[:, None], fin_ids[:, 0], alive_ids[:, 0])
        return ids, tf.where(finished, fin_logp[:, 0], alive_kept[:, 0])

    def body(step, row_steps, out_ids, out_scores, source, *rest):  # noqa: ANN001, ANN202
        alive_ids, alive_logp, alive_kept, fin_ids, fin_score, fin_logp, slot = rest[:7]
        enc = Encoded.from_tensors(rest[7 : 7 + len(encoded)])
        caches = list(rest[7 + len(encoded) :])
        n = tf.shape(alive_logp)[0]
        rows = n * k
        prev = tf.reshape(tf.gather(alive_ids, tf.maximum(step - 1, 0), axis=2), [rows])
        prev = tf.where(step > 0, prev, 0)
        x, caches = stepper.hidden(step, prev, caches, enc, source)
        # A row's 2k best tokens hold every candidate of it that can be among its input's
        # 2k best (its hypothesis' log-probability is the same for all its tokens): no
        # [rows, vocab] log-softmax, sum or top-k over [inputs, k * vocab] is needed.
        # Ties go to the lower token id in either order.
        top_logp, top_tokens = top_log_probs(w, x, 2 * k, blocks)  # [rows, 2k]
        logp = tf.maximum(top_logp, neg)
        candidates = tf.reshape(alive_logp[:, :, None] + tf.reshape(logp, [n, k, 2 * k]), [n, 2 * k * k])
        cand_logp, flat = tf.math.top_k(candidates, k=2 * k)  # [inputs, 2k]
        parent = flat // (2 * k)
        token = tf.gather(tf.reshape(top_tokens, [n, 2 * k * k]), flat, batch_dims=1)
        step_logp = cand_logp - tf.gather(alive_logp, parent, batch_dims=1)
        cand_kept = tf.gather(alive_kept, parent, batch_dims=1) + tf.where(tf.equal(token, 0), 0.0, step_logp)
        cand_ids = tf.gather(alive_ids, parent, batch_dims=1)  # [inputs, 2k, length]
        cand_ids = tf.where(tf.equal(tf.range(length)[None, None, :], step), token[:, :, None], cand_ids)
        is_eos = tf.equal(token, EOS_ID)
        # The k best candidates that go on.
        alive_logp, keep = tf.math.top_k(tf.where(is_eos, neg, cand_logp), k=k)
        alive_ids = tf.gather(cand_ids, keep, batch_dims=1)
        alive_kept = tf.gather(cand_kept, keep, batch_dims=1)
        source = tf.gather(parent, keep, batch_dims=1) + tf.range(n)[:, None] * k  # [inputs, k]
        # The k best finished hypotheses, old and new.
        new_score = tf.where(is_eos, cand_logp / _length_penalty(step + 1, alpha), neg)
        all_score = tf.concat([fin_score, new_score], axis=1)
        fin_score, best = tf.math.top_k(all_score, k=k)
        fin_ids = tf.gather(tf.concat([fin_ids, cand_ids], axis=1), best, batch_dims=1)
        fin_logp = tf.gather(tf.concat([fin_logp, cand_kept], axis=1), best, batch_dims=1)
        per_input = (source, alive_ids, alive_logp, alive_kept, fin_ids, fin_score, fin_logp, slot, *enc.tensors())
        done = settled(alive_logp, fin_score)

        def leave() -> tuple:
            # The caches keep their rows until the next step gathers them by `source`.
            gone, kept = tf.where(done)[:, 0], tf.where(~done)[:, 0]
            ids, scores = answers(*(tf.gather(t, gone) for t in (alive_ids, alive_kept, fin_ids, fin_score, fin_logp)))
            out = _record((out_ids, out_scores), tf.gather(slot, gone), (ids, scores))
            return (*out, *(tf.gather(t, kept) for t in per_input))

        out = tf.cond(_should_leave(done), leave, lambda: (out_ids, out_scores, *per_input))
        return (step + 1, row_steps + rows, out[0], out[1], tf.reshape(out[2], [-1]), *out[3:], *caches)

    def cond(step, row_steps, out_ids, out_scores, source, alive_ids, alive_logp, alive_kept, fin_ids, fin_score, *_):  # noqa: ANN001, ANN202
        return (step < length) & ~tf.reduce_all(settled(alive_logp, fin_score))

    fixed = (tf.constant(0), tf.constant(0), tf.zeros([batch, length], tf.int32), tf.zeros([batch], tf.float32))
    leaving = (
        tf.range(batch * k),
        tf.zeros([batch, k, length], tf.int32),
        tf.concat([tf.zeros([batch, 1]), tf.fill([batch, k - 1], neg)], axis=1),
        tf.zeros([batch, k]),
        tf.zeros([batch, k, length], tf.int32),
        tf.fill([batch, k], neg),
        tf.fill([batch, k], neg),
        tf.range(batch),
        *encoded,
    )
    out = _while(cond, body, fixed, leaving, stepper.caches)
    step, row_steps, out_ids, out_scores, _, alive_ids, _, alive_kept, fin_ids, fin_score, fin_logp, slot = out[:12]
    ids, scores = answers(alive_ids, alive_kept, fin_ids, fin_score, fin_logp)
    out_ids, out_scores = _record((out_ids, out_scores), slot, (ids, scores))
    return Decoded(out_ids, out_scores, step, row_steps)


def decode(w: Weights, inputs: tf.Tensor, settings: dict[str, Any], length: int) -> Decoded:
    """The decode the model_fn's decode settings ask for (see t2tcli.model); with
    `compute_scores` false, greedy and sampled decodes leave their scores 0."""
    if int(settings["beam_size"]) > 1:
        return beam_search(w, inputs, length, int(settings["beam_size"]), float(settings["alpha"]))
    temperature, top_k = float(settings["temperature"]), int(settings["top_k"])
    return sample(w, inputs, length, temperature, top_k, bool(settings.get("compute_scores", True)))
