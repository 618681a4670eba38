"""Local scratch space that another user of the machine cannot plant: private directories,
and files made and read back without following a symlink.

Datagen's spool and shard buckets live in a work directory inside a local data_dir, or
under the system's temporary directory for a remote one. On a shared machine another user
may be able to write there, and could leave a symlink, a FIFO or a directory of their own
under the name a run is about to use: the run would then write through it, or read back
what they put there. So a work directory is made by `mkdir` (never taken over), reused or
removed only when it is a real directory owned by this user, and its files are created
exclusively (O_EXCL, O_NOFOLLOW, mode 0600) and read back only when they are regular files
of this user's. Imports: core.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from t2tcli.errors import UserError

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO must not hang the open


def user_temp_dir() -> str:
    """This user's own directory (mode 0700) under the system's temporary directory, made
    when missing: the parent of scratch that has no data_dir of its own to live in.

    Its name is predictable, so it is used only when it is this user's, private directory;
    anything else under that name is a one-line error rather than a place to write.
    """
    path = os.path.join(tempfile.gettempdir(), f"t2tcli-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_owned_dir(path, private=True, hint="remove it, or set TMPDIR to a directory of your own")
    return path


def check_owned_dir(path: str, private: bool = False, hint: str = "remove it") -> None:
    """A one-line error unless `path` is a real directory (not a symlink) owned by this
    user, and, when `private`, not writable by group or others. FileNotFoundError when
    nothing is there."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        problem = f"a symbolic link (to {os.readlink(path)})"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "not a directory"
    elif info.st_uid != os.getuid():
        problem = f"owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    elif private and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise UserError(f"{path}: {problem}, where t2tcli keeps a scratch directory of its own; {hint}")


def remove_dir(path: str) -> None:
    """Removes a scratch directory and everything in it; nothing when it is not there.

    Refused in one line unless it is a real directory of this user's: a symlink planted
    under its name is neither followed nor silently kept. Inside it nothing is followed
    either: `shutil.rmtree` works through directory descriptors here (Linux), so a symlink
    inside is removed, not its target.
    """
    try:
        check_owned_dir(path)
    except FileNotFoundError:
        return
    shutil.rmtree(path, ignore_errors=True)


def fresh_dir(path: str) -> None:
    """An empty directory at `path` (mode 0700) that this call made: what was there before
    is removed as `remove_dir` does; its parent is made when missing."""
    remove_dir(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        raise UserError(f"{path}: still there after t2tcli removed it; another process is writing there") from None


def create_file(path: str) -> BinaryIO:
    """A new file at `path` (mode 0600) opened for writing; refused in one line when
    anything (a file, a symlink, a FIFO) is there already."""
    try:
        fd = os.open(path, _CREATE, 0o600)
    except FileExistsError:
        raise UserError(f"{path}: something is there already, in a directory t2tcli just made for itself") from None
    return os.fdopen(fd, "wb")


def open_file(path: str) -> BinaryIO:
    """A scratch file this user made, opened for reading; refused in one line when it is
    a symlink, not a regular file (a FIFO, a device) or someone else's."""
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UserError(f"{path}: a symbolic link where t2tcli left a scratch file of its own") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            kind = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"owned by uid {info.st_uid}"
            raise UserError(f"{path}: {kind}, where t2tcli left a scratch file of its own")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


@contextlib.contextmanager
def removed_on_failure(path: str) -> Iterator[None]:
    """Removes the scratch directory `path` when the block fails, whatever else fails while
    the block's own cleanup runs (a full disk fails every flush)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError, UserError):
            remove_dir(path)
        raise
