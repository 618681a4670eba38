"""Built-in hparams sets; imported by the registry like any --usr_dir."""

from . import transformer  # noqa: F401  (registers the sets)
