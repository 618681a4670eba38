"""tensor2tensor's user-code API on top of this toolkit, for `--usr_dir` code written for T2T.

`tensor2tensor/` holds the modules a T2T user dir imports (registry, problem,
text_problems, transformer, common_hparams); `t2tcli.t2t_imports` makes
`import tensor2tensor...` find them while user code is imported, and only when no real
tensor2tensor is installed. `problem_adapter` turns a T2T Text2TextProblem into a Problem
here and `hparams_convert` a T2T hparams set into the mesh-tf Transformer's. Layer: data
(imports core, io and data).
"""
