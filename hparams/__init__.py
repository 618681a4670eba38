"""Built-in hparams sets; imported by the registry like any --usr_dir."""
