"""Files at local paths or remote ones (gs://, and any file system TensorFlow knows).

Datagen's outputs may live on GCS when its pipeline runs on Beam workers. Local paths go
through `os` and never import TensorFlow (whose import costs seconds per run); a path with
a scheme goes through `tf.io.gfile`, whose rename on GCS is a copy and a delete. Every such
call is a `remote_call` for the stop-signal watcher: TensorFlow's GCS client retries in
native code, where Python's own signal handlers never run.
"""

from __future__ import annotations

import glob as globlib
import os
import re
import shutil
import tempfile
import uuid
from typing import IO, Any

from t2tcli import interrupts


def is_remote(path: str) -> bool:
    return "://" in path


# Schemes TensorFlow itself serves; any other (s3://, hdfs://, az://...) is tensorflow-io's.
TENSORFLOW_SCHEMES = ("gs", "ram", "file")
_plugins_loaded = False


def load_file_system_plugins(path: str) -> None:
    """Registers tensorflow-io's file systems (the `s3` extra) the first time a path needs
    a scheme TensorFlow lacks; before any TensorFlow op reads such a path in this process."""
    global _plugins_loaded
    if _plugins_loaded or not is_remote(path) or path.split("://", 1)[0] in TENSORFLOW_SCHEMES:
        return
    _plugins_loaded = True
    try:
        import tensorflow_io  # noqa: F401 - registers its file systems
    except ImportError:
        pass


class _Gfile:
    """tf.io.gfile whose failures (no network, no credentials, no bucket) are OSErrors
    naming the path: every binary reports an OSError as one line."""

    def __getattr__(self, name: str) -> Any:
        from t2tcli.compat import tf

        function = getattr(tf.io.gfile, name)

        def call(path: str, *args: Any, **kwargs: Any) -> Any:
            load_file_system_plugins(path)
            try:
                with interrupts.remote_call(path):
                    return function(path, *args, **kwargs)
            except tf.errors.OpError as exc:
                detail = " ".join(str(exc.message).split())[:300]
                if isinstance(exc, tf.errors.UnimplementedError) and "scheme" in detail:
                    scheme = path.split("://", 1)[0]
                    detail = f"no file system for {scheme}:// here (for s3://, install t2tcli[s3]: tensorflow-io)"
                raise OSError(f"{path}: {detail}") from None

        return call


def _gfile() -> Any:
    return _Gfile()


class BucketError(OSError):
    """A gs:// bucket that does not exist, refuses this process, or does not answer."""

    def __init__(self, path: str, bucket: str, reason: str) -> None:
        super().__init__(f"{path}: bucket gs://{bucket} {reason}")
        self.path = path
        self.reason = f"bucket gs://{bucket} {reason}"


_buckets_found: set[str] = set()
# Buckets whose metadata this process may not read (a 403 for the bucket itself) while its
# objects answer: object roles such as Storage Object Admin lack storage.buckets.get.
_buckets_without_metadata: set[str] = set()


def _bucket_and_object(path: str) -> tuple[str, str]:
    bucket, _, obj = path[len("gs://") :].partition("/")
    return bucket, obj.strip("/")


def _http_status(exc: Any) -> str:
    code = re.search(r"response code (\d+)", str(exc.message))
    return f"HTTP {code.group(1)}" if code else "permission denied"


def check_bucket(path: str) -> None:
    """For a gs:// path, a `BucketError` unless its bucket exists and answers this process.

    Asked before anything is created there: TensorFlow's makedirs walks up a path to the
    bucket's root and, when the bucket does not exist, asks for it again forever. Only a 404
    for the bucket means it does not exist: a 403 for it (no storage.buckets.get) says it
    exists, and the path itself is asked next, refused only when that is forbidden too.
    A bucket found once is not asked for again in this process.
    """
    if not path.startswith("gs://"):
        return
    bucket, obj = _bucket_and_object(path)
    if bucket in _buckets_found:
        return
    if not bucket:
        raise BucketError(path, "", "is not named (gs://BUCKET/PATH)")
    from t2tcli.compat import tf

    try:
        with interrupts.remote_call(f"gs://{bucket}"):
            found = tf.io.gfile.exists(f"gs://{bucket}/")
    except tf.errors.PermissionDeniedError:
        _check_objects_answer(path, bucket, obj)
        _buckets_without_metadata.add(bucket)
        found = True
    except tf.errors.OpError as exc:
        detail = " ".join(str(exc.message).split())[:200]
        raise BucketError(path, bucket, f"did not answer: {detail}") from None
    if not found:
        raise BucketError(path, bucket, "does not exist")
    _buckets_found.add(bucket)


def _check_objects_answer(path: str, bucket: str, obj: str) -> None:
    """A `BucketError` unless the objects at `path` (or one at the bucket's root) may be read."""
    from t2tcli.compat import tf

    probe = f"gs://{bucket}/{obj}" if obj else f"gs://{bucket}/.t2tcli-access-check"
    try:
        with interrupts.remote_call(f"gs://{bucket}"):
            tf.io.gfile.exists(probe)
    except tf.errors.PermissionDeniedError as exc:
        raise BucketError(path, bucket, f"refused access ({_http_status(exc)}): check the credentials") from None
    except tf.errors.OpError as exc:
        detail = " ".join(str(exc.message).split())[:200]
        raise BucketError(path, bucket, f"did not answer: {detail}") from None


def _makedirs_below_bucket(path: str) -> None:
    """makedirs that never asks for the bucket itself: TensorFlow's walks up to the bucket's
    root, whose metadata a user with object access only may not read. The missing levels
    are found from the path up, then their directory markers made from the top down."""
    bucket, obj = _bucket_and_object(path)
    missing: list[str] = []
    parts = obj.split("/") if obj else []
    while parts:
        level = f"gs://{bucket}/{'/'.join(parts)}"
        if _gfile().exists(level):
            if not _gfile().isdir(level):
                raise OSError(f"{path}: {level} is a file, so the directory cannot be made")
            break
        missing.append(level)
        parts.pop()
    from t2tcli.compat import tf

    for level in reversed(missing):
        try:
            with interrupts.remote_call(level):
                tf.io.gfile.mkdir(level)
        except tf.errors.AlreadyExistsError:
            pass
        except tf.errors.OpError as exc:
            raise OSError(f"{level}: {' '.join(str(exc.message).split())[:300]}") from None


class _RemoteFile:
    """A tf.io.gfile.GFile whose reads, writes and close (where an object store uploads,
    and finds the bucket missing) fail as OSErrors naming the path."""

    def __init__(self, path: str, mode: str) -> None:
        self._path = path
        if "w" in mode or "a" in mode:
            check_bucket(path)
        self._file = _gfile().GFile(path, mode)

    def _call(self, name: str, *args: Any) -> Any:
        from t2tcli.compat import tf

        try:
            with interrupts.remote_call(self._path):
                return getattr(self._file, name)(*args)
        except tf.errors.OpError as exc:
            raise OSError(f"{self._path}: {' '.join(str(exc.message).split())[:300]}") from None

    def read(self, n: int = -1) -> bytes:
        return self._call("read", n)

    def readline(self) -> bytes:
        return self._call("readline")

    def write(self, data: bytes) -> None:
        self._call("write", data)

    def flush(self) -> None:
        self._call("flush")

    def seek(self, offset: int, whence: int = 0) -> None:
        self._call("seek", offset, whence)

    def tell(self) -> int:
        return self._call("tell")

    def close(self) -> None:
        self._call("close")

    def __iter__(self) -> Any:
        return iter(self.readline, b"")

    def __enter__(self) -> _RemoteFile:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def open_file(path: str, mode: str = "rb") -> IO[Any]:
    """A file object for `path` in a binary `mode` ("rb", "wb")."""
    if is_remote(path):
        return _RemoteFile(path, mode)  # type: ignore[return-value]
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
        _remote_makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def _remote_makedirs(path: str) -> None:
    check_bucket(path)
    if path.startswith("gs://") and _bucket_and_object(path)[0] in _buckets_without_metadata:
        _makedirs_below_bucket(path)
    else:
        _gfile().makedirs(path)


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


def names_in(directory: str) -> list[str]:
    """`listdir`, with a directory that is not there as empty: on an object store (s3://)
    `makedirs` leaves no trace, so a directory exists only once something is in it."""
    return listdir(directory) if isdir(directory) else []


def files_under(directory: str, suffix: str = "") -> list[str]:
    """Paths relative to `directory` of every file below it ending in `suffix`, sorted;
    hidden files and directories, and `__pycache__`, are left out."""
    walk = _gfile().walk if is_remote(directory) else os.walk
    hidden = (".", "__pycache__")
    found: list[str] = []
    for root, dirs, names in walk(directory):
        dirs[:] = [d.rstrip("/") for d in dirs if not d.startswith(hidden)]
        rel = (
            os.path.relpath(root.rstrip("/"), directory.rstrip("/"))
            if root.rstrip("/") != directory.rstrip("/")
            else ""
        )
        found += [os.path.join(rel, n) for n in names if n.endswith(suffix) and not n.startswith(hidden)]
    return sorted(found)


def mkdtemp(parent: str, prefix: str) -> str:
    """A new directory in `parent` under a name nobody else gets, local or remote."""
    if is_remote(parent):
        path = f"{parent.rstrip('/')}/{prefix}{uuid.uuid4().hex}"
        _remote_makedirs(path)
        return path
    return tempfile.mkdtemp(prefix=prefix, dir=parent)
