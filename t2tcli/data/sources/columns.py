"""Running a problem's per-record `preprocess` over whole columns at once.

A problem describes a record once: `preprocess(record)` builds `inputs` and `targets`
from one record's strings, and t2t-decode runs that same function on each line. For
datagen's millions of rows, the library calls it once per chunk instead, with each
field a `Column`: a list of strings that answers the operations a preprocess uses on a
string (`+` with strings or other columns, slicing, and the str methods that return a
string: lower, strip, replace, ...) by applying them to every row in one C-level
loop. The helpers of `t2tcli.data.sources.text` accept both.

Anything a Column cannot do as a string would (`if`, `len`, comparisons, f-strings,
split) raises `NotColumnwise`, and the problem then runs record by record: slower,
never different. A column-wise result is also checked against the per-record result on
the first rows before it is trusted.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

# str methods that map one string to one string: applied to each row of a Column.
_STRING_METHODS = (
    "capitalize",
    "casefold",
    "center",
    "expandtabs",
    "ljust",
    "lower",
    "lstrip",
    "removeprefix",
    "removesuffix",
    "replace",
    "rjust",
    "rstrip",
    "strip",
    "swapcase",
    "title",
    "translate",
    "upper",
    "zfill",
)


class NotColumnwise(Exception):
    """The preprocess did something with a Column that only a single string can do."""


class Column:
    """A column of strings standing in for one record's string; see the module docstring."""

    __slots__ = ("values",)

    def __init__(self, values: list[str]) -> None:
        self.values = values

    @property
    def rows(self) -> int:
        return len(self.values)

    def _other(self, other: Any) -> Any:
        if isinstance(other, Column):
            if other.rows != self.rows:
                raise NotColumnwise("columns of different lengths")
            return other.values
        if isinstance(other, str):
            return itertools.repeat(other, self.rows)
        raise NotColumnwise(f"+ with {type(other).__name__}")

    def __add__(self, other: Any) -> Column:
        return Column(list(map(operator.add, self.values, self._other(other))))

    def __radd__(self, other: Any) -> Column:
        return Column(list(map(operator.add, self._other(other), self.values)))

    def __getitem__(self, index: Any) -> Column:
        if not isinstance(index, slice):
            raise NotColumnwise("indexing a single character")
        return Column(list(map(operator.itemgetter(index), self.values)))

    def map(self, function: Callable[[str], str]) -> Column:
        """Each row through `function` (a str -> str function of the library's helpers)."""
        return Column(list(map(function, self.values)))

    def __getattr__(self, name: str) -> Any:
        if name not in _STRING_METHODS:
            raise NotColumnwise(f"str.{name}")

        def method(*args: Any) -> Column:
            return Column(list(map(operator.methodcaller(name, *args), self.values)))

        return method

    def _refuse(self, *args: Any) -> Any:
        raise NotColumnwise("an operation on a whole string")

    # Whatever would need one string's value: a condition, a length, a comparison, text.
    __bool__ = __len__ = __iter__ = __contains__ = __str__ = __format__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __mul__ = __mod__ = _refuse

    def __repr__(self) -> str:
        return f"Column({self.rows} rows)"


def as_column(value: Any, rows: int) -> list[str] | None:
    """A preprocess result field as a list of `rows` strings (a plain str is every row's);
    None when it is neither."""
    if isinstance(value, Column):
        return value.values if value.rows == rows else None
    if isinstance(value, str):
        return [value] * rows
    return None


def run(
    preprocess: Callable[[dict[str, Any]], Any], columns: dict[str, Sequence[str]]
) -> tuple[list[str], list[str]] | None:
    """(inputs, targets) of every row by one column-wise call, or None when `preprocess`
    cannot run column-wise (it then runs record by record)."""
    rows = len(next(iter(columns.values()))) if columns else 0
    record = {name: Column(list(values)) for name, values in columns.items()}
    try:
        out = preprocess(record)
    except NotColumnwise:
        return None
    except Exception:  # noqa: BLE001 - the per-record run reports it with the record's line
        return None
    if not isinstance(out, dict):
        return None
    inputs, targets = as_column(out.get("inputs"), rows), as_column(out.get("targets"), rows)
    if inputs is None or targets is None:
        return None
    return inputs, targets
