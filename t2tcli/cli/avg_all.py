"""t2t-avg-all: tensor2tensor's sliding-window average over a whole run.

For every checkpoint of --model_dir from --min_steps on, the average of it and the
--n - 1 checkpoints before it is written to --output_dir as a checkpoint of the same
step, so `t2t-eval --model_dir=OUTPUT --checkpoint=all` scores the averaged run. A
step already averaged there is left as it is; with --wait_minutes it keeps watching
for new checkpoints until none came for that long. Without --output_dir it writes to
model_dir/avg.
"""

from __future__ import annotations

import time

from absl import flags, logging

from t2tcli.cli import common
from t2tcli.errors import UserError

flags.DEFINE_string(
    "output_dir", None, "Where the averaged checkpoints (a usable --model_dir) are written (default: model_dir/avg)."
)
flags.DEFINE_integer("n", 8, "How many checkpoints each average takes: this one and the ones before it.")
flags.DEFINE_integer("min_steps", 0, "Average only checkpoints of at least this step.")
flags.DEFINE_integer("wait_minutes", 0, "Keep watching --model_dir until no new checkpoint came for this long.")

FLAGS = flags.FLAGS
# Where tensor2tensor's t2t-avg-all writes without --output_dir, here under --model_dir.
DEFAULT_OUTPUT = "avg"


def main() -> None:
    common.require("model_dir")
    if not FLAGS.output_dir:
        FLAGS.output_dir = f"{FLAGS.model_dir.rstrip('/')}/{DEFAULT_OUTPUT}"
        logging.info("writing the averaged checkpoints to %s", FLAGS.output_dir)
    if FLAGS.n < 1:
        raise UserError(f"--n={FLAGS.n}: must be at least 1")
    from t2tcli.io import preflight
    from t2tcli.model import averaging, checkpoints

    preflight.check_output_dir(FLAGS.output_dir, "output_dir")
    last_new = time.monotonic()
    while True:
        done = {step for step, _ in checkpoints.list_checkpoints(FLAGS.output_dir)}
        steps = [step for step, _ in checkpoints.list_checkpoints(FLAGS.model_dir)]
        if not steps and not FLAGS.wait_minutes:
            raise UserError(f"no checkpoint in --model_dir={FLAGS.model_dir}")
        todo = [step for step in steps if step >= FLAGS.min_steps and step not in done]
        for step in todo:
            path, averaged = averaging.average(FLAGS.model_dir, FLAGS.n, FLAGS.output_dir, ending_at=step)
            logging.info("step %d: averaged steps %s into %s", step, ",".join(map(str, averaged)), path)
            print(path, flush=True)
        if todo:
            last_new = time.monotonic()
        if time.monotonic() - last_new >= FLAGS.wait_minutes * 60:
            return
        time.sleep(min(30.0, FLAGS.wait_minutes * 60))


def run() -> None:
    common.run(main)
