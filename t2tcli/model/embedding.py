"""A vocabulary embedding that looks rows up instead of multiplying by a one-hot matrix.

mesh-tensorflow's `mtf.gather` is an einsum of a [batch, length, vocab] one-hot
tensor with the [vocab, d_model] table: right on TPUs, where it is one large matmul
and the vocabulary may be split over cores, but on CPUs and GPUs it costs as many
FLOPs as a vocabulary-sized output projection, once per stack and again for its
gradient. At T5's shapes (vocabulary 32,128, d_model 512) that is about a quarter of
a training step. Off TPU, when the mesh splits none of the dimensions involved, this
class gathers rows and sums gradients by id instead; the values are the same (the
embedding of id i is row i of the table, in the activation dtype either way).
`t2tcli.model.gin_bindings` chooses it.
"""

from __future__ import annotations

from typing import Any

import gin

from t2tcli.compat import tf

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer


def gather_rows(weights: mtf.Tensor, ids: mtf.Tensor, vocab_dim: mtf.Dimension) -> mtf.Tensor:
    """weights[ids] along `vocab_dim`: ids' shape followed by weights' other dimensions.

    Only the other dimensions of `weights` may be split on the mesh: a row's values
    must all be on the device that looks it up.
    """
    row_dims = [d for d in weights.shape.dims if d != vocab_dim]
    if weights.shape.dims[0] != vocab_dim:
        raise ValueError(f"gather_rows needs {vocab_dim} first in {weights.shape}")

    def grad(op: Any, dy: mtf.Tensor) -> list[mtf.Tensor | None]:
        def segment_sum(dy_slice: tf.Tensor, ids_slice: tf.Tensor) -> tf.Tensor:
            # Summed in float32, as the one-hot einsum accumulates, then rounded once.
            summed = tf.math.unsorted_segment_sum(tf.cast(dy_slice, tf.float32), ids_slice, vocab_dim.size)
            return tf.cast(summed, dy_slice.dtype)

        dw = mtf.slicewise(
            segment_sum, [dy, op.inputs[1]], weights.shape, dy.dtype, splittable_dims=row_dims, name="gather_rows_grad"
        )
        return [dw, None]

    return mtf.slicewise(
        lambda w, i: tf.gather(w, i),
        [weights, ids],
        output_shape=mtf.Shape(ids.shape.dims + row_dims),
        output_dtype=weights.dtype,
        splittable_dims=row_dims,
        grad_function=grad,
        name="gather_rows",
    )


@gin.configurable(module="t2tcli")
class GatherVocabEmbedding(transformer.VocabEmbedding):
    """mesh-tensorflow's VocabEmbedding (same variables) with a row lookup for ids."""

    def ids_to_embedding(self, ids: mtf.Tensor, context: Any) -> mtf.Tensor:
        del context
        ret = gather_rows(self._embedding_weights, ids, self._vocab_dim)
        if self._scale_variable_like_classifier_weights:
            ret *= self._output_dim.size**0.5
        return ret
