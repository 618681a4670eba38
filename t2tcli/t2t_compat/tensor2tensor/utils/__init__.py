"""tensor2tensor.utils: the registry, hparams objects and the (refused) T2TModel base."""

from t2tcli.t2t_compat.tensor2tensor.utils import hparam, registry, t2t_model  # noqa: F401
