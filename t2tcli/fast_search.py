"""The fast engine's search loops: greedy, sampled and beam decoding over
`t2tcli.fast_decode`'s incremental decoder step.

fast_decode computes the model (encoder, one decoder step with its growing caches, the
logits); this module decides which tokens to feed it next and when to stop. Both are
plain TensorFlow on one device, and what the model_fn's PREDICT and the SavedModel run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from t2tcli.compat import tf
from t2tcli.fast_decode import NEG_INF, Caches, Stepper, Weights, encode, logits_blocks, top_log_probs
from t2tcli.vocab import EOS_ID


def _while(cond: Callable, body: Callable, initial: tuple, caches: Caches) -> list[tf.Tensor]:
    """tf.while_loop over `initial`, whose last values are the caches' loop_vars()."""
    shapes = caches.loop_shapes()
    fixed = [t.shape for t in initial[: len(initial) - len(shapes)]]
    return tf.while_loop(cond, body, initial, shape_invariants=(*fixed, *shapes), parallel_iterations=1)


def _top_k_filter(logits: tf.Tensor, top_k: int) -> tf.Tensor:
    kth = tf.math.top_k(logits, k=top_k).values[:, -1:]
    return tf.where(logits < kth, NEG_INF, logits)


def sample(
    w: Weights, inputs: tf.Tensor, length: int, temperature: float = 0.0, top_k: int = 0, scores: bool = True
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Greedy (temperature 0) or sampled decode: (int32 [batch, length] ids, 0 after the
    first EOS; float32 [batch] sum of the model's log-probabilities of those ids, zeros
    without `scores`; int32 scalar number of steps the loop ran)."""
    rows = int(inputs.shape[0])
    stepper = Stepper(w, encode(w, inputs), length)

    def body(step, prev, done, total, ids, *caches):  # noqa: ANN001, ANN202
        logits, caches = stepper(step, prev, list(caches))
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
        ids = tf.tensor_scatter_nd_update(ids, tf.stack([tf.range(rows), tf.fill([rows], step)], axis=1), token)
        done = done | tf.equal(token, EOS_ID)
        return (step + 1, token, done, total, ids, *caches)

    def cond(step, prev, done, *_):  # noqa: ANN001, ANN202
        return (step < length) & ~tf.reduce_all(done)

    initial = (
        tf.constant(0),
        tf.zeros([rows], tf.int32),
        tf.zeros([rows], tf.bool),
        tf.zeros([rows], tf.float32),
        tf.zeros([rows, length], tf.int32),
        *stepper.caches.loop_vars(),
    )
    out = _while(cond, body, initial, stepper.caches)
    return out[4], out[3], out[0]


def _length_penalty(length: tf.Tensor, alpha: float) -> tf.Tensor:
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(
    w: Weights, inputs: tf.Tensor, length: int, beam_size: int, alpha: float
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Beam search: (int32 [batch, length] ids of each row's best finished hypothesis, by
    log-probability / ((5 + length) / 6) ** alpha; float32 [batch] its score as teacher
    forcing computes it; int32 scalar number of steps the loop ran).

    A row with no hypothesis ending in EOS within `length` steps gets its most probable
    unfinished one. The loop stops when no unfinished hypothesis of any row can still
    beat that row's best finished one. Cache rows follow their hypotheses as the next
    step appends to them. Hypotheses are ranked by all their tokens' log-probabilities,
    as mesh-tensorflow ranks them; the score reported leaves out padding ids (which an
    undertrained model may emit), as teacher forcing does.
    """
    batch, k = int(inputs.shape[0]), beam_size
    rows = batch * k
    stepper = Stepper(w, encode(w, inputs), length, beams=k)
    blocks = logits_blocks(w, rows)
    neg = tf.constant(-1e30)
    row_offsets = tf.range(batch)[:, None] * k  # [batch, 1]

    def body(step, source, alive_ids, alive_logp, alive_kept, fin_ids, fin_score, fin_logp, *caches):  # noqa: ANN001, ANN202
        prev = tf.reshape(tf.gather(alive_ids, tf.maximum(step - 1, 0), axis=2), [rows])
        prev = tf.where(step > 0, prev, 0)
        x, caches = stepper.hidden(step, prev, list(caches), source)
        # A row's 2k best tokens hold every candidate of it that can be among its input's
        # 2k best (its hypothesis' log-probability is the same for all its tokens): no
        # [rows, vocab] log-softmax, sum or top-k over [batch, k * vocab] is needed.
        # Ties go to the lower token id in either order.
        top_logp, top_tokens = top_log_probs(w, x, 2 * k, blocks)  # [rows, 2k]
        logp = tf.maximum(top_logp, neg)
        candidates = tf.reshape(alive_logp[:, :, None] + tf.reshape(logp, [batch, k, 2 * k]), [batch, 2 * k * k])
        cand_logp, flat = tf.math.top_k(candidates, k=2 * k)  # [batch, 2k]
        parent = flat // (2 * k)
        token = tf.gather(tf.reshape(top_tokens, [batch, 2 * k * k]), flat, batch_dims=1)
        step_logp = cand_logp - tf.gather(alive_logp, parent, batch_dims=1)
        cand_kept = tf.gather(alive_kept, parent, batch_dims=1) + tf.where(tf.equal(token, 0), 0.0, step_logp)
        cand_ids = tf.gather(alive_ids, parent, batch_dims=1)  # [batch, 2k, length]
        cand_ids = tf.where(tf.equal(tf.range(length)[None, None, :], step), token[:, :, None], cand_ids)
        is_eos = tf.equal(token, EOS_ID)
        # The k best candidates that go on.
        alive_logp, keep = tf.math.top_k(tf.where(is_eos, neg, cand_logp), k=k)
        alive_ids = tf.gather(cand_ids, keep, batch_dims=1)
        alive_kept = tf.gather(cand_kept, keep, batch_dims=1)
        source = tf.reshape(tf.gather(parent, keep, batch_dims=1) + row_offsets, [rows])
        # The k best finished hypotheses, old and new.
        new_score = tf.where(is_eos, cand_logp / _length_penalty(step + 1, alpha), neg)
        all_score = tf.concat([fin_score, new_score], axis=1)
        fin_score, best = tf.math.top_k(all_score, k=k)
        fin_ids = tf.gather(tf.concat([fin_ids, cand_ids], axis=1), best, batch_dims=1)
        fin_logp = tf.gather(tf.concat([fin_logp, cand_kept], axis=1), best, batch_dims=1)
        return (step + 1, source, alive_ids, alive_logp, alive_kept, fin_ids, fin_score, fin_logp, *caches)

    def cond(step, source, alive_ids, alive_logp, alive_kept, fin_ids, fin_score, *_):  # noqa: ANN001, ANN202
        best_possible = alive_logp[:, 0] / _length_penalty(length, alpha)
        settled = fin_score[:, 0] >= best_possible
        return (step < length) & ~tf.reduce_all(settled)

    first = tf.concat([tf.zeros([batch, 1]), tf.fill([batch, k - 1], neg)], axis=1)
    initial = (
        tf.constant(0),
        tf.range(rows),
        tf.zeros([batch, k, length], tf.int32),
        first,
        tf.zeros([batch, k]),
        tf.zeros([batch, k, length], tf.int32),
        tf.fill([batch, k], neg),
        tf.fill([batch, k], neg),
        *stepper.caches.loop_vars(),
    )
    out = _while(cond, body, initial, stepper.caches)
    steps, _, alive_ids, _, alive_kept, fin_ids, fin_score, fin_logp = out[:8]
    finished = fin_score[:, 0] > neg / 2
    ids = tf.where(finished[:, None], fin_ids[:, 0], alive_ids[:, 0])
    return ids, tf.where(finished, fin_logp[:, 0], alive_kept[:, 0]), steps


def decode(
    w: Weights, inputs: tf.Tensor, settings: dict[str, Any], length: int
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(ids, scores, steps the loop ran) for the model_fn's decode settings (see t2tcli.model);
    with `compute_scores` false, greedy and sampled decodes leave their scores 0."""
    if int(settings["beam_size"]) > 1:
        return beam_search(w, inputs, length, int(settings["beam_size"]), float(settings["alpha"]))
    temperature, top_k = float(settings["temperature"]), int(settings["top_k"])
    return sample(w, inputs, length, temperature, top_k, bool(settings.get("compute_scores", True)))
