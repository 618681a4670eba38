"""Attention with each head's queries, keys and values contiguous: [batch, heads, length, d_kv].

mesh-tensorflow keeps q, k and v in the order the projections leave them, [batch, length,
heads, d_kv], and its attention einsums in that order too. TensorFlow runs such an einsum
as a batched matmul over (batch, heads): it transposes the operands into that order first
and the result back after, in each of the six einsums of a layer (the logits, the weights
times the values, and their gradients), so at T5's shapes, on CPUs, those einsums ran far
below the machine's matmul peak. Put in head-major order once, before the logits, q, k and v
cost one transpose each way, and every attention einsum is a plain batched matmul. The
values are mesh-tensorflow's: only the order of dimensions in memory changes (float32
logits, biases and dropout as before; `head_major_attention` says how training in
bfloat16 rounds the logits' product). In that order the memory length is the logits'
last dimension, which TensorFlow's softmax kernel reduces over: one kernel replaces
mesh-tensorflow's chain of element-wise ops, the same function to float rounding.

The layers keep mesh-tensorflow's class names, so variable names and checkpoints are the
same; `t2tcli.model.gin_bindings` picks them off TPU, where XLA chooses layouts itself.
There they can also take q, k and v from joined kernels (t2tcli.model.projections),
which hands them over already in head-major order.

The self-attention bias (padding and causal masks plus T5's relative-position bias,
whose table all layers of a stack share) is the same tensor in every layer of a stack,
yet mesh-tensorflow builds it again in each: bucketing, the table's one-hot lookup, the
masks, their sum, and a transpose into the logits' order, forward, and the same again
backward. Here a stack builds it once, in the logits' order and dtype, and each layer
adds it; its gradient is the sum of the layers', as before.
"""

from __future__ import annotations

import functools
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
    rounded_logits_product: bool = False,
) -> mtf.Tensor:
    """mesh-tensorflow's `attention.attention` with q, k and v put in head-major order first.

    The dimensions q shares with k and v (batch, heads) lead, then q's own (length), then
    d_kv; the result comes back in that order, and the output projection's einsum reads it
    as it is. The memory length is then the logits' last dimension, so the softmax over it
    is TensorFlow's kernel.

    With `rounded_logits_product`, training with bfloat16 q and k takes the logits from
    their bfloat16 product (float32 sums, the result rounded once) and casts them to
    float32 for the bias and softmax, as PyTorch's bfloat16 autocast does, rather than
    casting q and k to float32 for a float32 product: where bfloat16 products are native,
    the float32 ones and their gradients run at a fraction of that rate. Evaluation,
    scoring and decoding keep the float32 product, so their numbers do not change.
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
    rounded = (
        rounded_logits_product
        and float32_logits
        and getattr(context, "train", False)
        and q.dtype == k.dtype == tf.bfloat16
    )
    if float32_logits and not rounded:
        q, k = mtf.cast(q, tf.float32), mtf.cast(k, tf.float32)
    logits = mtf.layers.us_einsum([q, k], reduced_dims=[key_dim])
    if rounded:
        logits = mtf.cast(logits, tf.float32)
    if bias is not None:
        logits += _bias_in_logits_order(bias, logits, context)
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


def _bias_in_logits_order(bias: mtf.Tensor, logits: mtf.Tensor, context: Any) -> mtf.Tensor:
    """`bias` cast to the logits' dtype, its dimensions in the logits' order, so adding it
    is one pass; made once per bias tensor, which a stack's layers share (see
    `SelfAttention.compute_bias`)."""
    order = [d for d in logits.shape.dims if d in bias.shape.dims]
    if len(order) != len(bias.shape.dims):  # a bias the logits broadcast to: as mesh-tensorflow adds it
        return mtf.cast(bias, logits.dtype)
    key = ("t2tcli.bias_in_logits_order", id(bias), tuple(order), logits.dtype)
    cache = getattr(context, "cache", None)
    cache = {} if cache is None else cache  # a context without one: made for this layer only
    if key not in cache:  # the entry holds `bias`, so no other tensor can take its id meanwhile
        cache[key] = (bias, mtf.cast(_reordered(bias, order), logits.dtype))
    return cache[key][1]


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
    attention, q, k and v from one product when `joined_projections`, and training's
    logits as `head_major_attention` describes when `rounded_logits_product`."""

    def __init__(self, joined_projections: bool = False, rounded_logits_product: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.joined_projections = joined_projections
        self.rounded_logits_product = rounded_logits_product

    def make_params(self, context: Any) -> Any:
        return _joined(super().make_params(context), context, self.joined_projections, with_query=True)

    def compute_bias(
        self,
        context: Any,
        memory_position: mtf.Tensor,
        x: mtf.Tensor,
        heads_dims: list[mtf.Dimension],
        q: mtf.Tensor,
        use_prompt_kv: str | None = None,
    ) -> mtf.Tensor | None:
        """mesh-tensorflow's bias, built once per stack where it is the same in every
        layer: over whole sequences (not while decoding step by step), with no relative
        bias or a shared one, and no hyper-prompts."""
        shared = (
            self.relative_attention_type in (None, "bias_shared")
            and context.mode not in _DECODING_MODES
            and use_prompt_kv is None
        )
        if not shared:
            return super().compute_bias(context, memory_position, x, heads_dims, q, use_prompt_kv)
        # Everything the bias is made of; memory_position is the renamed position here.
        made_of = (
            context.position,
            context.sequence_id,
            context.subsequence_id,
            context.read_priority,
            context.write_priority,
        )
        key = (
            "t2tcli.self_attention_bias",
            type(self),
            self.min_relative_position(context),
            self.max_relative_position(context),
            tuple(heads_dims),
            self.relative_attention_type,
            self.relative_attention_num_buckets,
            tuple(id(part) for part in made_of),
        )
        if key not in context.cache:
            context.cache[key] = super().compute_bias(context, memory_position, x, heads_dims, q, use_prompt_kv)
        return context.cache[key]

    @property
    def attention_fn(self) -> Any:
        if self.attention_func == "hybrid":
            return super().attention_fn
        return functools.partial(head_major_attention, rounded_logits_product=self.rounded_logits_product)


@gin.configurable("HeadMajorEncDecAttention", module="t2tcli")
class EncDecAttention(transformer_layers.EncDecAttention):
    """mesh-tensorflow's EncDecAttention (same variables, same gin settings) with head-major
    attention, k and v from one product when `joined_projections`, and training's logits
    as `head_major_attention` describes when `rounded_logits_product`."""

    def __init__(self, joined_projections: bool = False, rounded_logits_product: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.joined_projections = joined_projections
        self.rounded_logits_product = rounded_logits_product

    def make_params(self, context: Any) -> Any:
        return _joined(super().make_params(context), context, self.joined_projections, with_query=False)

    @property
    def attention_fn(self) -> Any:
        return functools.partial(head_major_attention, rounded_logits_product=self.rounded_logits_product)
