"""t2t-datagen: raw data -> sharded TFRecords, vocabulary and meta file."""

from __future__ import annotations

from absl import flags

from t2tcli import registry
from t2tcli.cli import common
from t2tcli.flags import FLAGS

flags.DEFINE_boolean("overwrite", False, "Regenerate outputs even when complete ones exist.")


def main() -> None:
    common.require("problem", "data_dir")
    problem = registry.problem(FLAGS.problem)
    from t2tcli import datagen

    datagen.generate(problem, data_dir=FLAGS.data_dir, tmp_dir=FLAGS.tmp_dir, overwrite=FLAGS.overwrite)


def run() -> None:
    common.run(main)
