"""Batches decoded side by side, a batch on each core, as the CPU engines run them.

At decode's batch sizes one batch's products are too small to split well across cores,
so a batch on each core gets through more lines than one batch on all of them. A batch
that no other batch runs beside (the input's last, or every batch of an interactive
decode) would leave cores idle that way, so it goes to the engine in a part per core.

Imports: nothing of t2tcli.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

Handle = TypeVar("Handle")


def workers() -> int:
    """Batches computed side by side, one thread each: one per core this process may use."""
    # Under `taskset` or a cpuset, os.cpu_count() counts the whole machine, and that many
    # threads would fight over a few cores.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores)


def part_rows(rows: int, parts: int) -> int:
    """Rows in each part when `rows` are split into `parts` (the last part may hold fewer)."""
    return -(-rows // max(1, parts))


def run(
    batches: Iterable[Any],
    submit: Callable[[Any, bool], Handle],
    finish: Callable[[Handle], Iterator[dict[str, Any]]],
    in_flight: int,
) -> Iterator[dict[str, Any]]:
    """Rows of `batches`, in order: `submit(batch, split)` hands a batch to the engine, whole
    or (`split`) in a part per core, and `finish(handle)` waits for its rows.

    Up to `in_flight` batches are in the engine at once. A batch is read before the one
    before it is submitted, so that the input's last batch is known to be the last and
    split; with `in_flight` 1 (a line must not wait for the next one) every batch is split.
    """
    if in_flight == 1:
        for batch in batches:
            yield from finish(submit(batch, True))
        return
    pending: collections.deque = collections.deque()
    held = None  # read, and submitted once the next batch shows whether it was the last
    for batch in batches:
        if held is not None:
            pending.append(submit(held, False))
            if len(pending) == in_flight:
                yield from finish(pending.popleft())
        held = batch
    if held is not None:
        pending.append(submit(held, True))
    while pending:
        yield from finish(pending.popleft())
