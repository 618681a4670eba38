"""Training: the Estimator's model_fn (TRAIN and EVAL; PREDICT is given by decode), its
RunConfig, the hooks a person watches, initialising from a checkpoint, and the trainer.

Imports: core, io, data, model and interop.
"""
