"""The order a benchmark's systems run in, turn by turn.

A 2-core VM's speed drifts over minutes, so in a fixed order the system that always runs
first, or last, meets a different machine from the others: every other turn runs them
in reverse, which takes a steady drift out of a median of two turns and evens it out
over more.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Hashable, Iterable
from typing import Any, TypeVar

Item = TypeVar("Item")
Key = TypeVar("Key", bound=Hashable)


def in_turn(items: Iterable[Item], turn: int) -> list[Item]:
    """`items` in the order turn `turn` (0, 1, ...) runs them."""
    ordered = list(items)
    return ordered if turn % 2 == 0 else ordered[::-1]


def best_session_medians(runs: dict[Key, tuple[Any, Any]], rounds: int, turns: int) -> dict[Key, float]:
    """Seconds of each (session, fetches) run: the median of `rounds` calls, the best
    median over `turns` turns of all of them in turn order."""
    best: dict[Key, float] = {}
    for turn in range(turns):
        for key, (session, fetches) in in_turn(runs.items(), turn):
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                session.run(fetches)
                times.append(time.perf_counter() - start)
            best[key] = min(best.get(key, float("inf")), statistics.median(times))
    return best
