"""Evaluation: decoding a split over one or many checkpoints, the metrics, and where their
results are written.

Imports: every layer but cli.
"""
