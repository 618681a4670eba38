"""The public string helpers a user's `preprocess` calls (`from t2tcli.text import ...`).

Defined in `t2tcli.data.sources.text`, where they also run column-wise; this path stays stable.
"""

from t2tcli.data.sources.text import choice, squash_spaces

__all__ = ["choice", "squash_spaces"]
