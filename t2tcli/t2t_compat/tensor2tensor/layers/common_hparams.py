"""tensor2tensor.layers.common_hparams: `basic_params1`, the base of T2T's sets."""

from t2tcli.t2t_compat.t2t_hparams import basic_params1

__all__ = ["basic_params1"]
