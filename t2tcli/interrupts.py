"""SIGTERM and SIGINT as a clean stop: an exception that unwinds, or a training run that saves first.

Clusters, Kubernetes, Slurm and preemptible VMs send SIGTERM before they kill. Every
binary turns it into `Interrupted`, which unwinds through the `finally` blocks that
remove temporary files and work directories, and ends with one line and the exit
status a shell gives a signal (128 + its number). While training steps run, the first
SIGTERM or SIGINT only asks the step loop to stop: the run saves a checkpoint at the
step it reached, then exits the same way; a second signal stops it at once.

Python runs a signal handler only between bytecodes of the main thread, and a call into
TensorFlow's file systems can stay in native code for minutes (its GCS client retries with
backoff, and its makedirs asks for a missing bucket forever). A watcher thread therefore learns of
every stop signal through the interpreter's wakeup file descriptor; when the main thread is
inside such a remote call (`remote_call`), or a second signal finds the first still not
handled, and the handler has not run after `FORCE_AFTER_SECONDS`, it writes the one line
itself and ends the process with the same exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long a stop signal may wait for its handler before the watcher ends the process.
FORCE_AFTER_SECONDS = 2.0


class Interrupted(BaseException):  # noqa: N818 - named for what happened, as KeyboardInterrupt is
    """A stop signal arrived; BaseException so that no `except Exception` swallows it."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = signum
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class _Signals:
    """What the watcher compares: stop signals delivered, and those whose handler ran."""

    received = 0
    handled = 0
    remote_calls: list[str] = []  # the main thread's remote calls in progress, innermost last
    watching = False


def _raise(signum: int, frame: Any) -> None:
    _Signals.handled += 1
    raise Interrupted(signum)


def _keyboard_interrupt(signum: int, frame: Any) -> None:
    _Signals.handled += 1
    raise KeyboardInterrupt


def install() -> None:
    """SIGTERM raises `Interrupted`, SIGINT KeyboardInterrupt (the binaries treat them alike);
    a stop signal that the main thread cannot take up in time ends the process (see above)."""
    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGINT, _keyboard_interrupt)
    _start_watcher()


@contextlib.contextmanager
def remote_call(path: str) -> Iterator[None]:
    """Marks the main thread as waiting on a remote file system for `path` during the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Signals.remote_calls.append(path)
    try:
        yield
    finally:
        _Signals.remote_calls.pop()


def _start_watcher() -> None:
    if _Signals.watching:
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: signals are not this process's to manage here
        os.close(read_end)
        os.close(write_end)
        return
    _Signals.watching = True
    threading.Thread(target=_watch, args=(read_end,), name="stop-signal-watcher", daemon=True).start()


def _watch(read_end: int) -> None:
    while True:
        try:
            delivered = os.read(read_end, 64)
        except OSError:
            return
        for signum in delivered:
            if signum not in _STOP_SIGNALS:
                continue
            _Signals.received += 1
            deadline = time.monotonic() + FORCE_AFTER_SECONDS
            while _Signals.handled < _Signals.received and time.monotonic() < deadline:
                time.sleep(0.05)
            calls = list(_Signals.remote_calls)
            if _Signals.handled < _Signals.received and (calls or _Signals.received > 1):
                _force_stop(signum, calls[-1] if calls else None)


def _force_stop(signum: int, path: str | None) -> None:
    """One line on stderr and the exit status of the signal, from the watcher thread."""
    name = signal.Signals(signum).name
    prog = os.path.basename(sys.argv[0]) or "t2t"
    if path:
        line = f"{prog}: stopped by {name} while waiting on {path}, which had not answered\n"
    else:
        line = f"{prog}: stopped by {name}, a second time, inside a call that had not returned\n"
    with contextlib.suppress(OSError):
        os.write(2, line.encode())
    os._exit(128 + signum)


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
            _Signals.handled += 1
            self.signum = signum
            for s in _STOP_SIGNALS:  # a second signal acts at once
                signal.signal(s, _raise if s == signal.SIGTERM else _keyboard_interrupt)

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
