"""Finding, pinning and reading the checkpoints in a model_dir (averaging them: `averaging`).

Eval, decode and export all accept the same ways of naming a checkpoint, resolved
here, so "latest", a step number and a path mean the same thing to every binary.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from absl import logging

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.io import atomic, fs

_STEP_RE = re.compile(r"-(\d+)$")


def step_of(checkpoint_path: str) -> int:
    """The global step of a checkpoint: from its name, else from its variables."""
    match = _STEP_RE.search(checkpoint_path)
    if match:
        return int(match.group(1))
    try:
        return int(tf.train.load_checkpoint(checkpoint_path).get_tensor("global_step"))
    except (tf.errors.NotFoundError, ValueError):
        return 0


def list_checkpoints(model_dir: str) -> list[tuple[int, str]]:
    """(step, path prefix) of every complete checkpoint in model_dir, oldest first.

    A checkpoint counts once its `.index` file is whole: the saver writes the index
    after the data files, but a sharded save writes its merged index in place, so a
    reader polling a running trainer's model_dir can find the newest one half-written.
    """
    found: dict[int, str] = {}
    for index in fs.glob_in(model_dir, "*.index"):
        prefix = index[: -len(".index")]
        if not _data_files(prefix):
            continue
        found[step_of(prefix)] = prefix
    listed = sorted(found.items())
    # A trainer saves one checkpoint at a time, so only the newest can be in progress.
    if listed and not _index_complete(listed[-1][1]):
        logging.warning("checkpoint %s left out: its index is being written or was cut short", listed.pop()[1])
    return listed


# The last 8 bytes of a whole checkpoint index (a table in LevelDB's format).
INDEX_END = (0xDB4775248B80FB57).to_bytes(8, "little")


def _index_complete(prefix: str) -> bool:
    """Whether the checkpoint's index ends with its table's magic number, which is
    written last."""
    path = prefix + ".index"
    try:
        size = fs.getsize(path)
        if size < len(INDEX_END):
            return False
        with fs.open_file(path, "rb") as f:
            f.seek(size - len(INDEX_END))
            return f.read(len(INDEX_END)) == INDEX_END
    except (OSError, tf.errors.OpError):  # deleted meanwhile
        return False


def _data_files(prefix: str) -> list[str]:
    """A checkpoint's data shards (`PREFIX.data-00000-of-00001` ...)."""
    return fs.glob_in(os.path.dirname(prefix) or ".", glob.escape(os.path.basename(prefix)) + ".data-*")


def resolve(model_dir: str, spec: str | None) -> tuple[int, str]:
    """(step, path) of the checkpoint named by `spec`: None/'latest', a step, a path or a dir."""
    if spec in (None, "", "latest"):
        path = tf.train.latest_checkpoint(model_dir)
        if path is None:
            ckpts = list_checkpoints(model_dir)
            if not ckpts:
                raise UserError(f"no checkpoint in --model_dir={model_dir}; train a model first")
            return ckpts[-1]
        return step_of(path), path
    if spec.isdigit():
        for step, path in list_checkpoints(model_dir):
            if step == int(spec):
                return step, path
        have = ", ".join(str(s) for s, _ in list_checkpoints(model_dir)) or "none"
        raise UserError(f"no checkpoint of step {spec} in {model_dir} (have: {have})")
    if fs.isdir(spec):
        return resolve(spec, None)
    if not fs.exists(spec + ".index"):
        raise UserError(f"checkpoint {spec} not found (expected {spec}.index)")
    return step_of(spec), spec


PIN_PREFIX = ".reading."


class CheckpointGone(UserError):
    """A checkpoint was deleted before it could be read (a running trainer keeps only its
    newest `keep_checkpoint_max`)."""

    def __init__(self, checkpoint_path: str) -> None:
        super().__init__(
            f"checkpoint {unpinned(checkpoint_path)} was deleted before it could be read "
            "(a running t2t-train keeps only its --keep_checkpoint_max newest)"
        )


def unpinned(path: str) -> str:
    """The checkpoint path a user named, for a path `pinned` made to read it at."""
    directory, name = os.path.split(path)
    if os.path.basename(directory).startswith(PIN_PREFIX):
        return os.path.join(os.path.dirname(directory), name)
    return path


@contextlib.contextmanager
def pinned(checkpoint_path: str) -> Iterator[str]:
    """A path at which the checkpoint stays readable for the whole block, even if the
    trainer deletes it meanwhile; CheckpointGone if it is gone already.

    Its files are hard-linked into a private directory beside them: a deleted file's
    bytes live on while a link remains, and reading costs no copy. Where no link can be
    made there (a read-only model_dir, a remote file system), the checkpoint is read where
    it is, and a deletion under a reader is reported as one line by `readable`.
    """
    directory, name = os.path.split(checkpoint_path)
    directory = directory or "."
    pin_dir = None
    if not fs.is_remote(checkpoint_path):
        atomic.remove_stale(directory, PIN_PREFIX)
        with contextlib.suppress(OSError):
            pin_dir = tempfile.mkdtemp(prefix=f"{PIN_PREFIX}{os.getpid()}.", dir=directory)
    if pin_dir is None:
        yield checkpoint_path
        return
    try:
        try:
            files = [checkpoint_path + ".index", *_data_files(checkpoint_path)]
            if len(files) < 2:
                raise FileNotFoundError(checkpoint_path)
            for path in files:
                os.link(path, os.path.join(pin_dir, os.path.basename(path)))
        except FileNotFoundError:
            raise CheckpointGone(checkpoint_path) from None
        except OSError:  # a file system without hard links
            yield checkpoint_path
            return
        yield os.path.join(pin_dir, name)
    finally:
        shutil.rmtree(pin_dir, ignore_errors=True)


@contextlib.contextmanager
def reading(model_dir: str, spec: str | None) -> Iterator[tuple[int, str, str]]:
    """(step, path, path to read it at) of the checkpoint `spec` names (see `resolve`),
    pinned for the block; the latest one is looked up again if the trainer deleted it
    meanwhile."""
    for attempt in range(5):
        step, path = resolve(model_dir, spec)
        stack = contextlib.ExitStack()
        try:
            readable_path = stack.enter_context(pinned(path))
        except CheckpointGone:
            if spec not in (None, "", "latest") or attempt == 4:
                raise
            continue
        with stack:
            yield step, path, readable_path
        return


@contextlib.contextmanager
def readable(checkpoint_path: str) -> Iterator[None]:
    """Turns TensorFlow's failure to read a checkpoint (a truncated or damaged data file)
    into one line naming the checkpoint."""
    try:
        yield
    except tf.errors.NotFoundError:
        raise CheckpointGone(checkpoint_path) from None
    except (tf.errors.OutOfRangeError, tf.errors.DataLossError, IndexError) as exc:
        # IndexError: what TensorFlow's checkpoint reader raises for a data file cut short.
        detail = str(getattr(exc, "message", exc)).strip().splitlines()[0][:200]
        raise UserError(
            f"checkpoint {unpinned(checkpoint_path)} cannot be read ({detail}): its files are truncated or damaged; "
            "use another one (--checkpoint_path / --checkpoint)"
        ) from None


def check_complete(checkpoint_path: str) -> None:
    """A one-line error when a checkpoint's data files are shorter than its variables need.

    The index lists every variable's shape and dtype, so the bytes the data files must
    hold are known without reading them: a file cut short (a full disk, a copy
    interrupted) is caught before anything is written, not halfway through a restore.
    """
    with readable(checkpoint_path):
        reader = tf.train.load_checkpoint(checkpoint_path)
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    needed = 0
    for name, shape in shapes.items():
        if dtypes[name] != tf.string:
            needed += int(np.prod(shape, dtype=np.int64)) * dtypes[name].size
    held = sum(fs.getsize(path) for path in _data_files(checkpoint_path))
    if held < needed:
        raise UserError(
            f"checkpoint {unpinned(checkpoint_path)} is truncated: its data files hold {held} bytes of the {needed} "
            "its variables need; use another one"
        )


def fingerprint(checkpoint_path: str) -> str:
    """A short hash of a checkpoint's index bytes and data file sizes: what a cache of
    something derived from it is keyed by (a data file cut short changes it; reading
    every byte of a T5's data files for a key would cost as much as the conversion)."""
    digest = hashlib.sha256()
    digest.update(fs.read_bytes(checkpoint_path + ".index"))
    for data in _data_files(checkpoint_path):
        digest.update(f"{os.path.basename(data)}:{fs.getsize(data)}".encode())
    return digest.hexdigest()[:12]


def read_tensors(checkpoint_path: str, names: Iterable[str]) -> dict[str, Any]:
    """The named tensors of a checkpoint as numpy arrays; one line for a missing or damaged one."""
    with readable(checkpoint_path):
        reader = tf.train.load_checkpoint(checkpoint_path)
        have = reader.get_variable_to_shape_map()
        names = list(names)
        missing = [n for n in names if n not in have]
        if missing:
            raise UserError(
                f"checkpoint {checkpoint_path} lacks {len(missing)} of the model's weights, e.g. {missing[0]}"
            )
        return {name: reader.get_tensor(name) for name in names}


def select(model_dir: str, spec: str) -> list[tuple[int, str]]:
    """Checkpoints named by --checkpoint: 'latest', 'all' or 'STEP[,STEP...]'."""
    if spec == "all":
        ckpts = list_checkpoints(model_dir)
        if not ckpts:
            raise UserError(f"no checkpoint in --model_dir={model_dir}; train a model first")
        return ckpts
    if spec == "latest":
        return [resolve(model_dir, None)]
    steps = [s.strip() for s in spec.split(",") if s.strip()]
    if not steps or not all(s.isdigit() for s in steps):
        raise UserError(f"--checkpoint={spec}: expected latest, all or STEP[,STEP...]")
    return [resolve(model_dir, s) for s in steps]


def write_checkpoint(values: dict, out_path: str, write_state: bool = True) -> None:
    """Saves named arrays as a TF1 checkpoint and points the `checkpoint` file at it last
    (unless `write_state` is false: the state then names what it named before)."""
    graph = tf.Graph()
    with graph.as_default():
        variables = []
        for name, value in values.items():
            variables.append(tf.compat.v1.Variable(value, name=name, trainable=False))
        saver = tf.compat.v1.train.Saver(variables, sharded=False, save_relative_paths=True)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            # The `checkpoint` state file is written after the data, so readers never see
            # a state file that names a half-written checkpoint.
            saver.save(sess, out_path, write_meta_graph=False, write_state=write_state)


def latest_step(model_dir: str) -> int:
    """The global step of model_dir's latest checkpoint; 0 without one."""
    path = tf.train.latest_checkpoint(model_dir)
    if not path:
        return 0
    check_complete(path)
    with readable(path):
        return int(tf.train.load_checkpoint(path).get_tensor("global_step"))
