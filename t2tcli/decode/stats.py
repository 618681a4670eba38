"""What a run of t2t-decode counted, and the lines it logs about it.

Engines say what they can of their own work (steps, rows computed, seconds) in each
batch's first prediction; the counts here turn that into one summary line, so a
decode's speed and where its time went can be read off a single run.

Imports: nothing of t2tcli.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from absl import logging


@dataclasses.dataclass
class Stats:
    lines: int = 0
    empty: int = 0
    output_tokens: int = 0
    truncated_inputs: int = 0
    truncated_targets: int = 0
    batches: int = 0
    # Steps the decode loops ran, summed over batches (None: the engine does not say).
    decode_steps: int | None = None
    # Rows those steps computed, and rows x steps had every row run every step (None:
    # the engine does not say).
    row_steps: int | None = None
    full_row_steps: int | None = None
    # Seconds t2t-decode waited on the engine, summed over batches (None: the engine does
    # not say): the rest of the decode time is t2t-decode's own work around it.
    engine_seconds: float | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)
    first_batch: float | None = None
    last_batch: float | None = None
    finished: float | None = None

    def summary(self) -> str:
        end = self.finished or time.monotonic()
        total = end - self.started
        busy = end - (self.first_batch or self.started)
        rate = self.lines / busy if busy > 0 else 0.0
        tok_rate = self.output_tokens / busy if busy > 0 else 0.0
        steps = "" if self.decode_steps is None else f", {self.decode_steps} decode steps"
        if self.row_steps is not None and self.full_row_steps:
            # What finished lines leaving the loop saved.
            steps += f", {self.row_steps / self.full_row_steps:.0%} of their rows computed"
        if self.engine_seconds is not None and busy > 0:
            steps += f"; {self.engine_seconds:.2f} s of the {busy:.2f} s waiting on the engine"
        return (
            f"{self.lines} lines ({self.empty} empty), {self.output_tokens} output tokens in {total:.1f} s "
            f"({total - busy:.1f} s start-up): {rate:.1f} sentences/s, {tok_rate:.1f} tokens/s; "
            f"{self.batches} batch{'' if self.batches == 1 else 'es'}{steps}"
        )

    def count_batch(self, prediction: dict[str, Any], rows: int) -> None:
        """Called with the first prediction of each batch. The time logged is since the
        previous batch's results, not the batch's own: an engine with two batches in
        flight (engines.session_predict) computed part of this one beside the last."""
        now = time.monotonic()
        seconds = now - (self.last_batch or self.first_batch or now)
        self.last_batch = now
        number = self.batches
        self.batches += 1
        if "engine_seconds" in prediction:
            self.engine_seconds = (self.engine_seconds or 0.0) + float(prediction["engine_seconds"])
        if "decode_steps" not in prediction:
            logging.debug("batch %d: %d rows, %.3f s after the previous batch's results", number, rows, seconds)
            return
        steps = int(prediction["decode_steps"])
        self.decode_steps = (self.decode_steps or 0) + steps
        if "decode_row_steps" in prediction:
            self.row_steps = (self.row_steps or 0) + int(prediction["decode_row_steps"])
            self.full_row_steps = (self.full_row_steps or 0) + steps * int(prediction["decode_loop_rows"])
        logging.debug(
            "batch %d: %d rows, %d decode steps, %.3f s after the previous batch's results",
            number,
            rows,
            steps,
            seconds,
        )

    def warn_truncated(self, inputs_length: int, targets_length: int) -> None:
        """Says how many inputs and targets were cut to their lengths, if any were."""
        rows = self.lines - self.empty
        for count, what, length, note in (
            (self.truncated_inputs, "inputs", inputs_length, ""),
            (self.truncated_targets, "targets", targets_length, " (their scores cover the kept part)"),
        ):
            if count:
                logging.warning(
                    "%d of %d %s were longer than %d tokens and were truncated%s", count, rows, what, length, note
                )
