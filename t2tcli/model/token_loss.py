"""Training's cross-entropy as fused functions of the logits, in float32.

mesh-tensorflow builds the loss from a dozen element-wise ops over the
[batch, length, vocab] logits (a one-hot target tensor, max, subtract, exp, sum,
log-softmax, product with the targets, and as many again for the gradient). Each op is
a full pass over memory, and all run in the activation dtype: in bfloat16 the
log-partition is a sum of 32,128 bfloat16 terms. At T5's shape these passes took about
as long as the logits' own matmul, and on CPUs nothing fuses them.

Here XLA-compiled functions do that work in float32, in as few passes over the logits
as the maths allows. The forward pass reads them twice (TensorFlow's row maximum, then
one XLA pass for each token's loss and its gradient's factor); the backward pass reads
them once more and writes the gradient, already scaled by each token's incoming
gradient. TensorFlow's fused softmax cross-entropy kernel has no z-loss or label
smoothing. The loss is mesh-tensorflow's, more exactly rounded. XLA compiles only this
element-wise work: the matmuls stay with oneDNN. `t2tcli.model.gin_bindings` chooses it
off TPU (where XLA fuses mesh-tensorflow's ops anyway) when no mesh dimension splits
the vocabulary, as each slice needs whole rows.
"""

from __future__ import annotations

from typing import Any

import gin

from t2tcli.compat import tf

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf


def _top(logits: tf.Tensor) -> tf.Tensor:
    """Each row's largest logit, in float32 with a trailing axis of 1.

    TensorFlow's own reduction, not XLA's: a maximum is exact in any dtype, TensorFlow's
    kernel reduces rows on every core, and XLA's CPU code reduces them several times
    slower. A 16-bit float's row is reduced as integers (`_top_of_16_bit_floats`), which
    TensorFlow's kernels reduce in vector registers and its bfloat16 kernel does not.
    """
    if logits.dtype in (tf.bfloat16, tf.float16):
        return tf.cast(_top_of_16_bit_floats(logits), tf.float32)
    return tf.cast(tf.reduce_max(logits, axis=-1, keepdims=True), tf.float32)


def _top_of_16_bit_floats(logits: tf.Tensor) -> tf.Tensor:
    """The row maxima of 16-bit floats, bit for bit, from integer reductions of their bits.

    A sign-magnitude float read as a signed integer orders the non-negative floats
    as the floats order, above every negative one: where a row holds a number >= 0, the
    integer maximum is the float maximum. Among negative floats the order is reversed,
    so a row with none >= 0 takes the integer minimum, computed only if some row needs it.
    """
    bits = tf.bitcast(logits, tf.int16)
    highest = tf.reduce_max(bits, axis=-1, keepdims=True)
    has_non_negative = highest >= 0
    chosen = tf.cond(
        tf.reduce_all(has_non_negative),
        lambda: highest,
        lambda: tf.where(has_non_negative, highest, tf.reduce_min(bits, axis=-1, keepdims=True)),
    )
    return tf.bitcast(chosen, logits.dtype)


@tf.function(jit_compile=True)
def _loss_and_scale(
    logits: tf.Tensor, targets: tf.Tensor, top: tf.Tensor, z_loss: float, on_value: float, off_value: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-token loss and the factor its gradient puts on exp(x - top), in float32.

    loss = logZ - sum_v soft_v * x_v + z_loss * logZ^2, soft = off_value except on_value
    at the target; d(loss)/dx = scale * exp(x - top) - soft, scale = (1 + 2 z_loss logZ) / Z'
    with Z' = sum_v exp(x_v - top). The target's logit is gathered, so without label
    smoothing this is one pass over the logits.
    """
    total = tf.reduce_sum(tf.exp(tf.cast(logits, tf.float32) - top), axis=-1, keepdims=True)
    log_z = top + tf.math.log(total)
    target_logit = tf.cast(tf.gather(logits, targets, batch_dims=targets.shape.rank), tf.float32)[..., None]
    picked = on_value * target_logit
    if off_value:
        row_sum = tf.reduce_sum(tf.cast(logits, tf.float32), axis=-1, keepdims=True)
        picked = (on_value - off_value) * target_logit + off_value * row_sum
    loss = log_z - picked + z_loss * tf.square(log_z)
    return tf.squeeze(loss, -1), tf.squeeze((1.0 + 2.0 * z_loss * log_z) / total, -1)


@tf.function(jit_compile=True)
def _gradient(
    logits: tf.Tensor,
    targets: tf.Tensor,
    top: tf.Tensor,
    scale: tf.Tensor,
    token_grads: tf.Tensor,
    on_value: float,
    off_value: float,
) -> tf.Tensor:
    """d(loss)/d(logits) times each token's incoming gradient, rounded once to the logits' dtype."""
    incoming = token_grads[..., None]
    soft = tf.where(
        tf.equal(tf.range(tf.shape(logits)[-1]), targets[..., None]), on_value * incoming, off_value * incoming
    )
    exps = tf.exp(tf.cast(logits, tf.float32) - top[..., None])
    return tf.cast(exps * (scale * token_grads)[..., None] - soft, logits.dtype)


def token_loss(
    logits: mtf.Tensor, targets: mtf.Tensor, vocab_dim: mtf.Dimension, z_loss: float, label_smoothing: float
) -> mtf.Tensor:
    """Each token's loss (float32, targets' shape), with its gradient to the logits.

    The forward pass keeps two floats a token (the row's largest logit and the gradient's
    factor), not a gradient the size of the logits: the backward pass builds that in one
    pass over the logits with each token's incoming gradient already known, so it is
    written and rounded once, and evaluation never builds it.
    """
    order = targets.shape.dims + [vocab_dim]
    if logits.shape.dims != order:
        logits = mtf.transpose(logits, mtf.Shape(order))
    off = label_smoothing / vocab_dim.size
    on = 1.0 - label_smoothing + off
    splittable = targets.shape.dims

    def forward(x: tf.Tensor, t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        top = _top(x)
        loss, scale = _loss_and_scale(x, t, top, float(z_loss), on, off)  # constants compiled in
        return loss, tf.squeeze(top, -1), scale

    def grad(op: Any, dloss: mtf.Tensor, *unused: mtf.Tensor | None) -> list[mtf.Tensor | None]:
        del unused  # the row maxima and factors only feed this function
        top, scale = op.outputs[1:]
        dlogits = mtf.slicewise(
            lambda x, t, m, s, d: _gradient(x, t, m, s, d, on, off),
            [op.inputs[0], op.inputs[1], top, scale, dloss],
            logits.shape,
            logits.dtype,
            splittable_dims=splittable,
            name="gradient",
        )
        return [dlogits, None]

    loss, _, _ = mtf.slicewise(
        forward,
        [logits, targets],
        output_shape=[targets.shape] * 3,
        output_dtype=[tf.float32] * 3,
        splittable_dims=splittable,
        grad_function=grad,
        name="token_loss",
    )
    return loss


@gin.configurable(module="t2tcli")
def fused_loss(
    model: Any, context: Any, logits: mtf.Tensor, targets: mtf.Tensor, vocab_dim: mtf.Dimension
) -> mtf.Tensor:
    """`Unitransformer.loss_fn`: the mean over the batch's target positions of the weighted
    token loss, as mesh-tensorflow's `_compute_loss` defines it, summed in float32."""
    if model.loss_on_targets_only:
        raise ValueError("t2tcli's fused loss does not mask delimited inputs (loss_on_targets_only)")
    z_loss = model.z_loss if context.train else 0.0
    per_token = token_loss(logits, mtf.maximum(targets, 0), vocab_dim, z_loss, model.label_smoothing)
    weights = mtf.cast(mtf.greater(targets, 0), tf.float32)
    return mtf.reduce_sum(per_token * weights) / model.loss_denominator(targets, context.num_microbatches)
