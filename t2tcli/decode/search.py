"""The fast engine's search loops: greedy, sampled and beam decoding over
`t2tcli.decode.fast_step`'s incremental decoder step.

The fast_* modules compute the model (encoder, one decoder step with its growing
caches, the logits); this module decides which tokens to feed it next and when to stop.
Both are plain TensorFlow on one device, and what the model_fn's PREDICT and the
SavedModel run. Each loop's variables are named tuples (`Loop`), which tf.while_loop
carries as they are.

Imports: core, data and decode (fast, fast_step, fast_top_k, fast_weights and settings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from t2tcli.compat import tf
from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.decode.fast import NEG_INF, Encoded, encode
from t2tcli.decode.fast_step import BeamCaches, Caches, Stepper
from t2tcli.decode.fast_top_k import best_tokens, logits_blocks, top_log_probs
from t2tcli.decode.fast_weights import Weights

if TYPE_CHECKING:
    from t2tcli.decode.settings import DecodeSettings

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


class Answers(NamedTuple):
    """The whole batch's answers, one row per input: set as inputs leave the loop."""

    ids: tf.Tensor  # int32 [batch, length]
    scores: tf.Tensor  # float32 [batch]


class Greedy(NamedTuple):
    """Greedy (or sampled) decoding's state, per input still in the loop."""

    prev: tf.Tensor  # int32 [inputs]: the token fed next
    done: tf.Tensor  # bool [inputs]: has ended
    total: tf.Tensor  # float32 [inputs]: the score so far
    ids: tf.Tensor  # int32 [inputs, length]: the tokens so far
    slot: tf.Tensor  # int32 [inputs]: the input's row of the batch


class Beams(NamedTuple):
    """Beam search's state, per input still in the loop (`source`: per row, k rows an input)."""

    source: tf.Tensor  # int32 [rows]: the cache row each row continues
    alive_ids: tf.Tensor  # int32 [inputs, k, length]: the k best unfinished hypotheses
    alive_logp: tf.Tensor  # float32 [inputs, k]: their log-probabilities (all tokens: the ranking)
    alive_kept: tf.Tensor  # float32 [inputs, k]: their scores (padding ids left out)
    fin_ids: tf.Tensor  # int32 [inputs, k, length]: the k best finished hypotheses
    fin_score: tf.Tensor  # float32 [inputs, k]: their length-penalized ranking
    fin_logp: tf.Tensor  # float32 [inputs, k]: their scores
    slot: tf.Tensor  # int32 [inputs]: the input's row of the batch


class Loop(NamedTuple):
    """A decode loop's variables. `rows`, `encoded` (and `caches`) hold the inputs still
    in the loop: fewer once finished inputs leave it."""

    step: tf.Tensor  # int32 scalar: steps run
    row_steps: tf.Tensor  # int32 scalar: rows computed, summed over the steps
    answers: Answers
    rows: Greedy | Beams
    encoded: Encoded
    caches: list[tf.Tensor]  # Caches.loop_vars() or BeamCaches.loop_vars()


def _while(cond: Callable, body: Callable, initial: Loop, caches: Caches | BeamCaches) -> Loop:
    """tf.while_loop over `initial`, each input's tensors free to lose rows."""

    def free_rows(t: tf.Tensor) -> tf.TensorShape:
        return tf.TensorShape([None, *t.shape[1:]])

    shapes = Loop(
        initial.step.shape,
        initial.row_steps.shape,
        tf.nest.map_structure(lambda t: t.shape, initial.answers),
        tf.nest.map_structure(free_rows, initial.rows),
        tf.nest.map_structure(free_rows, initial.encoded),
        caches.loop_shapes(),
    )
    return tf.while_loop(cond, body, initial, shape_invariants=shapes, parallel_iterations=1)


def _should_leave(finished: tf.Tensor) -> tf.Tensor:
    """Whether the finished entries of bool [inputs] leave the loop now (see COMPACT_SHARE);
    never all of them: the loop ends then anyway."""
    gone = tf.reduce_sum(tf.cast(finished, tf.int32))
    count = tf.size(finished)
    share = tf.cast(gone, tf.float32) >= COMPACT_SHARE * tf.cast(count, tf.float32)
    return (gone > 0) & (gone < count) & share


def _record(answers: Answers, slot: tf.Tensor, ids: tf.Tensor, scores: tf.Tensor) -> Answers:
    """`answers` with rows `slot` set to `ids` and `scores`."""
    at = slot[:, None]
    return Answers(
        tf.tensor_scatter_nd_update(answers.ids, at, ids), tf.tensor_scatter_nd_update(answers.scores, at, scores)
    )


def _leave(
    finished: tf.Tensor, answers: Answers, slot: tf.Tensor, answer: Callable[[tf.Tensor], tuple], staying: tuple
) -> tuple[Answers, tuple]:
    """(answers, staying) after the finished inputs left, when they leave now
    (_should_leave): their answers recorded (`answer(gone)`: ids and scores of the inputs
    `gone`) and every tensor of `staying` cut to the inputs that stay."""

    def leave() -> tuple[Answers, tuple]:
        gone, kept = tf.where(finished)[:, 0], tf.where(~finished)[:, 0]
        recorded = _record(answers, tf.gather(slot, gone), *answer(gone))
        return recorded, tf.nest.map_structure(lambda t: tf.gather(t, kept), staying)

    return tf.cond(_should_leave(finished), leave, lambda: (answers, staying))


def _top_k_filter(logits: tf.Tensor, top_k: int) -> tf.Tensor:
    kth = tf.math.top_k(logits, k=top_k).values[:, -1:]
    return tf.where(logits < kth, NEG_INF, logits)


def sample(
    w: Weights, inputs: tf.Tensor, length: int, temperature: float = 0.0, top_k: int = 0, scores: bool = True
) -> Decoded:
    """Greedy (temperature 0) or sampled decode; without `scores`, the scores are zeros."""
    rows = tf.shape(inputs)[0]
    stepper = Stepper(w, encode(w, inputs), length)

    # Greedy search without scores reads only each row's best token, which best_tokens
    # finds in the activation dtype as exactly as in float32 (in the engine's own session;
    # an exported graph keeps float32 logits and plain ops).
    float32 = temperature > 0 or scores or not w.held

    def body(step, row_steps, answers, state, enc, caches):  # noqa: ANN001, ANN202
        logits, caches = stepper(step, state.prev, caches, enc, float32=float32)
        n = tf.shape(state.prev)[0]
        if temperature > 0:
            chooser = logits / temperature
            if top_k:
                chooser = _top_k_filter(chooser, top_k)
            token = tf.cast(tf.random.categorical(chooser, 1)[:, 0], tf.int32)
        else:
            token = best_tokens(logits)
        token = tf.where(state.done, 0, token)
        total = state.total
        if scores:
            # log p(token): its logit less the log-sum-exp, with no [rows, vocab] log-softmax.
            # A padding id (which an undertrained model may emit) scores 0, as in teacher forcing.
            logp = tf.gather(logits, token, batch_dims=1) - tf.reduce_logsumexp(logits, axis=-1)
            total += tf.where(state.done | tf.equal(token, 0), 0.0, logp)
        ids = tf.tensor_scatter_nd_update(state.ids, tf.stack([tf.range(n), tf.fill([n], step)], axis=1), token)
        done = state.done | tf.equal(token, EOS_ID)
        state = Greedy(token, done, total, ids, state.slot)

        def answer(gone: tf.Tensor) -> tuple:
            return tf.gather(ids, gone), tf.gather(total, gone)

        answers, staying = _leave(done, answers, state.slot, answer, (state, enc, caches))
        return Loop(step + 1, row_steps + n, answers, *staying)

    def cond(step, row_steps, answers, state, *_):  # noqa: ANN001, ANN202
        return (step < length) & ~tf.reduce_all(state.done)

    initial = Loop(
        tf.constant(0),
        tf.constant(0),
        Answers(tf.zeros([rows, length], tf.int32), tf.zeros([rows], tf.float32)),
        Greedy(
            tf.zeros([rows], tf.int32),
            tf.zeros([rows], tf.bool),
            tf.zeros([rows], tf.float32),
            tf.zeros([rows, length], tf.int32),
            tf.range(rows),
        ),
        stepper.encoded,
        stepper.caches.loop_vars(),
    )
    out = _while(cond, body, initial, stepper.caches)
    answers = _record(out.answers, out.rows.slot, out.rows.ids, out.rows.total)
    return Decoded(answers.ids, answers.scores, out.step, out.row_steps)


def _length_penalty(length: tf.Tensor, alpha: float) -> tf.Tensor:
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(
    w: Weights,
    inputs: tf.Tensor,
    length: int,
    beam_size: int,
    alpha: float,
    all_beams: bool = False,
    batch_size: int | None = None,
) -> Decoded:
    """Beam search: each input's best finished hypothesis, by log-probability /
    ((5 + length) / 6) ** alpha, and its score as teacher forcing computes it. With
    `all_beams`, each input's `beam_size` hypotheses, best first (ids [batch, k, length],
    scores [batch, k]): the finished ones by that ranking, then unfinished ones by
    log-probability, as many as it takes.

    An input with no hypothesis ending in EOS within `length` steps gets its most
    probable unfinished one. An input is settled when none of its unfinished hypotheses
    can still beat its best finished one: its answer can no longer change, so settled
    inputs leave the loop (COMPACT_SHARE), and the loop stops when all are settled.
    Cache rows follow their hypotheses as the next step appends to them; rows of inputs
    that left are dropped by the same gather. Hypotheses are ranked by all their tokens'
    log-probabilities, as mesh-tensorflow ranks them; the score reported leaves out
    padding ids (which an undertrained model may emit), as teacher forcing does.
    `batch_size`: the most inputs a batch holds, where `inputs`' shape does not say.
    """
    batch, k = tf.shape(inputs)[0], beam_size
    stepper = Stepper(w, encode(w, inputs), length, beams=k)
    blocks = logits_blocks(w, (inputs.shape[0] or batch_size or 1) * k)
    neg = tf.constant(-1e30)
    beams_dim = [k] if all_beams else []

    def settled(beams: Beams) -> tf.Tensor:
        return beams.fin_score[:, 0] >= beams.alive_logp[:, 0] / _length_penalty(length, alpha)

    def best(beams: Beams, which: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """(ids, scores) of the inputs `which` (None: all): the best finished hypothesis,
        else the most probable unfinished one; with `all_beams`, k of them, best first."""
        fields = (beams.alive_ids, beams.alive_logp, beams.alive_kept, beams.fin_ids, beams.fin_score, beams.fin_logp)
        if which is not None:
            fields = tuple(tf.gather(t, which) for t in fields)
        alive_ids, alive_logp, alive_kept, fin_ids, fin_score, fin_logp = fields
        if all_beams:
            # Both lists are sorted already (top_k made them): the finished hypotheses
            # first, then as many unfinished ones as it takes to make k.
            done = tf.reduce_sum(tf.cast(fin_score > neg / 2, tf.int32), axis=1, keepdims=True)
            place = tf.range(k)[None, :]
            order = tf.where(place < done, place, k + place - done)
            ids = tf.gather(tf.concat([fin_ids, alive_ids], axis=1), order, batch_dims=1)
            return ids, tf.gather(tf.concat([fin_logp, alive_kept], axis=1), order, batch_dims=1)
        finished = fin_score[:, 0] > neg / 2
        ids = tf.where(finished[:, None], fin_ids[:, 0], alive_ids[:, 0])
        return ids, tf.where(finished, fin_logp[:, 0], alive_kept[:, 0])

    def body(step, row_steps, answers, beams, enc, caches):  # noqa: ANN001, ANN202
        n = tf.shape(beams.alive_logp)[0]
        rows = n * k
        prev = tf.reshape(tf.gather(beams.alive_ids, tf.maximum(step - 1, 0), axis=2), [rows])
        prev = tf.where(step > 0, prev, 0)
        x, caches = stepper.hidden(step, prev, caches, enc, beams.source)
        # A row's 2k best tokens hold every candidate of it that can be among its input's
        # 2k best (its hypothesis' log-probability is the same for all its tokens): no
        # [rows, vocab] log-softmax, sum or top-k over [inputs, k * vocab] is needed.
        # Ties go to the lower token id in either order.
        with tf.name_scope("logits"):
            top_logp, top_tokens = top_log_probs(w, x, 2 * k, blocks)  # [rows, 2k]
        logp = tf.maximum(top_logp, neg)
        candidates = tf.reshape(beams.alive_logp[:, :, None] + tf.reshape(logp, [n, k, 2 * k]), [n, 2 * k * k])
        cand_logp, flat = tf.math.top_k(candidates, k=2 * k)  # [inputs, 2k]
        parent = flat // (2 * k)
        token = tf.gather(tf.reshape(top_tokens, [n, 2 * k * k]), flat, batch_dims=1)
        step_logp = cand_logp - tf.gather(beams.alive_logp, parent, batch_dims=1)
        cand_kept = tf.gather(beams.alive_kept, parent, batch_dims=1) + tf.where(tf.equal(token, 0), 0.0, step_logp)
        cand_ids = tf.gather(beams.alive_ids, parent, batch_dims=1)  # [inputs, 2k, length]
        cand_ids = tf.where(tf.equal(tf.range(length)[None, None, :], step), token[:, :, None], cand_ids)
        is_eos = tf.equal(token, EOS_ID)
        # The k best candidates that go on.
        alive_logp, keep = tf.math.top_k(tf.where(is_eos, neg, cand_logp), k=k)
        alive_ids = tf.gather(cand_ids, keep, batch_dims=1)
        alive_kept = tf.gather(cand_kept, keep, batch_dims=1)
        source = tf.gather(parent, keep, batch_dims=1) + tf.range(n)[:, None] * k  # [inputs, k]
        # The k best finished hypotheses, old and new.
        new_score = tf.where(is_eos, cand_logp / _length_penalty(step + 1, alpha), neg)
        all_score = tf.concat([beams.fin_score, new_score], axis=1)
        fin_score, chosen = tf.math.top_k(all_score, k=k)
        fin_ids = tf.gather(tf.concat([beams.fin_ids, cand_ids], axis=1), chosen, batch_dims=1)
        fin_logp = tf.gather(tf.concat([beams.fin_logp, cand_kept], axis=1), chosen, batch_dims=1)
        beams = Beams(source, alive_ids, alive_logp, alive_kept, fin_ids, fin_score, fin_logp, beams.slot)
        # The caches kept by row keep their rows until the next step gathers them by
        # `source`; those kept by input lose the inputs that leave.
        by_row, by_input = stepper.caches.split(caches)
        answers, (beams, enc, by_input) = _leave(
            settled(beams), answers, beams.slot, lambda gone: best(beams, gone), (beams, enc, by_input)
        )
        caches = by_row + by_input
        beams = beams._replace(source=tf.reshape(beams.source, [-1]))
        return Loop(step + 1, row_steps + rows, answers, beams, enc, caches)

    def cond(step, row_steps, answers, beams, *_):  # noqa: ANN001, ANN202
        return (step < length) & ~tf.reduce_all(settled(beams))

    initial = Loop(
        tf.constant(0),
        tf.constant(0),
        Answers(tf.zeros([batch, *beams_dim, length], tf.int32), tf.zeros([batch, *beams_dim], tf.float32)),
        Beams(
            tf.range(batch * k),
            tf.zeros([batch, k, length], tf.int32),
            tf.concat([tf.zeros([batch, 1]), tf.fill([batch, k - 1], neg)], axis=1),
            tf.zeros([batch, k]),
            tf.zeros([batch, k, length], tf.int32),
            tf.fill([batch, k], neg),
            tf.fill([batch, k], neg),
            tf.range(batch),
        ),
        stepper.encoded,
        stepper.caches.loop_vars(),
    )
    out = _while(cond, body, initial, stepper.caches)
    answers = _record(out.answers, out.rows.slot, *best(out.rows))
    return Decoded(answers.ids, answers.scores, out.step, out.row_steps)


def decode(w: Weights, inputs: tf.Tensor, settings: DecodeSettings, length: int) -> Decoded:
    """The decode the model_fn's decode settings ask for (see t2tcli.train.model_fn); with
    `compute_scores` false, greedy and sampled decodes leave their scores 0."""
    if settings.beam_size > 1:
        return beam_search(
            w, inputs, length, settings.beam_size, settings.alpha, settings.return_beams, settings.batch_size
        )
    return sample(w, inputs, length, settings.temperature, settings.top_k, settings.compute_scores)
