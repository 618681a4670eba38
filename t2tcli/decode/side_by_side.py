"""Batches decoded side by side, a batch on each core, as the CPU engines run them.

At decode's batch sizes one batch's products are too small to split well across cores,
so a batch on each core gets through more lines than one batch on all of them. Where
that would leave cores idle (beside the input's last batch, or for every batch of an
interactive decode), the batch goes to the engine in parts, one for each core it can fill.

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
    submit: Callable[[Any, int], Handle],
    finish: Callable[[Handle], Iterator[dict[str, Any]]],
    in_flight: int,
    workers: int,
) -> Iterator[dict[str, Any]]:
    """Rows of `batches`, in order: `submit(batch, parts)` hands a batch to the engine in
    `parts` parts (1: whole), and `finish(handle)` waits for its rows.

    Up to `in_flight` batches are in the engine at once. A batch is read before the one
    before it is submitted, so that the input's last batch is known to be the last. Batches
    run in rounds of one a worker, so the last one shares its round with the batches before
    it that did not fill a whole round; it is split over the workers they leave idle, and
    goes whole where there are none (splitting it then only makes its parts queue behind
    each other, and smaller parts run fewer rows a second). With `in_flight` 1 (a line
    must not wait for the next one) every batch runs alone, so every batch is split.
    """
    if in_flight == 1:
        for batch in batches:
            yield from finish(submit(batch, workers))
        return
    pending: collections.deque = collections.deque()
    held = None  # read, and submitted once the next batch shows whether it was the last
    count = 0
    for batch in batches:
        if held is not None:
            pending.append(submit(held, 1))
            if len(pending) == in_flight:
                yield from finish(pending.popleft())
        held = batch
        count += 1
    if held is not None:
        pending.append(submit(held, last_parts(count, workers)))
    while pending:
        yield from finish(pending.popleft())


def last_parts(batches: int, workers: int) -> int:
    """Parts for the last of `batches` batches: one, and one more for each worker the final
    round of batches (one a worker) leaves idle."""
    return workers - (batches - 1) % max(1, workers)
