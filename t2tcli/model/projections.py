"""Attention's q, k and v projections of one input as one matrix product.

mesh-tensorflow projects a self-attention layer's input three times, once by each of its
[d_model, heads * d_kv] kernels. At t5_small's shape those are [2048, 512] x [512, 512]
products, too small to run at the rate the FFN's larger products reach on a CPU
(`bench/projections.py`). Concatenated along their output dimension, the three kernels make one
[512, 1536] kernel, whose three products (forward, input and kernel gradients) have
shapes close to the FFN's. An encoder-decoder layer's k and v, both projections of the
encoder's output, are joined the same way. Wider kernels already run near the peak one by
one, and joining them cost time there; `t2tcli.model.gin_bindings` decides where to join.

The result comes back in head-major order ([batch, heads, length, d_kv]), split off the
product with one transpose instead of one per projection, which is the order
`t2tcli.model.attention` runs attention in. The variables stay mesh-tensorflow's three
kernels, so checkpoints do not change; the values are the same products, to float
rounding.
"""

from __future__ import annotations

from typing import Any

from t2tcli.compat import tf  # noqa: F401  (its shims must precede mesh_tensorflow)

# isort: split
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import attention as mtf_attention

_PARTS = "t2tcli_projections"


def _can_join(params: mtf_attention.AttentionParams) -> bool:
    """Whether q, k and v are plain products of one input by kernels of one shape.

    Not for shared k and v, separate memory heads, uncombined heads, scaling kept out of
    the initializer or ensembles: those have other variables or extra steps.
    """
    return (
        type(params) is mtf_attention.AttentionParams
        and params.combine_dims
        and params.fold_scaling_into_initializer
        and params.make_attention_vars
        and not params.shared_kv
        and not params.no_query
        and not params.keep_query_heads_dims
        and params.query_heads_dims == params.memory_heads_dims
        and params.query_input_dim == params.memory_input_dim
        and params.wq.shape == params.wk.shape == params.wv.shape
        and params.wq.shape.dims == [params.query_input_dim, params.wq.shape.dims[-1]]
    )


def joint_projection(
    x: mtf.Tensor, kernels: list[mtf.Tensor], params: mtf_attention.AttentionParams
) -> list[mtf.Tensor]:
    """x times each kernel, in one product: each [leading dims, heads, length, d_kv].

    `x` is [leading dims..., length, d_model]; its last dimension before d_model is the one
    attention runs along, and it follows the heads.
    """
    combined = kernels[0].shape.dims[-1]
    parts = mtf.Dimension(_PARTS, len(kernels))
    joined = mtf.concat(kernels, combined.name)
    product = mtf.layers.us_einsum([x, joined], reduced_dims=[params.query_input_dim])
    product = mtf.replace_dimensions(product, product.shape.dims[-1], [parts] + params.k_dims)
    positions = [d for d in x.shape.dims if d != params.query_input_dim]
    heads = params.memory_heads_dims
    order = [parts] + positions[:-1] + heads + positions[-1:] + [params.key_dim]
    return mtf.unstack(mtf.transpose(product, mtf.Shape(order)), parts)


def _renamed(x: mtf.Tensor, source: mtf.Tensor, target: mtf.Tensor) -> mtf.Tensor:
    """`x`, computed from `source`, with the dimensions `target` renamed in `source` (its
    length as memory_length) renamed alike."""
    old = [d for d in source.shape.dims if d not in target.shape.dims]
    new = [d for d in target.shape.dims if d not in source.shape.dims]
    for before, after in zip(old, new, strict=True):
        x = mtf.replace_dimensions(x, before, after)
    return x


def _derived_from(m: mtf.Tensor, x: mtf.Tensor) -> bool:
    """Whether `m` is `x`, or `x` with one dimension renamed (mesh-tensorflow's memory
    antecedent of self-attention: its input with length renamed to memory_length)."""
    if m is x:
        return True
    op = m.operation
    renamed = [d for d in x.shape.dims if d not in m.shape.dims]
    return (
        isinstance(op, mtf.ReshapeOperation)
        and op.inputs[0] is x
        and len(renamed) == 1
        and [d.size for d in m.shape.dims] == [d.size for d in x.shape.dims]
    )


class JoinedProjections:
    """mesh-tensorflow's AttentionParams, whose q, k and v come from joined products.

    mesh-tensorflow's layers ask for q, then k, then v: the first request computes all
    that share its input, and the later ones are answered from what it kept. Anything
    else is the wrapped object's own.
    """

    def __init__(self, params: mtf_attention.AttentionParams, with_query: bool) -> None:
        self._params = params
        self._with_query = with_query
        self._kept: tuple[mtf.Tensor, dict[str, mtf.Tensor]] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._params, name)

    def compute_q(self, query_antecedent: mtf.Tensor) -> mtf.Tensor:
        if not self._with_query:
            return self._params.compute_q(query_antecedent)
        q, k, v = joint_projection(query_antecedent, [self.wq, self.wk, self.wv], self._params)
        self._kept = (query_antecedent, {"k": k, "v": v})
        return q

    def _kept_for(self, memory_antecedent: mtf.Tensor, name: str) -> mtf.Tensor | None:
        if self._kept is None or not _derived_from(memory_antecedent, self._kept[0]):
            return None
        source, kept = self._kept
        return _renamed(kept.pop(name), source, memory_antecedent) if name in kept else None

    def compute_k(self, memory_antecedent: mtf.Tensor) -> mtf.Tensor:
        kept = self._kept_for(memory_antecedent, "k")
        if kept is not None:
            return kept
        k, v = joint_projection(memory_antecedent, [self.wk, self.wv], self._params)
        self._kept = (memory_antecedent, {"v": v})
        return k

    def compute_v(self, memory_antecedent: mtf.Tensor) -> mtf.Tensor:
        kept = self._kept_for(memory_antecedent, "v")
        return kept if kept is not None else self._params.compute_v(memory_antecedent)


def joined(params: mtf_attention.AttentionParams, with_query: bool) -> Any:
    """`params` answering q, k and v (`with_query`) or k and v from joined products, where
    its layer fits; otherwise `params` itself."""
    return JoinedProjections(params, with_query) if _can_join(params) else params
