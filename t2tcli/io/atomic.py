"""Output files and directories that are complete or absent, written through names nobody can predict.

A temporary file (or directory: staged_directory) next to its target, renamed over it
once written, is how every output of t2tcli appears. The temporary name comes from `mkstemp` (O_CREAT|O_EXCL,
so a symlink or file planted at a guessed name is never followed or reused), carries the
writer's pid so a later run can clear what a killed one left, and is removed when the
write fails. A write that fails (a full disk) is reported as an OSError naming the
target, which the binaries print as one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from typing import IO, Any

from t2tcli.errors import UserError
from t2tcli.io import fs


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.tmp"


def _stale_temporary(name: str, prefix: str) -> int | None:
    """The pid in a temporary file's name made for `prefix` (None: not one of ours)."""
    match = re.fullmatch(re.escape(prefix) + r"(\d+)(\..*)?", name)
    return int(match.group(1)) if match else None


def remove_stale(directory: str, prefix: str) -> None:
    """Removes temporaries named `<prefix><pid>...` whose process no longer runs: a killed
    run's leftovers vanish once the next run starts (directories too). Symlinks are removed,
    never followed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        pid = _stale_temporary(name, prefix)
        if pid is not None and not process_running(pid):
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)


def process_running(pid: int) -> bool:
    """Whether a process of this id runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def same_file(a: str, b: str) -> bool:
    """Whether two local paths name one file (through symlinks, hard links or `..`)."""
    if fs.is_remote(a) or fs.is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_inputs(path: str, inputs: Iterable[tuple[str, str]], flag: str) -> None:
    """A one-line error when the output `path` is one of the `inputs` ((flag, path) pairs):
    writing it would destroy what is being read."""
    for input_flag, input_path in inputs:
        if input_path and input_path != "-" and same_file(path, input_path):
            raise UserError(f"--{flag}={path} is the same file as --{input_flag}={input_path}; write elsewhere")


def _named(exc: OSError, path: str) -> OSError:
    """The same failure, naming the output the user asked for rather than its temporary."""
    return OSError(exc.errno, exc.strerror or str(exc), path)


@contextlib.contextmanager
def output(path: str, mode: str = "wb") -> Iterator[IO[Any]]:
    """A file object whose content appears at `path` only once the block ends without error.

    `mode` is "wb" or "w" (UTF-8, '\\n' line ends). Local files are synced before the
    rename; on a remote file system the temporary gets a random name and TensorFlow's
    rename (a copy and delete on GCS) puts it in place.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode {mode!r}: 'w' or 'wb'")
    if fs.is_remote(path):
        with _remote_output(path, mode) as f:
            yield f
        return
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _temporary_prefix(path)
    remove_stale(directory, prefix)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}.", dir=directory)
        os.fchmod(fd, 0o666 & ~_umask())  # what open() would give: mkstemp makes it private
    except OSError as exc:
        raise _named(exc, path) from None
    f = os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": "\n"} if mode == "w" else {}))
    try:
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(tmp, path)
        except OSError as exc:
            raise _named(exc, path) from None
        _sync_directory(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            f.close()
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def _remote_output(path: str, mode: str) -> Iterator[IO[Any]]:
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    f = fs.open_file(tmp, mode)
    try:
        yield f
        f.close()
        fs.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            f.close()
        with contextlib.suppress(Exception):
            fs.remove(tmp)
        raise


@contextlib.contextmanager
def staged_directory(target: str, mode: int = 0o777) -> Iterator[str]:
    """A new local directory to fill, that appears at `target` whole once the block ends
    without error; a failure removes it.

    It is made beside `target` (a rename never crosses file systems) under a name nobody
    can predict that carries the writer's pid, so a later run clears what a killed one
    left. It stays private (0700) while it is filled, so no other user can plant a file or
    link in it, and takes `mode` less the umask just before it is renamed. An empty
    directory at `target` is replaced. When another writer renamed a directory to
    `target` first, the staged one is removed and FileExistsError raised, for the caller
    to take theirs or fail.
    """
    if fs.is_remote(target):
        raise ValueError(f"{target}: only a local directory can be staged (object stores rename no directories)")
    parent = os.path.dirname(os.path.abspath(target))
    prefix = _temporary_prefix(target)
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale(parent, prefix)
        staging = _new_directory(parent, f"{prefix}{os.getpid()}.", 0o700)
    except OSError as exc:
        raise _named(exc, target) from None
    try:
        yield staging
        os.chmod(staging, mode & ~_umask())
        try:
            os.replace(staging, target)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise FileExistsError(exc.errno, "made meanwhile by another writer", target) from None
            raise _named(exc, target) from None
        _sync_directory(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _new_directory(parent: str, prefix: str, mode: int) -> str:
    """A new directory in `parent` under an unpredictable name, made by mkdir with `mode`."""
    while True:
        path = os.path.join(parent, prefix + secrets.token_hex(6))
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            continue
        return path


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _sync_directory(directory: str) -> None:
    """Makes the rename itself durable; some file systems cannot open a directory for it."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str, data: bytes) -> None:
    with output(path, "wb") as f:
        f.write(data)


def write_text(path: str, text: str) -> None:
    with output(path, "w") as f:
        f.write(text)


def write_files(files: dict[str, bytes]) -> None:
    """Writes each file complete or absent, in the order given."""
    for path, data in files.items():
        write_bytes(path, data)


def copy(source: str, target: str) -> None:
    """Copies a file so that `target` is complete or absent."""
    with fs.open_file(source, "rb") as src, output(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def is_disk_full(exc: BaseException) -> bool:
    """Whether a failure is a full disk (or quota), as OSError or as TensorFlow reports it."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    text = str(getattr(exc, "message", exc))
    return "No space left on device" in text or "Disk quota exceeded" in text
