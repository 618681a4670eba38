"""tensor2tensor.layers: common_hparams, where T2T's sets start."""

from t2tcli.t2t_compat.tensor2tensor.layers import common_hparams  # noqa: F401
