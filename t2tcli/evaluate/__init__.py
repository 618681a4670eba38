"""Evaluation: decoding a split over one or many checkpoints, the metrics, and where their
results are written.

Imports: core, io, data, model, interop, train and decode; every layer but cli.
"""
