"""Which checkpoints of an averaging's output_dir averages wrote, so averaging never writes
over a run trained there: step numbers alone cannot tell, since a run fine-tuned from an
average counts on from its step.
"""

from __future__ import annotations

import json
import os
import re

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.io import fs

# What t2t-avg-checkpoints writes beside the averaged checkpoint: the model_dir and steps it came from.
AVERAGED_FILE = "averaged_from.json"
_AVERAGED_NAME_RE = re.compile(r"model\.ckpt-(\d+)(?:\.|$)")


def written_steps(output_dir: str) -> set[int]:
    """The steps earlier averages wrote into output_dir, as its `averaged_from.json` records
    them; none where it is missing or malformed (it is read as untrusted input). A file from
    before the record was kept names only the last step it wrote."""
    try:
        record = json.loads(fs.read_bytes(os.path.join(output_dir, AVERAGED_FILE)))
    except (OSError, ValueError):
        return set()
    if not isinstance(record, dict):
        return set()
    steps = record.get("written")
    if steps is None and isinstance(record.get("steps"), list) and record["steps"]:
        steps = record["steps"][-1:]
    if not isinstance(steps, list) or not all(type(s) is int and s >= 0 for s in steps):
        return set()
    return set(steps)


def check_only_averages(output_dir: str, written: set[int]) -> None:
    """A one-line error when output_dir holds a checkpoint no average wrote there: in its
    `checkpoint` state, as complete checkpoints or as stray `model.ckpt-N` files. Its step
    says nothing about who wrote it: a run fine-tuned from an average counts on from it."""
    from t2tcli.model import checkpoints  # it calls this module

    if not fs.isdir(output_dir):
        return
    names = {os.path.basename(prefix) for _, prefix in checkpoints.list_checkpoints(output_dir)}
    names |= {os.path.basename(path) for path in fs.glob_in(output_dir, "model.ckpt-*")}
    state = tf.train.get_checkpoint_state(output_dir)
    if state is not None:
        state_paths = [state.model_checkpoint_path, *state.all_model_checkpoint_paths]
        for path in state_paths:
            if os.path.dirname(path) not in ("", output_dir.rstrip("/")):
                names.add(path)  # a checkpoint elsewhere is never one an average wrote here
            elif path:
                names.add(os.path.basename(path))
    for name in sorted(names):
        match = _AVERAGED_NAME_RE.match(name)
        if match is None or int(match.group(1)) not in written:
            held = match.group(0).rstrip(".") if match else name
            raise UserError(
                f"--output_dir={output_dir} holds checkpoint {held}, which no average wrote (a run trained "
                "there); averaging into it would lose that training; average into a new directory"
            )
