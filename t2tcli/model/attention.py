"""Attention with each head's queries, keys and values contiguous: [batch, heads, length, d_kv].

mesh-tensorflow keeps q, k and v in the order the projections leave them, [batch, length,
heads, d_kv], and its attention einsums in that order too. TensorFlow runs such an einsum
as a batched matmul over (batch, heads): it transposes the operands into that order first
and the result back after, in each of the six einsums of a layer (the logits, the weights
times the values, and their gradients). At T5's shapes, on CPUs, those einsums ran at 8-27%
of the machine's matmul peak. Put in head-major order once, before the logits, q, k and v
cost one transpose each way, and every attention einsum is a plain batched matmul. The
values are mesh-tensorflow's: only the order of dimensions in memory changes (float32
logits, biases, softmax and dropout as before).

The layers keep mesh-tensorflow's class names, so variable names and checkpoints are the
same; `t2tcli.model.gin_bindings` picks them off TPU, where XLA chooses layouts itself.
"""

from __future__ import annotations

from typing import Any

import gin

from t2tcli.compat import tf  # noqa: F401  (its shims must precede mesh_tensorflow)

# isort: split
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import attention as mtf_attention
from mesh_tensorflow.transformer import transformer_layers


def _reordered(x: mtf.Tensor, dims: list[mtf.Dimension]) -> mtf.Tensor:
    return x if x.shape.dims == dims else mtf.transpose(x, mtf.Shape(dims))


def head_major_attention(
    q: mtf.Tensor,
    k: mtf.Tensor,
    v: mtf.Tensor,
    memory_length_dim: mtf.Dimension,
    key_dim: mtf.Dimension,
    value_dim: mtf.Dimension,
    *args: Any,
    **kwargs: Any,
) -> mtf.Tensor:
    """mesh-tensorflow's `attention.attention` with q, k and v put in head-major order first.

    The dimensions q shares with k and v (batch, heads) lead, then q's own (length), then
    d_kv; the result comes back in that order, and the output projection's einsum reads it
    as it is.
    """
    shared = [d for d in q.shape.dims if d != key_dim and d in k.shape.dims and d in v.shape.dims]
    own = [d for d in q.shape.dims if d not in shared and d != key_dim]
    keys_fit = sorted(k.shape.dims) == sorted(shared + [memory_length_dim, key_dim])
    values_fit = sorted(v.shape.dims) == sorted(shared + [memory_length_dim, value_dim])
    if not own or not keys_fit or not values_fit:
        # One query position (incremental decoding: the cache would be copied every step),
        # or dimensions this order does not describe: mesh-tensorflow's layout as it is.
        return mtf_attention.attention(q, k, v, memory_length_dim, key_dim, value_dim, *args, **kwargs)
    q = _reordered(q, shared + own + [key_dim])
    k = _reordered(k, shared + [memory_length_dim, key_dim])
    v = _reordered(v, shared + [memory_length_dim, value_dim])
    return mtf_attention.attention(q, k, v, memory_length_dim, key_dim, value_dim, *args, **kwargs)


@gin.configurable("HeadMajorSelfAttention", module="t2tcli")
class SelfAttention(transformer_layers.SelfAttention):
    """mesh-tensorflow's SelfAttention (same variables, same gin settings) with head-major attention."""

    @property
    def attention_fn(self) -> Any:
        if self.attention_func == "hybrid":
            return super().attention_fn
        return head_major_attention


@gin.configurable("HeadMajorEncDecAttention", module="t2tcli")
class EncDecAttention(transformer_layers.EncDecAttention):
    """mesh-tensorflow's EncDecAttention (same variables, same gin settings) with head-major attention."""

    @property
    def attention_fn(self) -> Any:
        return head_major_attention
