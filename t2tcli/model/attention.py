"""Attention with each head's queries, keys and values contiguous: [batch, heads, length, d_kv].

mesh-tensorflow keeps q, k and v in the order the projections leave them, [batch, length,
heads, d_kv], and its attention einsums in that order too. TensorFlow runs such an einsum
as a batched matmul over (batch, heads): it transposes the operands into that order first
and the result back after, in each of the six einsums of a layer (the logits, the weights
times the values, and their gradients). At T5's shapes, on CPUs, those einsums ran at 8-27%
of the machine's matmul peak. Put in head-major order once, before the logits, q, k and v
cost one transpose each way, and every attention einsum is a plain batched matmul. The
values are mesh-tensorflow's: only the order of dimensions in memory changes (float32
logits, biases and dropout as before). In that order the memory length is the logits'
last dimension, which TensorFlow's softmax kernel reduces over: one kernel replaces
mesh-tensorflow's chain of element-wise ops, the same function to float rounding.

The layers keep mesh-tensorflow's class names, so variable names and checkpoints are the
same; `t2tcli.model.gin_bindings` picks them off TPU, where XLA chooses layouts itself.
There they can also take q, k and v from joined kernels (t2tcli.model.projections),
which hands them over already in head-major order.
"""

from __future__ import annotations

from typing import Any

import gin

from t2tcli.compat import tf  # its shims must precede mesh_tensorflow

# isort: split
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import attention as mtf_attention
from mesh_tensorflow.transformer import transformer_layers

from t2tcli.model import projections

# Modes in which mesh-tensorflow decodes step by step and keeps k and v for later steps:
# there the projections stay its own, as its decoding loop was written for them.
_DECODING_MODES = ("incremental", "first_part")


def _reordered(x: mtf.Tensor, dims: list[mtf.Dimension]) -> mtf.Tensor:
    return x if x.shape.dims == dims else mtf.transpose(x, mtf.Shape(dims))


def _softmax_gradient(weights: tf.Tensor, d_weights: tf.Tensor) -> tf.Tensor:
    return (d_weights - tf.reduce_sum(d_weights * weights, axis=-1, keepdims=True)) * weights


def softmax_over_last(logits: mtf.Tensor) -> mtf.Tensor:
    """Softmax over the last dimension as one TensorFlow kernel each way.

    mesh-tensorflow's softmax is exp(x - logsumexp(x)): eight element-wise ops forward and
    more backward, each a pass over the [batch, heads, length, memory] logits. In a layer's
    forward pass they run between the logits and the weighted sum with no matmul beside
    them. TensorFlow's softmax kernel does it in one pass, and its gradient takes four ops.
    """
    dims = logits.shape.dims

    def grad(op: Any, d_weights: mtf.Tensor) -> list[mtf.Tensor]:
        return [
            mtf.slicewise(
                _softmax_gradient,
                [op.outputs[0], d_weights],
                logits.shape,
                logits.dtype,
                splittable_dims=dims[:-1],
                name="softmax_grad",
            )
        ]

    return mtf.slicewise(
        tf.nn.softmax,
        [logits],
        logits.shape,
        logits.dtype,
        splittable_dims=dims[:-1],
        grad_function=grad,
        name="softmax",
    )


def head_major_attention(
    q: mtf.Tensor,
    k: mtf.Tensor,
    v: mtf.Tensor,
    memory_length_dim: mtf.Dimension,
    key_dim: mtf.Dimension,
    value_dim: mtf.Dimension,
    bias: mtf.Tensor | None = None,
    dropout_rate: float = 0.0,
    dropout_broadcast_dims: list[mtf.Dimension] | None = None,
    extra_logit: Any = None,
    context: Any = None,
    float32_logits: bool = True,
    z_loss_coeff: float | None = None,
) -> mtf.Tensor:
    """mesh-tensorflow's `attention.attention` with q, k and v put in head-major order first.

    The dimensions q shares with k and v (batch, heads) lead, then q's own (length), then
    d_kv; the result comes back in that order, and the output projection's einsum reads it
    as it is. The memory length is then the logits' last dimension, so the softmax over it
    is TensorFlow's kernel.
    """
    kwargs = dict(
        bias=bias,
        dropout_rate=dropout_rate,
        dropout_broadcast_dims=dropout_broadcast_dims,
        extra_logit=extra_logit,
        context=context,
        float32_logits=float32_logits,
        z_loss_coeff=z_loss_coeff,
    )
    shared = [d for d in q.shape.dims if d != key_dim and d in k.shape.dims and d in v.shape.dims]
    own = [d for d in q.shape.dims if d not in shared and d != key_dim]
    keys_fit = sorted(k.shape.dims) == sorted(shared + [memory_length_dim, key_dim])
    values_fit = sorted(v.shape.dims) == sorted(shared + [memory_length_dim, value_dim])
    if not own or not keys_fit or not values_fit:
        # One query position (incremental decoding: the cache would be copied every step),
        # or dimensions this order does not describe: mesh-tensorflow's layout as it is.
        return mtf_attention.attention(q, k, v, memory_length_dim, key_dim, value_dim, **kwargs)
    q = _reordered(q, shared + own + [key_dim])
    k = _reordered(k, shared + [memory_length_dim, key_dim])
    v = _reordered(v, shared + [memory_length_dim, value_dim])
    if extra_logit is not None or z_loss_coeff is not None:
        return mtf_attention.attention(q, k, v, memory_length_dim, key_dim, value_dim, **kwargs)
    # mesh-tensorflow's attention from here on, but for the softmax.
    orig_q_shape = q.shape
    q, k, v, bias = mtf_attention.maybe_reshape_attention_input_for_2d_sharding(
        context, q, k, v, bias, [key_dim, value_dim]
    )
    if float32_logits:
        q, k = mtf.cast(q, tf.float32), mtf.cast(k, tf.float32)
    logits = mtf.layers.us_einsum([q, k], reduced_dims=[key_dim])
    if bias is not None:
        logits += mtf.cast(bias, logits.dtype)
    if logits.shape.dims[-1] == memory_length_dim:
        weights = softmax_over_last(logits)
    else:
        weights = mtf.softmax(logits, memory_length_dim)
    weights = mtf.cast(weights, v.dtype)
    weights = mtf.dropout(
        weights, context.train, 1.0 - dropout_rate, noise_shape=weights.shape - dropout_broadcast_dims
    )
    outputs = mtf.einsum([weights, v], q.shape - key_dim + value_dim)
    return mtf.reshape(outputs, orig_q_shape - key_dim + value_dim)


def _joined(params: Any, context: Any, wanted: bool, with_query: bool) -> Any:
    """`params`, projecting from joined kernels where asked for and possible (see
    t2tcli.model.projections); never while decoding, whose cached k and v keep
    mesh-tensorflow's order."""
    if wanted and context.mode not in _DECODING_MODES:
        return projections.joined(params, with_query)
    return params


@gin.configurable("HeadMajorSelfAttention", module="t2tcli")
class SelfAttention(transformer_layers.SelfAttention):
    """mesh-tensorflow's SelfAttention (same variables, same gin settings) with head-major
    attention, and q, k and v from one product when `joined_projections`."""

    def __init__(self, joined_projections: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.joined_projections = joined_projections

    def make_params(self, context: Any) -> Any:
        return _joined(super().make_params(context), context, self.joined_projections, with_query=True)

    @property
    def attention_fn(self) -> Any:
        if self.attention_func == "hybrid":
            return super().attention_fn
        return head_major_attention


@gin.configurable("HeadMajorEncDecAttention", module="t2tcli")
class EncDecAttention(transformer_layers.EncDecAttention):
    """mesh-tensorflow's EncDecAttention (same variables, same gin settings) with head-major
    attention, and k and v from one product when `joined_projections`."""

    def __init__(self, joined_projections: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.joined_projections = joined_projections

    def make_params(self, context: Any) -> Any:
        return _joined(super().make_params(context), context, self.joined_projections, with_query=False)

    @property
    def attention_fn(self) -> Any:
        return head_major_attention
