"""t2tcli: command-line pipeline toolkit for text-to-text transformers.

The package is laid out as the pipeline it runs; each subpackage has one concern and
imports only the layers below it (tests/test_layout.py holds the rule):

    core       errors, compat (pins and shims), hparams, interrupts, progress
    io         the one file layer: fs (any TensorFlow file system), atomic outputs and
               staged directories, locks, output checks, text files
    builtin    the built-in problems and hparams sets (the repository's top-level problems/
               and hparams/, installed here); they import only the public names below
    data       the registry, which loads the built-ins and user code; at data's top what all
               of it shares: the data_dir layout, the Problem contract and T5's objectives;
               then by concern, each importing only those before it:
                 sources     CSV, TSV, JSONL, plain text, TFDS and generated records, and
                             a problem's preprocess run over whole columns
                 vocabulary  SentencePiece with T5's ids, Hugging Face vocabularies, the
                             packed-ids encoder
                 input       the tf.data pipeline from shards to batches, where the
                             objectives corrupt text each epoch
                 datagen     t2t-datagen: plan, stages, spool, writer, shards, meta, and
                             its local and Beam runners
    model      the model config, worked out once per run from hparams, vocabulary and
               machine (mesh, activation dtype, CPU kernel layout) and read by everything
               below; the Bitransformer's graph, hparams -> gin, weight names, checkpoints,
               a model_dir's records and loading a trained run
    interop    Hugging Face T5 directories in and out
    train      the run plan (flags, records and data checked before anything is written),
               the trainer that records the run, the loop of its steps, the model_fn
               (TRAIN, EVAL), Estimator and RunConfig, hooks, checkpoint initialisation
    decode     decode settings, the engines (fast TF, mesh-tf, CTranslate2), search loops,
               PREDICT inside the model_fn, the SavedModel export
    evaluate   evaluation over checkpoints, metrics
    cli        one module per binary: its flags and a call into the layers above; and
               tensor2tensor's binary names and flag names (t2t_names) beside ours

`t2tcli.problem`, `t2tcli.sources`, `t2tcli.text` and `t2tcli.registry` are the names a
user's Problem imports; they stay where README.md and docs/your-own-data.md show them, each
on the layer of what it imports (the registry's is data, as the built-ins it loads are written on data).
"""

__version__ = "0.1.0"
