"""tensor2tensor.models: the Transformer's hparams sets."""

from t2tcli.t2t_compat.tensor2tensor.models import transformer  # noqa: F401
