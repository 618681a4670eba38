"""Output locations checked before any work: one line naming the flag, not a traceback later.

A binary that would fail to write its output only after minutes of work (an output
directory that is a file, has no write permission, or cannot be created) says so at
start instead.
"""

from __future__ import annotations

import os

from t2tcli.errors import UserError
from t2tcli.io import fs


def check_output_dir(path: str, flag: str) -> None:
    """A one-line error when `path` cannot be (or become) a directory this process writes in.

    Nothing is created: a run that fails its other checks leaves no directory behind.
    A remote path (gs://...) is looked up once, so an unreachable store, a bucket that does
    not exist or missing credentials fail here, naming the path, before any work.
    """
    if fs.is_remote(path):
        check_bucket(path, flag)
        if fs.exists(path) and not fs.isdir(path):
            raise UserError(f"--{flag}={path}: exists and is not a directory")
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"--{flag}={path}: exists and is not a directory")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"--{flag}={path}: {existing} is a file, so the directory cannot be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--{flag}={path}: no permission to write in {existing}")


def check_output_file(path: str, flag: str) -> None:
    """A one-line error, before any work, when `path` cannot become an output file."""
    if fs.is_remote(path):
        check_bucket(path, flag)
        if fs.isdir(path):
            raise UserError(f"--{flag}={path}: is a directory, expected a file name")
        return
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"--{flag}={path}: is a directory, expected a file name")
    if not os.path.isdir(directory):
        raise UserError(f"--{flag}={path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"--{flag}={path}: no permission to write in {directory}")


def check_bucket(path: str, flag: str) -> None:
    """A one-line error naming the flag when `path` is on a gs:// bucket that does not exist,
    refuses this process or does not answer (nothing for any other path)."""
    try:
        fs.check_bucket(path)
    except fs.BucketError as exc:
        raise UserError(f"--{flag}={path}: {exc.reason}") from None
