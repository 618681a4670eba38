"""Averaging a model_dir's last few checkpoints into an output_dir that is itself a model_dir.

Kept apart from `checkpoints`, which every reader of a model_dir uses: only averaging holds
an output_dir, refuses one that holds a run, and records what it averaged so that a rerun
may write its own output again.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from absl import logging

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.io import atomic, fs, lock
from t2tcli.model import averaged_outputs
from t2tcli.model.averaged_outputs import AVERAGED_FILE
from t2tcli.model.checkpoints import (
    CheckpointGone,
    check_complete,
    list_checkpoints,
    pinned,
    readable,
    step_of,
    unpinned,
    write_checkpoint,
)
from t2tcli.model.run_records import HPARAMS_FILE, RUN_FILE, VOCAB_FILE


def average(model_dir: str, num_last: int, output_dir: str, ending_at: int | None = None) -> tuple[str, list[int]]:
    """Averages the float variables of the last `num_last` checkpoints (up to step
    `ending_at` when given: one window of t2t-avg-all's) into output_dir.

    Non-float variables (the global step, integer counters) come from the newest
    checkpoint, so training state read from the result matches that checkpoint.
    The run description and vocabulary are copied too: output_dir is itself a
    model_dir that eval, decode and export accept. Returns (path, steps averaged).
    output_dir is held (`t2tcli.io.lock`) while it is written, and the checkpoints read
    are pinned, so a trainer still writing model_dir may delete them meanwhile.
    An output_dir holding any checkpoint that averaging did not write (one trained on
    there, whatever its step) is refused: rewriting its `checkpoint` state or its files
    would lose that training to every reader. A window of t2t-avg-all's older than its
    newest step is added without becoming the latest.
    """
    if num_last < 1:
        raise UserError(f"--num_last={num_last}: must be at least 1")
    _check_average_target(model_dir, output_dir)
    with lock.hold(output_dir, "averaged checkpoints"), contextlib.ExitStack() as pins:
        written = averaged_outputs.written_steps(output_dir)
        averaged_outputs.check_only_averages(output_dir, written)
        ckpts = [(step, path) for step, path in list_checkpoints(model_dir) if ending_at is None or step <= ending_at]
        if len(ckpts) < num_last:
            logging.warning("only %d checkpoints in %s; averaging all of them", len(ckpts), model_dir)
        chosen = []
        for step, path in ckpts[-num_last:]:
            try:
                chosen.append((step, pins.enter_context(pinned(path))))
            except CheckpointGone as exc:
                logging.warning("%s; averaging the others", exc)
        if not chosen:
            raise UserError(f"no checkpoint in --model_dir={model_dir}")
        newer = _newest_step(output_dir)
        if newer > chosen[-1][0] and ending_at is None:
            raise UserError(
                f"--output_dir={output_dir} holds step {newer}, past step {chosen[-1][0]} of this average of "
                f"--model_dir={model_dir}: writing it would take that run back to step {chosen[-1][0]}; "
                "average into a new directory"
            )
        values, newest_step = _averaged_values(chosen)
        out_path = os.path.join(output_dir, f"model.ckpt-{newest_step}")
        # Recorded before the checkpoint is written, so one cut short is still known as an average's own
        # and a rerun may write it again.
        source = {
            "model_dir": os.path.realpath(model_dir),
            "steps": [s for s, _ in chosen],
            "written": sorted(written | {newest_step}),
        }
        atomic.write_text(os.path.join(output_dir, AVERAGED_FILE), json.dumps(source, indent=2) + "\n")
        # An earlier window of t2t-avg-all's is added beside newer ones without naming it the latest.
        write_checkpoint(values, out_path, write_state=newer <= newest_step)
        for name in (RUN_FILE, HPARAMS_FILE, VOCAB_FILE):
            src = os.path.join(model_dir, name)
            if fs.exists(src):
                atomic.copy(src, os.path.join(output_dir, name))
    return out_path, [s for s, _ in chosen]


def _newest_step(model_dir: str) -> int:
    """The step of model_dir's newest checkpoint, by its files or its `checkpoint` state; 0 without one."""
    steps = [step for step, _ in list_checkpoints(model_dir)] if fs.isdir(model_dir) else []
    named = tf.train.latest_checkpoint(model_dir) if steps else None
    return max([*steps, step_of(named)] if named else steps, default=0)


def _check_average_target(model_dir: str, output_dir: str) -> None:
    """A one-line error when averaging into output_dir would overwrite a run: model_dir
    itself (by any path, symlinks included) or another model_dir. A directory an earlier
    average of this same model_dir wrote may be written again."""
    if atomic.same_file(output_dir, model_dir):
        raise UserError(f"--output_dir={output_dir} is --model_dir={model_dir}; average into another directory")
    if not fs.isdir(output_dir):
        return
    holds_run = fs.exists(os.path.join(output_dir, RUN_FILE)) or bool(list_checkpoints(output_dir))
    if not holds_run:
        return
    try:
        source = json.loads(fs.read_bytes(os.path.join(output_dir, AVERAGED_FILE)))
        same_source = isinstance(source, dict) and source.get("model_dir") == os.path.realpath(model_dir)
    except (OSError, ValueError):
        same_source = False
    if not same_source:
        raise UserError(
            f"--output_dir={output_dir} holds another run (its run.json or checkpoints), which averaging would "
            "overwrite; use a new or empty directory"
        )


def _averaged_values(chosen: list[tuple[int, str]]) -> tuple[dict[str, Any], int]:
    """The mean of the float variables of `chosen` checkpoints (others from the newest), and its step."""
    newest_step, newest_path = chosen[-1]
    for _, path in chosen:  # every input checked before any is read or anything written
        check_complete(path)
    with readable(newest_path):
        newest = tf.train.load_checkpoint(newest_path)
        shapes = newest.get_variable_to_shape_map()
        dtypes = newest.get_variable_to_dtype_map()
        values = {name: newest.get_tensor(name) for name in shapes}
    floats = [n for n in shapes if dtypes[n].is_floating]
    for n in floats:
        values[n] = values[n].astype("float64")
    for _, path in chosen[:-1]:
        with readable(path):
            reader = tf.train.load_checkpoint(path)
            for n in floats:
                if not reader.has_tensor(n) or tuple(reader.get_variable_to_shape_map()[n]) != tuple(shapes[n]):
                    raise UserError(
                        f"checkpoint {unpinned(path)} does not match {unpinned(newest_path)} at variable '{n}'"
                    )
                values[n] = values[n] + reader.get_tensor(n)
    for n in floats:
        values[n] = (values[n] / len(chosen)).astype(dtypes[n].as_numpy_dtype)
    return values, newest_step
