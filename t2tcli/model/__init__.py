"""The model itself: the Bitransformer's mtf graph, hparams turned into gin bindings,
meshes and devices, the machine (hardware) with the activation dtype and the CPU kernels'
layout chosen for it, T5 weight names, checkpoints, and a model_dir's records (run.json,
hparams.json, the vocabulary) read back with types.

Imports: core, io and data.
"""
