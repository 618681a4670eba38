"""A decode step's most probable next tokens, without a [rows, vocab] tensor kept.

Beam search needs each row's 2k best tokens and their log-probabilities at every
step; the output projection, the top-k and the log-sum-exp run block by block over
the vocabulary, and the top-k first by chunk maxima, so each reads logits still in cache.
Greedy decoding's one best token is found by chunk maxima too.

Imports: core, decode (fast, fast_kernels, fast_weights).
"""

from __future__ import annotations

import math

from t2tcli.compat import tf
from t2tcli.decode import fast, fast_kernels
from t2tcli.decode.fast_weights import Weights

# Logits of one step are computed and reduced this many bytes at a time.
LOGITS_BLOCK_BYTES = 4 << 20
# Top-k within a block first keeps the k chunks of this many logits with the largest
# maxima; the k best logits of the block lie in those chunks.
TOP_K_CHUNK = 32
# A row's best token is looked for among the maxima of chunks of up to this many logits
# (the largest power of two that divides the vocabulary, if at least ARGMAX_MIN_CHUNK).
ARGMAX_CHUNK = 128
ARGMAX_MIN_CHUNK = 32


def logits_blocks(w: Weights, rows: int) -> list[tuple[int, tf.Tensor]]:
    """(first token id, kernel columns) blocks of the output projection such that `rows`
    rows of logits of one block take about LOGITS_BLOCK_BYTES.

    At beam search's row counts a step's whole [rows, vocab] logits (33 MB for 256 rows
    of T5's vocabulary) leave the CPU caches before the top-k and log-sum-exp read them
    back: per block they are still in cache, which makes the step's projection, top-k and
    log-sum-exp markedly faster. The kernel is split once per batch, outside the decode
    loop, so no step copies it.
    Blocks are whole TOP_K_CHUNKs wide where the vocabulary allows.
    """
    vocab = int(w.logits_kernel.shape[1])
    count = max(1, round(rows * vocab * 4 / LOGITS_BLOCK_BYTES))
    size = -(-vocab // count)
    size = -(-size // TOP_K_CHUNK) * TOP_K_CHUNK
    starts = list(range(0, vocab, size))
    return [(start, w.logits_kernel[:, start : start + size]) for start in starts]


def top_k_by_chunks(logits: tf.Tensor, k: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(values [rows, k], positions [rows, k], row maxima [rows, 1]) of float32 logits
    [rows, n]: the k largest of each row, best first, ties to the lower position.

    TensorFlow's CPU top-k costs a few nanoseconds a logit, a noticeable share of a beam
    search step at T5's vocabulary. A row's k best logits lie in the k chunks with the
    largest maxima (ties to the lower chunk, as to the lower position), so top-k runs
    over the n / TOP_K_CHUNK chunk maxima and then over the k chosen chunks' logits
    only. Those chunks are taken in position order, so ties still go to the lower
    position, and the top-k reads a small fraction of the logits.
    """
    n = int(logits.shape[1])
    chunks = n // TOP_K_CHUNK
    if n % TOP_K_CHUNK or chunks <= k:
        top, at = tf.math.top_k(logits, k=k)
        return top, at, tf.reduce_max(logits, axis=-1, keepdims=True)
    by_chunk = tf.reshape(logits, [-1, chunks, TOP_K_CHUNK])
    maxima = tf.reduce_max(by_chunk, axis=-1)
    kept = tf.sort(tf.math.top_k(maxima, k=k).indices, axis=-1)  # [rows, k], in position order
    candidates = tf.reshape(tf.gather(by_chunk, kept, batch_dims=1), [-1, k * TOP_K_CHUNK])
    top, at = tf.math.top_k(candidates, k=k)
    positions = tf.gather(kept, at // TOP_K_CHUNK, batch_dims=1) * TOP_K_CHUNK + at % TOP_K_CHUNK
    return top, positions, tf.reduce_max(maxima, axis=-1, keepdims=True)


def best_tokens(logits: tf.Tensor) -> tf.Tensor:
    """int32 [rows]: the position of each row's largest logit in [rows, n], ties to the
    lower position, as tf.argmax gives it (float32, or 16-bit logits as floats).

    TensorFlow's CPU argmax reads a row one logit at a time, a few percent of a greedy
    step at T5's vocabulary where a decode step's products are fast. A vectorized maximum
    per chunk reads the logits instead; the row's first maximum lies in the first chunk
    whose maximum is the row's, so argmax runs over the chunk maxima and that one chunk.
    On a CPU, 16-bit logits are reduced as integers (`_best_of_16_bit_floats`), with no
    float32 copy; a GPU (whose kernels reduce no int16) reduces them as float32.
    """
    n = int(logits.shape[1])
    chunk = math.gcd(n, ARGMAX_CHUNK)
    sixteen_bit = logits.dtype in (tf.bfloat16, tf.float16)
    if sixteen_bit and (chunk < ARGMAX_MIN_CHUNK or fast_kernels.machine().device != "cpu"):
        logits, sixteen_bit = tf.cast(logits, tf.float32), False
    if chunk < ARGMAX_MIN_CHUNK:
        return tf.argmax(logits, axis=-1, output_type=tf.int32)
    by_chunk = tf.reshape(logits, [-1, n // chunk, chunk])
    if sixteen_bit:
        return _best_of_16_bit_floats(logits, by_chunk)
    return _best_in_chunks(by_chunk, tf.reduce_max(by_chunk, axis=-1))


def _best_in_chunks(by_chunk: tf.Tensor, maxima: tf.Tensor) -> tf.Tensor:
    """The best position of logits [rows, chunks, chunk] whose chunk maxima are `maxima`."""
    best_chunk = tf.argmax(tf.cast(maxima, tf.float32), axis=-1, output_type=tf.int32)
    within = tf.cast(tf.gather(by_chunk, best_chunk, batch_dims=1), tf.float32)
    return best_chunk * int(by_chunk.shape[-1]) + tf.argmax(within, axis=-1, output_type=tf.int32)


def _best_of_16_bit_floats(logits: tf.Tensor, by_chunk: tf.Tensor) -> tf.Tensor:
    """best_tokens of 16-bit logits [rows, n] (`by_chunk`: [rows, chunks, chunk]).

    A sign-magnitude float read as a signed integer orders the positive floats as the
    floats order, above zero and every negative one. So where a row's largest integer is
    a positive finite float, the chunks' integer maxima are exact wherever a chunk holds
    a positive number, and lower than the row's maximum elsewhere: the first chunk holding
    the row's maximum is found from them. A batch with some row of no positive number (or
    a NaN) is reduced as float32 instead.
    """
    highest = tf.reduce_max(tf.bitcast(by_chunk, tf.int16), axis=-1)  # [rows, chunks]
    row_highest = tf.reduce_max(highest, axis=-1)
    infinity = tf.bitcast(tf.constant(float("inf"), logits.dtype), tf.int16)
    positive = tf.reduce_all((row_highest > 0) & (row_highest <= infinity))
    return tf.cond(
        positive,
        lambda: _best_in_chunks(by_chunk, tf.bitcast(highest, logits.dtype)),
        lambda: best_tokens(tf.cast(logits, tf.float32)),
    )


def _log_sum_exp(logits: tf.Tensor, peak: tf.Tensor, at_peak: tf.Tensor) -> tf.Tensor:
    """[rows, 1] log-sum-exp of float32 logits [rows, n] whose row maxima `peak` lie at `at_peak`.

    Either the maximum less the log of its probability (at least 1 / n, so it does not
    underflow) from one softmax kernel, or the shifted exps summed
    (t2tcli.model.kernel_layout.log_sum_exp_by_softmax says which is faster here).
    """
    if fast_kernels.log_sum_exp_by_softmax():
        return peak - tf.math.log(tf.gather(tf.nn.softmax(logits), at_peak, batch_dims=1))
    return tf.math.log(tf.reduce_sum(tf.exp(logits - peak), axis=-1, keepdims=True)) + peak


def top_log_probs(w: Weights, x: tf.Tensor, k: int, blocks: list[tuple[int, tf.Tensor]]) -> tuple[tf.Tensor, tf.Tensor]:
    """(float32 [rows, k] log-probabilities, int32 [rows, k] token ids) of each row's k most
    probable next tokens, best first, ties to the lower id; no [rows, vocab] tensor is kept."""
    h = fast.projected(w, x)
    values, ids, sums = [], [], []
    for start, kernel in blocks:
        logits = tf.cast(fast_kernels.matmul(h, kernel, packed=w.packed), tf.float32)
        top, at, peak = top_k_by_chunks(logits, k)
        values.append(top)
        ids.append(at + start)
        sums.append(_log_sum_exp(logits, peak, at[:, :1]))
    if len(blocks) == 1:
        return values[0] - sums[0], ids[0]
    top, at = tf.math.top_k(tf.concat(values, axis=1), k=k)
    lse = tf.reduce_logsumexp(tf.concat(sums, axis=1), axis=-1, keepdims=True)
    return top - lse, tf.gather(tf.concat(ids, axis=1), at, batch_dims=1)
