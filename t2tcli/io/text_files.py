"""Line-oriented text I/O for t2t-decode: `-` for stdin/stdout, escapes, atomic outputs.

One record is one line. Text that itself holds newlines travels escaped (`\\n`), so
the line count of an output file always equals the line count of its input.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from typing import BinaryIO, TextIO

from t2tcli.errors import UserError
from t2tcli.io import atomic, fs, preflight

_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}


def escape(text: str, tabs: bool = False) -> str:
    """Makes `text` fit on one line: backslash, newline and carriage return are escaped
    (and tabs, with `tabs`: a field of a tab-separated line)."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return text.replace("\t", "\\t") if tabs else text


def unescape(text: str) -> str:
    """Inverse of `escape` (also `\\t`); a backslash before anything else stays as it is."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in _UNESCAPES:
            out.append(_UNESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def read_lines(path: str, flag: str) -> Iterator[str]:
    """Lines of `path` (or stdin for '-') without their line ending, read lazily.

    Only '\\n' ends a line (plus a '\\r' before it), so a stray '\\r' or form feed
    inside a line never splits it and shifts every following output. Each line is
    decoded on its own, so text that is not UTF-8 is reported at its own line.
    """
    if path == "-":
        yield from _lines(sys.stdin.buffer, "<stdin>", flag)
        return
    if fs.is_remote(path):
        if not fs.exists(path):
            raise UserError(f"--{flag}={path}: no such file")
        if fs.isdir(path):
            raise UserError(f"--{flag}={path}: is a directory")
    try:
        f = fs.open_file(path, "rb")
    except FileNotFoundError:
        raise UserError(f"--{flag}={path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"--{flag}={path}: is a directory") from None
    except PermissionError:
        raise UserError(f"--{flag}={path}: no permission to read it") from None
    with f:
        yield from _lines(f, path, flag)


def _lines(stream: BinaryIO, name: str, flag: str) -> Iterator[str]:
    for number, raw in enumerate(stream, 1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(
                f"--{flag}: {name}:{number}: not UTF-8 (byte {exc.start + 1} of the line, 0x{raw[exc.start]:02x})"
            ) from None
        yield line


def rereadable(path: str) -> bool:
    """Whether `path` is a regular file, which can be read twice; stdin, a pipe, a FIFO,
    `/dev/stdin` or a process substitution (`<(...)`) yield their lines only once."""
    if path == "-":
        return False
    if fs.is_remote(path):
        return fs.isfile(path)
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def count_lines(path: str) -> int | None:
    """Number of lines of a regular file (None for a stream), for the progress bar's total."""
    if not rereadable(path):
        return None
    n = 0
    last = b"\n"
    with fs.open_file(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


@contextlib.contextmanager
def atomic_output(path: str, flag: str) -> Iterator[TextIO]:
    """A text stream for `path` that appears under its name only once complete
    (`t2tcli.io.atomic`); '-' is stdout, flushed line by line by the caller."""
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    preflight.check_output_file(path, flag)
    with atomic.output(path, "w") as f:
        yield f
