"""An exported model directory written whole: staged beside its place and renamed in, or,
on an object store, file by file with the one loaders look for first written last.

Imports: core, io.
"""

from __future__ import annotations

import contextlib
import os

from t2tcli.errors import UserError
from t2tcli.io import atomic, fs


def place(export_dir: str) -> str:
    """Where an export to `export_dir` goes, checked before anything is computed: export_dir,
    absent or empty, or, for a symlink to an empty directory, that directory (the link stays
    and leads to the model). A one-line error for anything else."""
    if fs.exists(export_dir) and (not fs.isdir(export_dir) or fs.listdir(export_dir)):
        raise UserError(f"--export_dir={export_dir} exists and is not an empty directory")
    if fs.is_remote(export_dir):
        return export_dir
    if not os.path.islink(export_dir):
        return os.path.abspath(export_dir)
    target = os.path.realpath(export_dir)
    if not os.path.isdir(target):
        raise UserError(f"--export_dir={export_dir} is a symlink to {target}, which is not a directory")
    parent = os.path.dirname(target)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--export_dir={export_dir} is a symlink to {target}; no permission to write in {parent}")
    return target


def write_whole(files: dict[str, bytes], target: str) -> None:
    """Writes `files` (name -> bytes, in order) as the directory `target` (from `place`).

    Locally the directory is assembled beside target and renamed into place, so target is
    complete or absent. It is staged private (mode 0700), each file made new and never
    through a symlink, so nobody else can plant anything in it; only just before the rename
    does it get the mode the umask gives, as a directory made in place would.
    """
    if fs.is_remote(target):
        _write_remote(files, target)
        return
    with atomic.staged_directory(target) as staging:  # replaces the empty directory `place` allowed
        for name, data in files.items():
            _write_new(os.path.join(staging, name), data)


def _write_new(path: str, data: bytes) -> None:
    """`data` as a file made at `path` by this call (the umask's mode), refused when anything,
    a symlink included, is there already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY, 0o666)
    except FileExistsError:
        raise UserError(f"{path}: something is there already, in a directory t2tcli just made for itself") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_remote(files: dict[str, bytes], export_dir: str) -> None:
    """Each file whole or absent, the last one last: object stores rename no directories, so
    a directory without it is what an interrupted export leaves, and no loader takes it for
    a model. A failure removes what was written."""
    fs.makedirs(export_dir)
    try:
        for name, data in files.items():
            atomic.write_bytes(f"{export_dir.rstrip('/')}/{name}", data)
    except BaseException:
        for name in files:
            with contextlib.suppress(OSError):
                fs.remove(f"{export_dir.rstrip('/')}/{name}")
        raise
