"""Built-in problems and mixtures; imported by the registry like any --usr_dir."""

from . import quora, self_supervised, tfds_problems, toy, translate  # noqa: F401  (registration)
