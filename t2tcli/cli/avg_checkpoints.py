"""t2t-avg-checkpoints: average the last N checkpoints into a new model_dir."""

from __future__ import annotations

from absl import flags, logging

from t2tcli.cli import common

flags.DEFINE_integer("num_last", 5, "How many of the newest checkpoints to average.")
flags.DEFINE_string("output_dir", None, "Where the averaged checkpoint (a usable --model_dir) is written.")

FLAGS = flags.FLAGS


def main() -> None:
    common.require("model_dir", "output_dir")
    from t2tcli.io import preflight
    from t2tcli.model import averaging

    preflight.check_output_dir(FLAGS.output_dir, "output_dir")

    path, steps = averaging.average(FLAGS.model_dir, FLAGS.num_last, FLAGS.output_dir)
    logging.info("averaged %d checkpoints (steps %s) into %s", len(steps), ",".join(map(str, steps)), path)
    print(path)


def run() -> None:
    common.run(main)
