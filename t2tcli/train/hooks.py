"""What a person watching training sees: a line every few steps with the loss, rates and
time left, and an optional progress bar.

Imports: core.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from absl import logging

from t2tcli import progress
from t2tcli.compat import tf

tf1 = tf.compat.v1


def _duration(seconds: float) -> str:
    """'1h02m', '3m05s' or '42s': an ETA a person reads at a glance."""
    seconds = max(0, int(round(seconds)))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class TrainLogHook(tf1.train.SessionRunHook):
    """Tells a person waiting on training how far it is and how long is left.

    The first step is logged as soon as it ends (graph set-up and the first step can
    take minutes on a CPU), then one line every `every` steps: loss, learning rate,
    steps/s, tokens/s and the time left to `train_steps`; steps/s and tokens/s also go
    to TensorBoard. With `progress`, a bar on stderr shows the same between log lines.
    """

    def __init__(
        self,
        loss: tf.Tensor,
        lr: tf.Tensor,
        tokens: tf.Tensor,
        step: tf.Tensor,
        every: int,
        model_dir: str | None,
        train_steps: int | None = None,
        progress: bool = False,
        task: str = "",
    ) -> None:
        self._fetches = {"loss": loss, "lr": lr, "tokens": tokens, "step": step}
        self._every = max(1, int(every))
        self._model_dir = model_dir
        self._train_steps = train_steps
        self._progress = progress
        self._prefix = f"{task}: " if task else ""
        self._bar: Any = None
        self._bar_tokens = 0
        self._bar_started = 0.0
        self._tokens = 0
        self._created = time.monotonic()
        self._start: tuple[float, int] | None = None

    def before_run(self, run_context: Any) -> Any:
        return tf1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        r = run_values.results
        step = int(r["step"])
        now = time.monotonic()
        if self._start is None:
            self._start = (now, step)
            self._log(
                "step %d  loss %.4f  lr %.3g  (graph set-up and first step: %.1f s)",
                step,
                r["loss"],
                r["lr"],
                now - self._created,
            )
            self._open_bar(step)
            return
        self._tokens += int(r["tokens"])
        if self._bar is not None:
            self._bar_tokens += int(r["tokens"])
            rate = self._bar_tokens / max(now - self._bar_started, 1e-9)
            self._bar.set_postfix_str(f"loss {r['loss']:.4f}, {rate:.0f} tokens/s", refresh=False)
            self._bar.update(step - self._bar.n)
        if step % self._every:
            return
        elapsed = max(now - self._start[0], 1e-9)
        steps_per_s = (step - self._start[1]) / elapsed
        tokens_per_s = self._tokens / elapsed
        eta = ""
        if self._train_steps and steps_per_s > 0 and step < self._train_steps:
            eta = f"  eta {_duration((self._train_steps - step) / steps_per_s)}"
        self._log(
            "step %d  loss %.4f  lr %.3g  %.2f steps/s  %.0f tokens/s%s",
            step,
            r["loss"],
            r["lr"],
            steps_per_s,
            tokens_per_s,
            eta,
        )
        if self._model_dir is None:  # a worker that is not the chief: the chief summarises
            self._start = (now, step)
            self._tokens = 0
            return
        writer = tf1.summary.FileWriterCache.get(self._model_dir)
        writer.add_summary(
            tf1.Summary(
                value=[
                    tf1.Summary.Value(tag="steps_per_sec", simple_value=steps_per_s),
                    tf1.Summary.Value(tag="tokens_per_sec", simple_value=tokens_per_s),
                ]
            ),
            step,
        )
        self._start = (now, step)
        self._tokens = 0

    def end(self, session: Any) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _open_bar(self, step: int) -> None:
        if not self._progress:
            return
        self._bar = progress.bar(self._train_steps, "step", "training", initial=step)
        self._bar_started = time.monotonic()

    def _log(self, fmt: str, *args: Any) -> None:
        fmt = self._prefix + fmt
        if self._bar is None:
            logging.info(fmt, *args)
            return
        with self._bar.external_write_mode(file=sys.stderr):
            logging.info(fmt, *args)
