"""T5's RMS norm as one XLA function forward and one backward.

mesh-tensorflow's `sublayer_rms_norm` is `x * rsqrt(mean(x^2) + eps) * scale`, built from
separate ops: square, mean, rsqrt and two products forward, and about ten element-wise
ops for the gradients. In bfloat16, TensorFlow's CPU kernels convert each element on its
own, and a traced step shows the norms' ops running with no matmul beside them
(`bench/train.py --profile`). Here XLA computes a norm in float32 in one
pass over x, and its gradients in one more, rounding each result once.

Before each layer, mesh-tensorflow's `sublayer_call_layer` zeroes the padding positions
of the norm's output with a product of its own, and of their gradient with another.
`fused_rms_norm_and_layer` does both sublayers in training, the zeroing inside the norm's
passes; multiplying by 0 or 1 is exact, so the values do not change.

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
def _normed(
    x: tf.Tensor, scale: tf.Tensor, epsilon: float, keep: tf.Tensor | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """(x * r * scale in x's dtype, times `keep` (0 or 1 a row) if given; r in float32),
    r = rsqrt(mean(x^2) + epsilon) over the last axis."""
    xf = tf.cast(x, tf.float32)
    r = tf.math.rsqrt(tf.reduce_mean(tf.square(xf), axis=-1, keepdims=True) + epsilon)
    y = xf * r * tf.cast(scale, tf.float32)
    if keep is not None:
        y *= tf.cast(keep, tf.float32)[..., None]  # exact: rounding y first and then masking is the same
    return tf.cast(y, x.dtype), tf.squeeze(r, -1)


@tf.function(jit_compile=True)
def _gradients(
    x: tf.Tensor, scale: tf.Tensor, r: tf.Tensor, dy: tf.Tensor, keep: tf.Tensor | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """(dx in x's dtype, the scale's gradient summed over every axis but the first and last).

    With g = dy * scale: dx = r * g - x * r^3 * mean(g * x) over the last axis. The
    scale's sum over the middle axes is a batched product with r, which XLA's CPU code
    runs faster than a reduction across rows. `keep` masks dy as it masked the output.
    """
    xf, dyf = tf.cast(x, tf.float32), tf.cast(dy, tf.float32)
    if keep is not None:
        dyf *= tf.cast(keep, tf.float32)[..., None]
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


def rms_norm(
    x: mtf.Tensor, scale: mtf.Tensor, model_dim: mtf.Dimension, epsilon: float, keep: mtf.Tensor | None = None
) -> mtf.Tensor:
    """x * rsqrt(mean(x^2) + epsilon) * scale along model_dim, the last of x's dims; times
    `keep` (0 or 1 for each of x's rows, in its other dims' order), if given."""
    if x.shape.dims[-1] != model_dim or scale.shape.dims != [model_dim]:
        raise ValueError(f"rms_norm wants [..., {model_dim.name}] and a [{model_dim.name}] scale")
    rows = x.shape.dims[:-1]
    if keep is not None and keep.shape.dims != rows:
        raise ValueError(f"rms_norm's rows to keep {keep.shape} are not x's rows {mtf.Shape(rows)}")
    first = rows[:1]
    masks = [] if keep is None else [keep]

    def grad(op: Any, dy: mtf.Tensor, unused: mtf.Tensor | None) -> list[mtf.Tensor | None]:
        del unused  # r only feeds this function
        dx, partial = mtf.slicewise(
            lambda v, s, r, d, *k: _gradients(v, _value(s), r, d, *k),
            [op.inputs[0], op.inputs[1], op.outputs[1], dy, *masks],
            output_shape=[x.shape, mtf.Shape(first + [model_dim])],
            output_dtype=[x.dtype, tf.float32],
            splittable_dims=first,
            name="rms_norm_grad",
        )
        dscale = mtf.cast(mtf.reduce_sum(partial, output_shape=scale.shape), scale.dtype)
        return [dx, dscale] + [None] * len(masks)

    y, _ = mtf.slicewise(
        lambda v, s, *k: _normed(v, _value(s), float(epsilon), *k),
        [x, scale, *masks],
        output_shape=[x.shape, mtf.Shape(rows)],
        output_dtype=[x.dtype, tf.float32],
        splittable_dims=rows,
        grad_function=grad,
        name="rms_norm",
    )
    return y


def _scale(context: Any, name: str) -> mtf.Tensor:
    """The norm's variable, `<name>/scale`, as mesh-tensorflow makes it."""
    with tf.compat.v1.variable_scope(name):
        return mtf.get_variable(
            context.mesh, "scale", mtf.Shape([context.model.model_dim]), initializer=tf.ones_initializer(),
            dtype=context.variable_dtype,
        )  # fmt: skip


def _fuses(x: mtf.Tensor, context: Any) -> bool:
    """Whether this graph takes the fused passes: it trains, one model, rows of d_model."""
    model = context.model
    return context.train and not model.ensemble_dims and x.shape.dims[-1] == model.model_dim


@gin.configurable(module="t2tcli")
def fused_rms_norm(
    x: mtf.Tensor, layer_stack: Any, context: Any, epsilon: float = 1e-6, name: str = "rms_norm"
) -> mtf.Tensor:
    """A `LayerStack` sublayer: mesh-tensorflow's `sublayer_rms_norm`, fused in training.

    Graphs that do not train (evaluation, decoding, an exported SavedModel) keep
    mesh-tensorflow's plain ops, which every TensorFlow runtime runs, XLA or not.
    """
    if not _fuses(x, context):
        return transformer.sublayer_rms_norm(x, layer_stack, context, epsilon=epsilon, name=name)
    return rms_norm(x, _scale(context, name), context.model.model_dim, epsilon)


@gin.configurable(module="t2tcli")
def fused_rms_norm_and_layer(
    x: mtf.Tensor, layer_stack: Any, context: Any, epsilon: float = 1e-6, name: str = "rms_norm"
) -> mtf.Tensor:
    """Two `LayerStack` sublayers in one: `fused_rms_norm`, then mesh-tensorflow's
    `sublayer_call_layer`, whose zeroing of padding positions (a product over the layer's
    input, and another over its gradient) the fused passes do as they write the norm.

    Multiplying by 0 or 1 is exact, so the values are the two sublayers'; graphs that do
    not train run the two sublayers as they are.
    """
    sequence_id = context.sequence_id if isinstance(context.sequence_id, mtf.Tensor) else None
    if not _fuses(x, context) or (sequence_id is not None and sequence_id.shape.dims != x.shape.dims[:-1]):
        normed = fused_rms_norm(x, layer_stack, context, epsilon=epsilon, name=name)
        return transformer.sublayer_call_layer(normed, layer_stack, context)
    keep = None
    if sequence_id is not None:  # as sublayer_mask_padding masks
        keep = mtf.cast(mtf.not_equal(sequence_id, 0), context.activation_dtype)
    normed = rms_norm(x, _scale(context, name), context.model.model_dim, epsilon, keep)
    layer = context.current_layer
    with tf.compat.v1.variable_scope(layer.__class__.__name__):  # as sublayer_call_layer scopes it
        return layer.call(context, normed)


@gin.configurable(module="t2tcli")
def fused_legacy_rms_norm(x: mtf.Tensor, layer_stack: Any, context: Any) -> mtf.Tensor:
    """T5 v1.0's per-layer norm (variables under layer_norm/), fused."""
    return fused_rms_norm(x, layer_stack, context, name="layer_norm")


@gin.configurable(module="t2tcli")
def fused_legacy_rms_norm_and_layer(x: mtf.Tensor, layer_stack: Any, context: Any) -> mtf.Tensor:
    """T5 v1.0's per-layer norm (variables under layer_norm/) and the layer, fused."""
    return fused_rms_norm_and_layer(x, layer_stack, context, name="layer_norm")


@gin.configurable(module="t2tcli")
def fused_legacy_final_rms_norm(x: mtf.Tensor, layer_stack: Any, context: Any) -> mtf.Tensor:
    """T5 v1.0's final norm (variables under final_layer_norm/), fused."""
    return fused_rms_norm(x, layer_stack, context, name="final_layer_norm")
