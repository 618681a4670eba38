"""Progress bars on stderr, in one place: when a person sees one (asked for, or stderr is a
terminal: a bar in a log file is noise) and how it looks, for datagen, training and decoding.
"""

from __future__ import annotations

import sys
from typing import Any


def wanted(flag: bool | None) -> bool:
    """--progress when given, else whether stderr is a terminal."""
    return flag if flag is not None else sys.stderr.isatty()


def bar(total: int | None, unit: str, desc: str | None = None, enabled: bool = True, **options: Any) -> Any:
    """A tqdm bar on stderr (a disabled one when not `enabled`: its calls do nothing)."""
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, disable=not enabled, file=sys.stderr, dynamic_ncols=True, **options)
