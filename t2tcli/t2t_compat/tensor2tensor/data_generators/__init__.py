"""tensor2tensor.data_generators: Problem and the text problems a user subclasses."""

from t2tcli.t2t_compat.tensor2tensor.data_generators import problem, text_problems  # noqa: F401
