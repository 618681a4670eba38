"""Files at local paths or remote ones (gs://, and any file system TensorFlow knows).

Datagen's outputs may live on GCS when its pipeline runs on Beam workers. Local paths go
through `os` and never import TensorFlow (whose import costs seconds per run); a path with
a scheme goes through `tf.io.gfile`, whose rename on GCS is a copy and a delete.
"""

from __future__ import annotations

import glob as globlib
import os
import shutil
from typing import IO, Any


def is_remote(path: str) -> bool:
    return "://" in path


class _Gfile:
    """tf.io.gfile whose failures (no network, no credentials, no bucket) are OSErrors
    naming the path: every binary reports an OSError as one line."""

    def __getattr__(self, name: str) -> Any:
        from t2tcli.compat import tf

        function = getattr(tf.io.gfile, name)

        def call(path: str, *args: Any, **kwargs: Any) -> Any:
            try:
                return function(path, *args, **kwargs)
            except tf.errors.OpError as exc:
                detail = " ".join(str(exc.message).split())[:300]
                raise OSError(f"{path}: {detail}") from None

        return call


def _gfile() -> Any:
    return _Gfile()


def open_file(path: str, mode: str = "rb") -> IO[Any]:
    """A file object for `path` in a binary `mode` ("rb", "wb")."""
    if is_remote(path):
        return _gfile().GFile(path, mode)
    return open(path, mode)  # noqa: SIM115 - the caller closes it


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    if is_remote(path):
        return _gfile().exists(path) and not _gfile().isdir(path)
    return os.path.isfile(path)


def getsize(path: str) -> int:
    return _gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def size_and_mtime(path: str) -> tuple[int, int]:
    """(size in bytes, modification time in nanoseconds)."""
    if is_remote(path):
        stat = _gfile().stat(path)
        return stat.length, stat.mtime_nsec
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def read_bytes(path: str) -> bytes:
    with open_file(path, "rb") as f:
        return f.read()


def rename(source: str, target: str) -> None:
    if is_remote(source) or is_remote(target):
        _gfile().rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def remove(path: str) -> None:
    if is_remote(path):
        _gfile().remove(path)
    else:
        os.remove(path)


def makedirs(path: str) -> None:
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def rmtree(path: str) -> None:
    """Removes a directory tree; nothing when it is not there."""
    if is_remote(path):
        if _gfile().exists(path):
            _gfile().rmtree(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def glob_in(directory: str, pattern: str) -> list[str]:
    """Paths in `directory` matching the glob `pattern` (the directory taken literally)."""
    if is_remote(directory):
        return sorted(_gfile().glob(directory.rstrip("/") + "/" + pattern))
    return sorted(globlib.glob(os.path.join(globlib.escape(directory), pattern)))


def glob(pattern: str) -> list[str]:
    """The sorted paths matching the glob `pattern`, directories included in it."""
    if is_remote(pattern):
        return sorted(_gfile().glob(pattern))
    return sorted(globlib.glob(pattern))


def listdir(path: str) -> list[str]:
    """The names in a directory, hidden ones included, sorted."""
    return sorted(_gfile().listdir(path) if is_remote(path) else os.listdir(path))
