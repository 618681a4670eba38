"""Training's cross-entropy as one fused function of the logits, in float32.

mesh-tensorflow builds the loss from a dozen element-wise ops over the
[batch, length, vocab] logits (a one-hot target tensor, max, subtract, exp, sum,
log-softmax, product with the targets, and as many again for the gradient). Each op is
a full pass over memory, and all run in the activation dtype: in bfloat16 the
log-partition is a sum of 32,128 bfloat16 terms. At T5's shape these passes took about
as long as the logits' own matmul, and on CPUs nothing fuses them.

Here one XLA-compiled function gives, in float32, each token's loss and the loss's
gradient for every logit, so the backward pass is a single scale by each token's
incoming gradient; TensorFlow's fused softmax cross-entropy kernel works the same way,
but has no z-loss or label smoothing. The loss is mesh-tensorflow's, more exactly
rounded. XLA compiles only this element-wise work: the matmuls stay with oneDNN.
`t2tcli.model.gin_bindings` chooses it off TPU (where XLA fuses mesh-tensorflow's ops
anyway) when no mesh dimension splits the vocabulary, as each slice needs whole rows.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import gin

from t2tcli.compat import tf

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf


@tf.function(jit_compile=True)
def _loss_and_gradient(
    logits: tf.Tensor, targets: tf.Tensor, z_loss: float, on_value: float, off_value: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-token loss (float32) and d(loss)/d(logits) (logits' dtype); vocab is the last axis.

    loss = logZ - sum_v soft_v * x_v + z_loss * logZ^2, soft = off_value except on_value
    at the target; its gradient is (1 + 2 z_loss logZ) softmax(x) - soft.
    """
    x = tf.cast(logits, tf.float32)
    top = tf.reduce_max(x, axis=-1, keepdims=True)
    exps = tf.exp(x - top)
    total = tf.reduce_sum(exps, axis=-1, keepdims=True)
    log_z = top + tf.math.log(total)
    soft = tf.where(tf.equal(tf.range(tf.shape(x)[-1]), targets[..., None]), on_value, off_value)
    loss = log_z - tf.reduce_sum(soft * x, axis=-1, keepdims=True) + z_loss * tf.square(log_z)
    gradient = exps * ((1.0 + 2.0 * z_loss * log_z) / total) - soft
    return tf.squeeze(loss, -1), tf.cast(gradient, logits.dtype)


@tf.function(jit_compile=True)
def _scaled(gradient: tf.Tensor, token_grads: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.cast(gradient, tf.float32) * tf.cast(token_grads, tf.float32)[..., None], gradient.dtype)


def token_loss(
    logits: mtf.Tensor, targets: mtf.Tensor, vocab_dim: mtf.Dimension, z_loss: float, label_smoothing: float
) -> mtf.Tensor:
    """Each token's loss (float32, targets' shape), with its gradient to the logits."""
    order = targets.shape.dims + [vocab_dim]
    if logits.shape.dims != order:
        logits = mtf.transpose(logits, mtf.Shape(order))
    off = label_smoothing / vocab_dim.size
    constants = (float(z_loss), 1.0 - label_smoothing + off, off)  # compiled in
    splittable = targets.shape.dims

    def grad(op: Any, dloss: mtf.Tensor, dgradient: mtf.Tensor | None) -> list[mtf.Tensor | None]:
        del dgradient  # the gradient output only feeds this function
        scaled = mtf.slicewise(
            _scaled, [op.outputs[1], dloss], logits.shape, logits.dtype, splittable_dims=splittable, name="scale"
        )
        return [scaled, None]

    loss, _ = mtf.slicewise(
        lambda x, t: _loss_and_gradient(x, t, *constants),
        [logits, targets],
        output_shape=[targets.shape, logits.shape],
        output_dtype=[tf.float32, logits.dtype],
        splittable_dims=splittable,
        grad_function=grad,
        name="token_loss",
    )
    return loss


@functools.cache
def spend_first_compile_logs() -> None:
    """Compiles a trivial function with stderr pointed at /dev/null for that moment.

    A process's first XLA compile logs two INFO lines to stderr through absl, which
    TF_CPP_MIN_LOG_LEVEL does not silence in TensorFlow 2.15. Both are logged once per
    process, so a trainer spends them here, before it builds a graph and while nothing
    else writes. Not from inside model_fn: a session run there, in the middle of building
    the Estimator's graph, made runs with the same --random_seed start from different
    weights.
    """
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1])
        plus_one = tf.function(lambda v: v + 1.0, jit_compile=True)(x)
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            with tf.compat.v1.Session() as session:
                session.run(plus_one, {x: [0.0]})
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)


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
