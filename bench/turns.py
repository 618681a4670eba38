"""The order a benchmark's systems run in, turn by turn.

A 2-core VM's speed drifts over minutes, so in a fixed order the system that always runs
first, or last, meets a different machine from the others: every other turn runs them
in reverse, which takes a steady drift out of a median of two turns and evens it out
over more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

Item = TypeVar("Item")


def in_turn(items: Iterable[Item], turn: int) -> list[Item]:
    """`items` in the order turn `turn` (0, 1, ...) runs them."""
    ordered = list(items)
    return ordered if turn % 2 == 0 else ordered[::-1]
