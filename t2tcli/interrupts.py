"""SIGTERM and SIGINT as a clean stop: an exception that unwinds, or a training run that saves first.

Clusters, Kubernetes, Slurm and preemptible VMs send SIGTERM before they kill. Every
binary turns it into `Interrupted`, which unwinds through the `finally` blocks that
remove temporary files and work directories, and ends with one line and the exit
status a shell gives a signal (128 + its number). While training steps run, the first
SIGTERM or SIGINT only asks the step loop to stop: the run saves a checkpoint at the
step it reached, then exits the same way; a second signal stops it at once.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):  # noqa: N818 - named for what happened, as KeyboardInterrupt is
    """A stop signal arrived; BaseException so that no `except Exception` swallows it."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = signum
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def install() -> None:
    """SIGTERM raises `Interrupted` (SIGINT raises KeyboardInterrupt, which the binaries treat alike)."""
    signal.signal(signal.SIGTERM, _raise)


class GracefulStop:
    """Within `during()`, a stop signal is recorded for the step loop instead of raised.

    `hook()` is a SessionRunHook that asks the loop to stop after the step in progress;
    the Estimator's checkpoint saver then saves that step as the session closes.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    @contextlib.contextmanager
    def during(self) -> Iterator[GracefulStop]:
        previous = {s: signal.getsignal(s) for s in _STOP_SIGNALS}

        def record(signum: int, frame: Any) -> None:
            self.signum = signum
            for s in _STOP_SIGNALS:  # a second signal acts at once
                signal.signal(s, _raise if s == signal.SIGTERM else signal.default_int_handler)

        for s in _STOP_SIGNALS:
            signal.signal(s, record)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def hook(self) -> Any:
        from t2tcli.compat import tf

        stop = self

        class StopOnSignal(tf.compat.v1.train.SessionRunHook):
            def after_run(self, run_context: Any, run_values: Any) -> None:
                if stop.signum is not None:
                    run_context.request_stop()

        return StopOnSignal()
