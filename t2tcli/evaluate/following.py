"""Following a training run: evaluating each checkpoint it saves until it is done.

t2t-eval --wait runs beside t2t-train; it must neither give up before the run has
started nor wait forever on a run that died, and a checkpoint the trainer deleted
before its turn is skipped.

Imports: core, io and model.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from absl import logging

from t2tcli.errors import UserError
from t2tcli.io import fs
from t2tcli.model import checkpoints, run_records
from t2tcli.model.run_records import RUN_FILE


def train_steps(model_dir: str) -> int | None:
    """The step at which the training run writing model_dir stops, if recorded."""
    try:
        info = run_records.load_run(model_dir)
    except UserError:
        return None
    value = info.flags.get("train_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def wait_for_run(
    model_dir: str,
    wait_timeout: float,
    poll_seconds: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits (bounded) for t2t-train to describe its run in model_dir, for `--wait`
    started alongside training."""
    started = clock()
    while not fs.exists(os.path.join(model_dir, RUN_FILE)):
        waited = clock() - started
        if waited >= wait_timeout:
            raise UserError(f"--wait: no training run appeared in --model_dir={model_dir} within {wait_timeout:g} s")
        if waited == 0:
            logging.info("waiting for a training run in %s", model_dir)
        sleep(max(0.0, min(poll_seconds, wait_timeout - waited)))


@dataclasses.dataclass
class WaitOutcome:
    evaluated: list[int]
    reason: str  # "finished" or "timeout"


def follow(
    model_dir: str,
    evaluate: Callable[[int, str], Any],
    skip: set[int],
    wait_timeout: float,
    poll_seconds: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitOutcome:
    """Evaluates each new checkpoint of a training run until it is done.

    Stops when a checkpoint at (or past) the run's `train_steps` has been evaluated,
    or when no new checkpoint has appeared for `wait_timeout` seconds: it never waits
    forever on a run that died. A checkpoint deleted by the trainer before its turn
    (`keep_checkpoint_max`) is skipped with a warning.
    """
    seen = set(skip)
    evaluated: list[int] = []
    last_progress = clock()
    while True:
        target = train_steps(model_dir)
        new = [(s, p) for s, p in checkpoints.list_checkpoints(model_dir) if s not in seen]
        for step, path in new:
            seen.add(step)
            try:
                evaluate(step, path)
                evaluated.append(step)
            except _vanished_errors() as exc:
                logging.warning("checkpoint %s disappeared before it was evaluated (%s); skipping", path, exc)
        if new:
            last_progress = clock()
        latest = max(seen, default=-1)
        if target is not None and latest >= target:
            logging.info("training reached step %d of %d: done", latest, target)
            return WaitOutcome(evaluated, "finished")
        idle = clock() - last_progress
        if idle >= wait_timeout:
            logging.warning("no new checkpoint in %s for %.0f s (--wait_timeout); stopping", model_dir, idle)
            return WaitOutcome(evaluated, "timeout")
        sleep(max(0.0, min(poll_seconds, wait_timeout - idle)))


def _vanished_errors() -> tuple[type[BaseException], ...]:
    from t2tcli.compat import tf

    return (tf.errors.NotFoundError, FileNotFoundError, checkpoints.CheckpointGone)
