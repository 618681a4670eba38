"""The feed-forward layer's ReLU and dropout as one XLA function forward and one backward.

mesh-tensorflow's `DenseReluDense` applies its ReLU and then its dropout as separate
ops over the [batch, length, d_ff] hidden units, the largest activations of a layer:
a ReLU and a product with the broadcast dropout mask forward, and four passes back (the
mask's product, then the ReLU's gradient as a comparison, a cast and a product). On a
CPU whose matmuls are fast, a traced step spends a large share of its time in these
passes with no matmul running beside them (`bench/train.py --profile`). Here one XLA
pass computes relu(x) * mask and one computes the gradient from its output: where that
output is positive, the ReLU and the mask both kept the unit, so the gradient is the
incoming one times the mask, and zero elsewhere.

The mask is mesh-tensorflow's own (the same random op, seeded in the same order, the
same keep probability and broadcast over length), and every value is rounded as the
separate ops round it, so the layer computes the same numbers as `DenseReluDense`.
Only training graphs with a ReLU and dropout use it; everything else is the parent's.
`t2tcli.model.gin_bindings.fuses_ffn_dropout` says where it is used.
"""

from __future__ import annotations

from typing import Any

import gin

from t2tcli.compat import tf

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer_layers


@tf.function(jit_compile=True)
def _forward(x: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """relu(x) * mask, the mask broadcast where it has size 1."""
    return tf.nn.relu(x) * mask


@tf.function(jit_compile=True)
def _backward(dy: tf.Tensor, y: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """d(relu(x) * mask)/dx times dy, from the forward's output y."""
    return tf.where(y > 0, dy * mask, tf.zeros_like(dy))


def relu_dropout(x: mtf.Tensor, keep_prob: float, noise_shape: mtf.Shape) -> mtf.Tensor:
    """mtf.dropout(mtf.relu(x), True, keep_prob, noise_shape=noise_shape), fused.

    `noise_shape` is x's shape less the dimensions the mask is broadcast over, in x's
    order; those may not be split on the mesh, as each slice broadcasts its mask itself.
    """
    if [d for d in x.shape.dims if d in noise_shape.dims] != noise_shape.dims:
        raise ValueError(f"relu_dropout's noise_shape {noise_shape} is not {x.shape} less some dimensions")
    # The mask, built as mtf.dropout builds it: the same ops, so the same seed and values.
    with tf.compat.v1.variable_scope(None, default_name="dropout"):
        noise = mtf.cast(mtf.less(mtf.random_uniform(x.mesh, noise_shape, dtype=x.dtype), keep_prob), x.dtype)
        noise /= keep_prob
    kept_dims = [d in noise_shape.dims for d in x.shape.dims]

    def expand(mask: tf.Tensor) -> tf.Tensor:
        """The mask's slice with a unit axis for each dimension it is broadcast over."""
        sizes = iter(mask.shape)
        return tf.reshape(mask, [next(sizes) if kept else 1 for kept in kept_dims])

    def grad(op: Any, dy: mtf.Tensor) -> list[mtf.Tensor | None]:
        dx = mtf.slicewise(
            lambda d, y, m: _backward(d, y, expand(m)),
            [dy, op.outputs[0], op.inputs[1]],
            x.shape,
            x.dtype,
            splittable_dims=noise_shape.dims,
            name="relu_dropout_grad",
        )
        return [dx, None]

    return mtf.slicewise(
        lambda v, m: _forward(v, expand(m)),
        [x, noise],
        output_shape=x.shape,
        output_dtype=x.dtype,
        splittable_dims=noise_shape.dims,
        grad_function=grad,
        name="relu_dropout",
    )


@gin.configurable("FusedDenseReluDense", module="t2tcli")
class DenseReluDense(transformer_layers.DenseReluDense):
    """mesh-tensorflow's DenseReluDense (same variables, same values) whose training
    graph applies its ReLU and dropout in one fused pass each way. The class keeps its
    parent's name: a layer stack scopes each layer's variables by its class's name."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # DenseReluDense's own bindings configure it

    def call(self, context: Any, x: mtf.Tensor, losses: Any = None) -> mtf.Tensor:
        if not (context.train and self.dropout_rate and self.activation == "relu" and not context.model.ensemble_dims):
            return super().call(context, x, losses=losses)
        hidden = mtf.layers.dense(
            x,
            new_dims=mtf.Dimension("d_ff", self.hidden_size),
            reduced_dims=x.shape.dims[-1:],
            use_bias=self.use_bias,
            activation=None,
            variable_dtype=context.variable_dtype,
            name="wi",
        )
        hidden = relu_dropout(hidden, 1.0 - self.dropout_rate, hidden.shape - context.length_dim)
        return mtf.layers.dense(
            hidden,
            x.shape.dims[-1],
            use_bias=self.use_bias,
            activation=None,
            variable_dtype=context.variable_dtype,
            reduced_dims=hidden.shape.dims[-1:],
            name="wo",
        )
