"""tensor2tensor.utils.hparam: `HParams`, the object T2T's sets are made of."""

from t2tcli.t2t_compat.t2t_hparams import T2THParams as HParams

__all__ = ["HParams"]
