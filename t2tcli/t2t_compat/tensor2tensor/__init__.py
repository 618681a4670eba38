"""The part of tensor2tensor's API that user dirs import, served by t2tcli.

Every module is imported here, so a user's import inside a function, after the user dir
has been loaded, finds it too.
"""

from t2tcli.t2t_compat.tensor2tensor import data_generators, layers, models, utils  # noqa: F401
