"""Decoding and scoring the Bitransformer with plain TensorFlow ops on one device.

mesh-tensorflow's decode loop is written for meshes, and on one CPU or GPU that costs
several times the model's arithmetic: its key/value caches are rewritten whole each
step (multiplied by one-hot masks), every step runs many small einsums and
transposes, the greedy loop first runs a full decoder pass over zeros to shape its
caches, and scores need a second, teacher-forced pass. This module computes the same
function from the same variables (T5 v1.0's layer layout, as `t2tcli.model.gin_bindings`
configures it): inputs cut to the batch's longest row, caches that grow by one
position per step, one fused q/k/v projection, encoder-decoder keys and values
computed once, scores summed while decoding, and (in `t2tcli.decode.search`, the greedy,
sampled and beam loops over `t2tcli.decode.fast_step`'s decoder step) a loop from which finished
inputs drop out and which stops when every row has ended.

The model_fn uses it for PREDICT on a one-device mesh; TPUs and model-parallel meshes
keep mesh-tensorflow's decode. `tests/test_fast_decode.py` checks that both give the
same teacher-forced scores and the same greedy and beam decodes.

This module holds the layers, the encoder and teacher-forced scoring; beside it,
fast_kernels (products and attention per machine), fast_weights (the variables),
fast_step (the incremental decoder step) and fast_top_k (a step's best next tokens).

Imports: core and decode (fast_kernels, fast_weights).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from t2tcli.compat import tf
from t2tcli.decode import fast_kernels
from t2tcli.decode.fast_weights import Dims, Weights

# mesh-tf's attention bias for a hidden position, and its relative-position bucketing.
NEG_INF = -1e9
MAX_DISTANCE = 128
RMS_EPSILON = 1e-6


def relative_buckets(relative_position: tf.Tensor, bidirectional: bool, num_buckets: int) -> tf.Tensor:
    """T5's bucket of each (memory position - query position), as mesh-tf computes it."""
    n = -relative_position
    out = tf.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        out += tf.cast(n < 0, tf.int32) * num_buckets
        n = tf.abs(n)
    else:
        n = tf.maximum(n, 0)
    max_exact = num_buckets // 2
    scaled = tf.math.log(tf.cast(n, tf.float32) / max_exact) / math.log(MAX_DISTANCE / max_exact)
    large = tf.minimum(max_exact + tf.cast(scaled * (num_buckets - max_exact), tf.int32), num_buckets - 1)
    return out + tf.where(n < max_exact, n, large)


def position_bias(table: tf.Tensor, queries: int | tf.Tensor, keys: int | tf.Tensor, bidirectional: bool) -> tf.Tensor:
    """[heads, queries, keys] float32 bias: relative-position bias, plus the causal mask
    when not bidirectional."""
    q = tf.range(queries)[:, None]
    k = tf.range(keys)[None, :]
    buckets = relative_buckets(k - q, bidirectional, int(table.shape[-1]))
    bias = tf.gather(table, buckets, axis=1)
    if not bidirectional:
        bias += tf.where(k > q, NEG_INF, 0.0)
    return bias


def rms_norm(x: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """T5's RMS norm, computed in float32 and returned in x's dtype: over a 16-bit
    encoder's [batch, length, d_model] that is faster than TensorFlow's 16-bit element-wise
    kernels, and it rounds once where they round at each op."""
    with tf.name_scope("rms_norm"):
        xf = tf.cast(x, tf.float32)
        variance = tf.reduce_mean(tf.square(xf), axis=-1, keepdims=True)
        return tf.cast(xf * tf.math.rsqrt(variance + RMS_EPSILON) * tf.cast(scale, tf.float32), x.dtype)


def heads(x: tf.Tensor, dims: Dims) -> tf.Tensor:
    """[batch, length, heads * d_kv] -> [batch, heads, length, d_kv]."""
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    return tf.transpose(tf.reshape(x, [batch, length, dims.num_heads, dims.d_kv]), [0, 2, 1, 3])


def split_heads(x: tf.Tensor, parts: int, dims: Dims) -> list[tf.Tensor]:
    """[batch, length, parts * heads * d_kv] -> `parts` tensors [batch, heads, length, d_kv].

    One transpose puts the parts first; slices of the first axis share its buffer. Split
    first, each part would be copied twice.
    """
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    by_part = tf.reshape(x, [batch, length, parts, dims.num_heads, dims.d_kv])
    return tf.unstack(tf.transpose(by_part, [2, 0, 3, 1, 4]), num=parts)


def merge_heads(x: tf.Tensor, dims: Dims) -> tf.Tensor:
    """[batch, heads, length, d_kv] -> [batch, length, heads * d_kv]."""
    batch, length = tf.shape(x)[0], tf.shape(x)[2]
    return tf.reshape(tf.transpose(x, [0, 2, 1, 3]), [batch, length, dims.inner])


def ffn(w: Weights, layer: dict[str, Any], x: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """x plus the FFN of its norm (scaled by `scale`, in x's dtype); the matmuls run in
    the activation dtype, and an x in that dtype is added inside the output product."""
    h = w.dense(w.cast(rms_norm(x, scale)), layer["wi"], relu_after=w.relu_ffn)
    if w.gated:
        gate, linear = tf.split(h, 2, axis=-1)
        h = w.activation(gate) * linear
    elif not w.relu_ffn:
        h = w.activation(h)
    if x.dtype == w.dims.dtype:
        return w.dense(h, layer["wo"], plus=x)
    return x + tf.cast(w.dense(h, layer["wo"]), x.dtype)


def _self_attention_full(w: Weights, layer: dict[str, Any], x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    h = rms_norm(x, layer["self_norm"])
    q, k, v = split_heads(w.dense(h, layer["self"]["qkv"]), 3, w.dims)
    o = fast_kernels.attend(q, k, v, bias)
    return w.dense(merge_heads(o, w.dims), layer["self"]["o"], plus=x)


def _padding_bias(visible: tf.Tensor) -> tf.Tensor:
    return tf.where(visible, 0.0, NEG_INF)


class Encoded(NamedTuple):
    """The encoder's output as the decoder reads it: per layer keys and values
    [batch, heads, inputs_length, d_kv], and the float32 bias [batch, 1, 1, length]
    that hides padding. A tuple, so decode loops carry it as a loop variable."""

    keys: list[tf.Tensor]
    values: list[tf.Tensor]
    bias: tf.Tensor


def trim_padding(ids: tf.Tensor) -> tf.Tensor:
    """int32 [batch, length] ids cut after the batch's last non-padding column.

    Batches are padded to one static length for the whole file (or the model's
    maximum), while a length-sorted batch of short lines needs a fraction of it; every
    position cut is one the encoder and each decoder step's attention no longer compute.
    Padding is masked everywhere it is seen, so results do not change.
    """
    columns = tf.range(1, tf.shape(ids)[1] + 1)
    used = tf.reduce_max(tf.where(ids > 0, columns[None, :], 0))
    return ids[:, : tf.maximum(used, 1)]


def encode(w: Weights, inputs: tf.Tensor) -> Encoded:
    """Runs the encoder on int32 [batch, length] inputs (0 = padding)."""
    with tf.name_scope("encoder"):
        return _encode(w, inputs)


def _encode(w: Weights, inputs: tf.Tensor) -> Encoded:
    inputs = trim_padding(inputs)
    length = tf.shape(inputs)[1]
    nonpad = inputs > 0
    # mesh-tf's encoder sequence id is min(inputs, 1): real tokens see real tokens, padding
    # sees padding.
    same = tf.equal(nonpad[:, :, None], nonpad[:, None, :])
    bias = position_bias(w.encoder_bias, length, length, bidirectional=True)[None] + _padding_bias(same)[:, None]
    x = tf.gather(w.embedding, inputs)
    for layer in w.encoder:
        x = ffn(w, layer, _self_attention_full(w, layer, x, bias), layer["ffn_norm"])
    x = rms_norm(x, w.encoder_final_norm)
    keys, values = [], []
    for layer in w.decoder:
        k, v = split_heads(w.dense(x, layer["cross"]["kv"]), 2, w.dims)
        keys.append(k)
        values.append(v)
    return Encoded(keys, values, _padding_bias(nonpad)[:, None, None, :])


def _cross_attention(w: Weights, layer: dict[str, Any], i: int, x: tf.Tensor, enc: Encoded) -> tf.Tensor:
    h = rms_norm(x, layer["cross_norm"])
    o = fast_kernels.attend(heads(w.dense(h, layer["cross"]["q"]), w.dims), enc.keys[i], enc.values[i], enc.bias)
    return w.dense(merge_heads(o, w.dims), layer["cross"]["o"], plus=x)


def projected(w: Weights, x: tf.Tensor) -> tf.Tensor:
    """The output projection's input from the decoder's last layer, in the activation
    dtype; the final norm returns x's dtype."""
    x = rms_norm(x, w.decoder_final_norm)
    if w.logits_scale != 1.0:
        x = x * w.logits_scale
    return w.cast(x)


def output_logits(w: Weights, x: tf.Tensor, float32: bool = True) -> tf.Tensor:
    """Logits from the decoder's last layer: float32, or (not `float32`) in the activation
    dtype the product rounds them to, for a reader that needs no float32 copy."""
    logits = fast_kernels.dense(projected(w, x), w.logits_kernel, packed=w.packed)
    return tf.cast(logits, tf.float32) if float32 else logits


def teacher_forced_logits(w: Weights, enc: Encoded, targets: tf.Tensor) -> tf.Tensor:
    """Float32 [batch, length, vocab] logits of each target given the ones before it."""
    length = int(targets.shape[1])
    shifted = tf.pad(targets[:, :-1], [[0, 0], [1, 0]])
    bias = position_bias(w.decoder_bias, length, length, bidirectional=False)[None]
    x = tf.gather(w.embedding, shifted)
    for i, layer in enumerate(w.decoder):
        x = _self_attention_full(w, layer, x, bias)
        x = ffn(w, layer, _cross_attention(w, layer, i, x, enc), layer["ffn_norm"])
    return output_logits(w, x)


def score(w: Weights, inputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """Sum of log p(target token) over each row's non-padding targets, float32 [batch]."""
    logits = teacher_forced_logits(w, encode(w, inputs), targets)
    logp = tf.gather(tf.nn.log_softmax(logits), targets, batch_dims=2)
    return tf.reduce_sum(logp * tf.cast(targets > 0, tf.float32), axis=1)
