"""T5's RMS norm as one XLA function forward and one backward.

mesh-tensorflow's `sublayer_rms_norm` is `x * rsqrt(mean(x^2) + eps) * scale`, built from
separate ops: square, mean, rsqrt and two products forward, and about ten element-wise
ops for the gradients. In bfloat16, TensorFlow's CPU kernels convert each element on its
own, and a traced step shows the norms' ops running with no matmul beside them
(`bench/train.py --profile`). Here XLA computes a norm in float32 in one
pass over x, and its gradients in one more, rounding each result once.

The variable is mesh-tensorflow's (`<name>/scale`, same shape and initializer), so
checkpoints do not change. Only training graphs use the fused passes, so evaluation,
decoding and exported models do not depend on XLA. `t2tcli.model.gin_bindings` picks
these sublayers off TPU (where XLA fuses mesh-tensorflow's ops anyway) when the layout
splits neither d_model nor length: each row must be whole in a slice, and the scale's
gradient sums over length inside one.
"""

from __future__ import annotations

from typing import Any

import gin

from t2tcli.compat import tf

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer


@tf.function(jit_compile=True)
def _normed(x: tf.Tensor, scale: tf.Tensor, epsilon: float) -> tuple[tf.Tensor, tf.Tensor]:
    """(x * r * scale in x's dtype, r in float32), r = rsqrt(mean(x^2) + epsilon) over the last axis."""
    xf = tf.cast(x, tf.float32)
    r = tf.math.rsqrt(tf.reduce_mean(tf.square(xf), axis=-1, keepdims=True) + epsilon)
    return tf.cast(xf * r * tf.cast(scale, tf.float32), x.dtype), tf.squeeze(r, -1)


@tf.function(jit_compile=True)
def _gradients(x: tf.Tensor, scale: tf.Tensor, r: tf.Tensor, dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(dx in x's dtype, the scale's gradient summed over every axis but the first and last).

    With g = dy * scale: dx = r * g - x * r^3 * mean(g * x) over the last axis. The
    scale's sum over the middle axes is a batched product with r, which XLA's CPU code
    runs faster than a reduction across rows.
    """
    xf, dyf = tf.cast(x, tf.float32), tf.cast(dy, tf.float32)
    g = dyf * tf.cast(scale, tf.float32)
    r_col = r[..., None]
    dx = r_col * g - xf * r_col**3 * tf.reduce_mean(g * xf, axis=-1, keepdims=True)
    first, width = x.shape[0], x.shape[-1]
    products = tf.reshape(dyf * xf, [first, -1, width])
    return tf.cast(dx, x.dtype), tf.einsum("bmd,bm->bd", products, tf.reshape(r, [first, -1]))


def _value(scale: Any) -> tf.Tensor:
    """The scale's value, read outside XLA: in float32 its slice is the variable itself,
    and an XLA function cannot read a variable on another device (a parameter server's)."""
    return tf.convert_to_tensor(scale)


def rms_norm(x: mtf.Tensor, scale: mtf.Tensor, model_dim: mtf.Dimension, epsilon: float) -> mtf.Tensor:
    """x * rsqrt(mean(x^2) + epsilon) * scale along model_dim, the last of x's dims."""
    if x.shape.dims[-1] != model_dim or scale.shape.dims != [model_dim]:
        raise ValueError(f"rms_norm wants [..., {model_dim.name}] and a [{model_dim.name}] scale")
    rows = x.shape.dims[:-1]
    first = rows[:1]

    def grad(op: Any, dy: mtf.Tensor, unused: mtf.Tensor | None) -> list[mtf.Tensor]:
        del unused  # r only feeds this function
        dx, partial = mtf.slicewise(
            lambda v, s, r, d: _gradients(v, _value(s), r, d),
            [op.inputs[0], op.inputs[1], op.outputs[1], dy],
            output_shape=[x.shape, mtf.Shape(first + [model_dim])],
            output_dtype=[x.dtype, tf.float32],
            splittable_dims=first,
            name="rms_norm_grad",
        )
        dscale = mtf.cast(mtf.reduce_sum(partial, output_shape=scale.shape), scale.dtype)
        return [dx, dscale]

    y, _ = mtf.slicewise(
        lambda v, s: _normed(v, _value(s), float(epsilon)),
        [x, scale],
        output_shape=[x.shape, mtf.Shape(rows)],
        output_dtype=[x.dtype, tf.float32],
        splittable_dims=rows,
        grad_function=grad,
        name="rms_norm",
    )
    return y


@gin.configurable(module="t2tcli")
def fused_rms_norm(
    x: mtf.Tensor, layer_stack: Any, context: Any, epsilon: float = 1e-6, name: str = "rms_norm"
) -> mtf.Tensor:
    """A `LayerStack` sublayer: mesh-tensorflow's `sublayer_rms_norm`, fused in training.

    Graphs that do not train (evaluation, decoding, an exported SavedModel) keep
    mesh-tensorflow's plain ops, which every TensorFlow runtime runs, XLA or not.
    """
    model = context.model
    if not context.train or model.ensemble_dims or x.shape.dims[-1] != model.model_dim:
        return transformer.sublayer_rms_norm(x, layer_stack, context, epsilon=epsilon, name=name)
    with tf.compat.v1.variable_scope(name):
        scale = mtf.get_variable(
            context.mesh, "scale", mtf.Shape([model.model_dim]), initializer=tf.ones_initializer(),
            dtype=context.variable_dtype,
        )  # fmt: skip
    return rms_norm(x, scale, model.model_dim, epsilon)


@gin.configurable(module="t2tcli")
def fused_legacy_rms_norm(x: mtf.Tensor, layer_stack: Any, context: Any) -> mtf.Tensor:
    """T5 v1.0's per-layer norm (variables under layer_norm/), fused."""
    return fused_rms_norm(x, layer_stack, context, name="layer_norm")


@gin.configurable(module="t2tcli")
def fused_legacy_final_rms_norm(x: mtf.Tensor, layer_stack: Any, context: Any) -> mtf.Tensor:
    """T5 v1.0's final norm (variables under final_layer_norm/), fused."""
    return fused_rms_norm(x, layer_stack, context, name="final_layer_norm")
