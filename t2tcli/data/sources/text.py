"""Text helpers for a problem's `preprocess`, for one record's strings or whole columns.

Each takes a `str` (t2t-decode's line, one record) or a `t2tcli.data.sources.columns.Column` (a
datagen chunk) and returns the same kind, so one preprocess serves both:

    def preprocess(self, r):
        return {"inputs": "question: " + squash_spaces(r["question"].lower()),
                "targets": choice(r["label"], ("yes", "no"), "label")}
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np

from t2tcli.data.sources.columns import Column
from t2tcli.errors import UserError


def squash_spaces(text: str | Column) -> str | Column:
    """Whitespace runs (newlines and tabs included) made one space; no space at either end."""
    if isinstance(text, str):
        return " ".join(text.split())
    values = list(text.values)
    for i in _irregular_spacing(values):
        values[i] = " ".join(values[i].split())
    return Column(values)


def choice(value: str | Column, allowed: Iterable[str], field: str, default: str | None = None) -> str | Column:
    """`value` without surrounding spaces, which must be one of `allowed`: else `default`,
    or with no default an error naming the field and the value."""
    allowed = tuple(allowed)
    if isinstance(value, str):
        stripped = value.strip()
        if stripped in allowed:
            return stripped
        if default is not None:
            return default
        raise UserError(f"{field} must be one of {', '.join(allowed)}, got {value!r}")
    stripped = list(map(str.strip, value.values))
    if set(stripped) <= set(allowed):
        return Column(stripped)
    if default is None:
        bad = next(v for v, s in zip(value.values, stripped, strict=True) if s not in allowed)
        raise UserError(f"{field} must be one of {', '.join(allowed)}, got {bad!r}")
    known = {a: a for a in allowed}
    return Column(list(map(known.get, stripped, itertools.repeat(default))))


# What str.split() splits on besides the space; U+3000 is the last whitespace character.
_OTHER_WHITESPACE = tuple(c for c in map(chr, range(0x3001)) if c.isspace() and c != " ")


def _irregular_spacing(texts: list[str]) -> list[int]:
    """Indices of the texts that `squash_spaces` would change: other whitespace than the
    space, two spaces in a row, a space at either end.

    Most texts are already single-spaced, so the texts are scanned joined: ASCII with
    numpy, other text with one C-level search per pattern. A NUL inside a text (there
    is then no safe separator) marks every text.
    """
    joined = "\0".join(texts)
    if not texts:
        return []
    if joined.count("\0") != len(texts) - 1:
        return list(range(len(texts)))
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1)
    return np.unique(np.searchsorted(ends, _irregular_positions(joined), side="right")).tolist()


def _irregular_positions(joined: str) -> list[int] | np.ndarray:
    if not joined:
        return []
    if joined.isascii():
        codes = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        space = codes == 0x20
        ends = space | (codes == 0)  # a space, or the NUL where a text ends and the next starts
        irregular = (codes - np.uint8(1)) < np.uint8(0x1F)  # 0x01-0x1f: tab, newline and the like
        irregular[1:] |= space[1:] & ends[:-1]  # after a space, or first in a text
        irregular[:-1] |= space[:-1] & (codes[1:] == 0)  # last in a text
        irregular[[0, -1]] |= space[[0, -1]]  # first in the first text, last in the last
        return np.flatnonzero(irregular)
    positions = []
    find = joined.find
    # (pattern, offset in it of a character of the text to fix): the NUL of "\0 " ends the text before.
    for pattern, offset in (*((c, 0) for c in _OTHER_WHITESPACE), ("  ", 0), (" \0", 0), ("\0 ", 1)):
        at = find(pattern)
        while at >= 0:
            positions.append(at + offset)
            at = find(pattern, at + 1)
    if joined.startswith(" "):
        positions.append(0)
    if joined.endswith(" "):
        positions.append(len(joined) - 1)
    return positions
