"""The one exception type that the binaries turn into a one-line error message.

Anything raised as `UserError` is the user's to fix (a flag, a file, a name), so the
binaries print it without a traceback and exit non-zero. Any other exception is a bug
and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """A mistake in flags, names or input files, reported as one line."""


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """Returns "; did you mean 'x'?" (or '' when nothing is close) for error messages.

    Only the best match is named, unless others are just as close (then up to three).
    """
    scored = sorted(
        ((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in set(candidates)),
        key=lambda item: (-item[0], item[1]),
    )
    scored = [(score, c) for score, c in scored if score >= 0.6]
    if not scored:
        return ""
    close = [c for score, c in scored[:3] if score >= scored[0][0] - 0.02]
    if len(close) == 1:
        return f"; did you mean '{close[0]}'?"
    return "; did you mean one of " + ", ".join(f"'{c}'" for c in close) + "?"
