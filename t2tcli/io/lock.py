"""One writer per directory: a lock file naming its holder, taken without waiting.

t2t-train holds its model_dir, t2t-avg-checkpoints its output_dir, t2t-eval its results
directory and t2t-datagen each problem (and vocabulary) it writes in a data_dir. A
second writer is refused at once with one line naming the holder (pid, host, start
time), so two runs never overwrite each other's checkpoints or shards.

On a local disk the lock is `flock` on the lock file: the kernel releases it when its
holder dies, however it dies, so a lock left by a killed run is taken over (with a
warning naming the dead holder) and a live one never is. On NFS, Linux maps flock onto
the server's byte-range locks. On a file system TensorFlow reaches by URL (gs://...)
there is no atomic create, so the lock file is only looked for, then written: it stops
a run started after another has begun, not two started in the same second, and one
left by a run killed on another host is reported rather than guessed to be stale.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator

from absl import logging

from t2tcli.errors import UserError
from t2tcli.io import fs
from t2tcli.io.atomic import process_running


@dataclasses.dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started: str
    program: str

    @staticmethod
    def me() -> Holder:
        program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        return Holder(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S %Z"), program)

    def to_bytes(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self), sort_keys=True) + "\n").encode()

    @staticmethod
    def parse(data: bytes) -> Holder | None:
        """The holder a lock file names; None for an empty or unreadable one (it is untrusted input)."""
        try:
            fields = json.loads(data.decode("utf-8"))
            holder = Holder(**{k: fields[k] for k in ("pid", "host", "started", "program")})
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        types_fit = isinstance(holder.pid, int) and all(
            isinstance(v, str) for v in (holder.host, holder.started, holder.program)
        )
        return holder if types_fit else None

    def describe(self) -> str:
        return f"{self.program} (pid {self.pid} on {self.host}, since {self.started})"

    def alive_here(self) -> bool:
        return self.host == socket.gethostname() and process_running(self.pid)


def _in_use(directory: str, what: str, holder: Holder | None, lock_path: str) -> UserError:
    who = holder.describe() if holder else f"another process (its lock file {lock_path} is unreadable)"
    return UserError(f"{directory} is in use: {who} is writing {what}; wait for it to finish or use another directory")


@contextlib.contextmanager
def hold(directory: str, what: str, name: str = ".t2tcli.lock") -> Iterator[None]:
    """Holds `directory/name` while the block runs; `what` says what is being written.

    The directory is made when missing, and removed again at the end if it is still empty.
    """
    made = not fs.isdir(directory)
    fs.makedirs(directory)
    lock_path = os.path.join(directory, name)
    try:
        if fs.is_remote(directory):
            with _remote(directory, lock_path, what):
                yield
        else:
            with _local(directory, lock_path, what):
                yield
    finally:
        if made and not fs.is_remote(directory):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


@contextlib.contextmanager
def hold_all(directory: str, names: list[tuple[str, str]]) -> Iterator[None]:
    """Holds several locks of one directory ((lock file name, what it guards) pairs), in name order."""
    with contextlib.ExitStack() as stack:
        for name, what in sorted(names):
            stack.enter_context(hold(directory, what, name))
        yield


def _open_locked(lock_path: str) -> tuple[int, bool | None]:
    """(fd, whether flock holds it; None where the file system has no flock) of the lock
    file, opened again if its holder removed it between our open and our flock."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return fd, False
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                os.close(fd)
                raise
            return fd, None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock_path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            return fd, True
        os.close(fd)


def _read_fd(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


@contextlib.contextmanager
def _local(directory: str, lock_path: str, what: str) -> Iterator[None]:
    fd, locked = _open_locked(lock_path)
    try:
        previous = Holder.parse(_read_fd(fd))
        for _ in range(50):  # a holder that has just taken the lock writes its name a moment later
            if previous is not None or locked is not False:
                break
            time.sleep(0.02)
            previous = Holder.parse(_read_fd(fd))
        if locked is None:  # no flock: free when nobody is named, or only a holder seen dead here
            locked = previous is None or (previous.host == socket.gethostname() and not previous.alive_here())
        if not locked:
            raise _in_use(directory, what, previous, lock_path)
        if previous is not None and previous.pid != os.getpid():
            logging.warning("%s: taking over the lock of %s, which no longer runs", directory, previous.describe())
        os.ftruncate(fd, 0)
        os.pwrite(fd, Holder.me().to_bytes(), 0)
        os.fsync(fd)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.remove(lock_path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _remote(directory: str, lock_path: str, what: str) -> Iterator[None]:
    if fs.exists(lock_path):
        previous = Holder.parse(fs.read_bytes(lock_path))
        stale_here = previous is not None and previous.host == socket.gethostname() and not previous.alive_here()
        if not stale_here:
            error = _in_use(directory, what, previous, lock_path)
            raise UserError(f"{error}; if that run is gone, remove {lock_path}")
        logging.warning("%s: taking over the lock of %s, which no longer runs", directory, previous.describe())
    with fs.open_file(lock_path, "wb") as f:
        f.write(Holder.me().to_bytes())
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fs.remove(lock_path)
