"""The public record sources a user's Problem reads from (`from t2tcli.sources import ...`).

Defined in `t2tcli.data`; this path stays stable for user code.
"""

from t2tcli.data.sources import *  # noqa: F403
from t2tcli.data.sources import __all__  # noqa: F401
