"""Flags shared by every binary, defined once.

Each binary imports this module, then defines its own flags in `t2tcli.cli.<binary>`.
"""

from __future__ import annotations

from absl import flags

from t2tcli.cli.t2t_names import MODEL_HELP

flags.DEFINE_string("problem", None, "Registered problem or mixture name (see --registry_help).")
flags.DEFINE_string("data_dir", None, "Directory of generated shards, vocabularies and meta files.")
flags.DEFINE_string("tmp_dir", None, "Directory of raw input files (CSV, TSV, JSONL, TFDS downloads).")
flags.DEFINE_string("model_dir", None, "Directory of checkpoints and run description.")
flags.DEFINE_string("hparams_set", None, "Registered hparams set (see --registry_help).")
flags.DEFINE_string("hparams", "", 'Overrides, e.g. "d_model=256,layout=batch:batch;d_ff:model".')
flags.DEFINE_multi_string("usr_dir", [], "Directory or file of user code that registers problems / hparams sets.")
flags.DEFINE_boolean(
    "trust_usr_dir",
    False,
    "Import the user code a --model_dir's run.json names (its training run's --usr_dir). Without it that code "
    "runs only when --usr_dir names it: a model_dir from elsewhere cannot run code on this machine.",
)
flags.DEFINE_boolean("registry_help", False, "List registered problems, mixtures and hparams sets, then exit.")
flags.DEFINE_boolean("hparams_help", False, "Print every hparam of --hparams_set (or --model_dir's run), then exit.")
flags.DEFINE_string("model", None, MODEL_HELP)
flags.DEFINE_boolean("progress", None, "Show a progress bar on stderr (default: when stderr is a terminal).")

FLAGS = flags.FLAGS


def show_progress() -> bool:
    """--progress when given, else whether stderr is a terminal."""
    from t2tcli import progress

    return progress.wanted(FLAGS.progress)
