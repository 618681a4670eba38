"""Decoding and scoring: one source of decode settings, the engines (fast TensorFlow,
mesh-tensorflow, CTranslate2) behind one interface, their search loops, and the SavedModel
export that serves the fast engine.

Imports: core, io, data, model, interop and train; train to build the Estimator it predicts with.
"""
