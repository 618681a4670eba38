"""tensor2tensor.models.transformer: T2T's Transformer sets, as T2T-style hparams objects.

Registered under the same names as built-in sets (`--hparams_set=transformer_base`),
and callable from a user's own set (`hparams = transformer.transformer_base()`).
"""

from t2tcli.t2t_compat.t2t_hparams import (
    transformer_base,
    transformer_base_single_gpu,
    transformer_base_v1,
    transformer_base_v2,
    transformer_base_v3,
    transformer_big,
    transformer_big_single_gpu,
    transformer_small,
    transformer_tiny,
)

__all__ = [
    "transformer_base",
    "transformer_base_single_gpu",
    "transformer_base_v1",
    "transformer_base_v2",
    "transformer_base_v3",
    "transformer_big",
    "transformer_big_single_gpu",
    "transformer_small",
    "transformer_tiny",
]
