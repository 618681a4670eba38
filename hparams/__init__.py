"""Built-in hparams sets; imported by the registry like any --usr_dir."""

from . import t2t_sets, transformer  # noqa: F401  (registers the sets)
