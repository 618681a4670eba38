"""Line-oriented text I/O: `-` for stdin/stdout, escapes, atomic outputs, lines read in
bounded pieces and compressed input bounded in what it may inflate to.

One record is one line. Text that itself holds newlines travels escaped (`\\n`), so
the line count of an output file always equals the line count of its input. No line is
ever held whole past the cut its reader asks for, so a file of one endless line costs
no more memory than a file of short ones.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import os
import stat
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO, TextIO

from t2tcli.errors import UserError
from t2tcli.io import atomic, fs, preflight

_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}
# Bytes read from a stream at once while looking for lines' ends.
READ_BYTES = 1 << 16
# Bytes kept of one line read for decoding: what no decode tokenizes past (the model's
# lengths, MAX_LENGTH at most, cut at t2tcli.decode.lines.LineJob.max_chars) is skipped.
DECODE_LINE_BYTES = 4 << 20
# Times its own size a compressed input may inflate to (text compresses well under 20
# times), beyond a floor every small file may reach.
MAX_INFLATION = 200
INFLATION_FLOOR_BYTES = 256 << 20


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


def read_lines(path: str, flag: str, max_bytes: int = DECODE_LINE_BYTES) -> Iterator[str]:
    """Lines of `path` (or stdin for '-') without their line ending, read lazily, each cut
    to its first `max_bytes` bytes (at a character's start) as it is read.

    Only '\\n' ends a line (plus a '\\r' before it), so a stray '\\r' or form feed
    inside a line never splits it and shifts every following output. Each line is
    decoded on its own, so text that is not UTF-8 is reported at its own line.
    """
    if path == "-":
        yield from _lines(sys.stdin.buffer, "<stdin>", flag, max_bytes)
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
        yield from _lines(f, path, flag, max_bytes)


def _lines(stream: BinaryIO, name: str, flag: str, max_bytes: int) -> Iterator[str]:
    for number, (raw, cut) in enumerate(bounded_lines(stream, max_bytes), 1):
        if raw.endswith(b"\r") and not cut:
            raw = raw[:-1]
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(
                f"--{flag}: {name}:{number}: not UTF-8 (byte {exc.start + 1} of the line, 0x{raw[exc.start]:02x})"
            ) from None
        yield line


def bounded_lines(stream: BinaryIO, max_bytes: int, read_bytes: int = READ_BYTES) -> Iterator[tuple[bytes, bool]]:
    """(line without its '\\n', whether it was cut) of each line of `stream`: a line longer
    than `max_bytes` is cut there (at a character's start) and the rest of it skipped as it
    is read, so memory stays within `max_bytes` plus one read whatever the line's length.
    A stream that can hand over what it has (`read1`: stdin, a pipe) is not waited on
    for more, so a line typed is a line read."""
    read = getattr(stream, "read1", stream.read)
    held: list[bytes] = []  # the start of the line that the next block continues
    size = 0
    cut = False  # the held line is past max_bytes: the rest of it is skipped

    def line(raw: bytes) -> tuple[bytes, bool]:
        return (whole_characters(raw[:max_bytes]), True) if len(raw) > max_bytes else (raw, False)

    while block := read(read_bytes):
        parts = block.split(b"\n")
        tail = parts.pop()
        if parts:
            if cut:
                yield whole_characters(held[0]), True
            else:
                yield line(b"".join(held) + parts[0] if held else parts[0])
            rest = parts[1:]
            if rest and max(map(len, rest)) > max_bytes:
                yield from map(line, rest)
            else:
                yield from zip(rest, itertools.repeat(False))
            held, size, cut = [], 0, False
        if tail and not cut:
            held.append(tail)
            size += len(tail)
            if size > max_bytes:
                held, cut = [b"".join(held)[:max_bytes]], True
    if held:
        yield (whole_characters(held[0]), True) if cut else line(b"".join(held))


def whole_characters(raw: bytes) -> bytes:
    """`raw` without the UTF-8 character a cut split at its end (if any)."""
    end = len(raw)
    start = end - 1
    while start >= 0 and end - start < 4 and raw[start] & 0xC0 == 0x80:
        start -= 1
    if start >= 0 and raw[start] >= 0xC0:
        need = 2 if raw[start] < 0xE0 else 3 if raw[start] < 0xF0 else 4
        if end - start < need:
            return raw[:start]
    return raw


class BoundedInflation(io.RawIOBase):
    """A decompressing stream that refuses, in one line naming the file, to give more
    than MAX_INFLATION times the compressed size (or INFLATION_FLOOR_BYTES): a small
    archive cannot stand for endless input."""

    def __init__(self, stream: BinaryIO, name: str, compressed_bytes: int) -> None:
        super().__init__()
        self.stream = stream
        self.name = name
        self.limit = max(INFLATION_FLOOR_BYTES, MAX_INFLATION * compressed_bytes)
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.stream.read(min(len(view), self.limit + 1 - self.given))
        self.given += len(data)
        if self.given > self.limit:
            raise UserError(
                f"{self.name}: decompresses to more than {self.limit} bytes, over {MAX_INFLATION} times its "
                "compressed size: refused as damaged or hostile (decompress it yourself if it is real)"
            )
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        super().close()


# Compressed files read as their text, by name, each through BoundedInflation.
_DECOMPRESSORS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def compression(path: str) -> str | None:
    """The module that decompresses `path` (by its suffix: .gz, .bz2, .xz), or None."""
    return next((module for suffix, module in _DECOMPRESSORS.items() if path.endswith(suffix)), None)


def decompressed(path: str, raw: BinaryIO) -> BinaryIO:
    """`raw`, the bytes of `path`, decompressed as they are read when its suffix names a
    compression, within BoundedInflation's bound; a file that is not what its name says
    is a one-line error."""
    module = compression(path)
    if module is None:
        return raw
    opener = importlib.import_module(module)
    stream = opener.open(raw, "rb")
    try:
        stream.peek(1)
    except (OSError, EOFError, ValueError) as exc:
        raise UserError(f"{path}: not a {module} file ({exc})") from None
    return io.BufferedReader(BoundedInflation(stream, path, fs.getsize(path)), READ_BYTES)  # type: ignore[return-value]


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
