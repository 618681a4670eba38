"""Built-in problems and mixtures; imported by the registry like any --usr_dir."""
