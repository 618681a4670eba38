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
inside such a remote call (`remote_call`) and that same call is still in progress after
`FORCE_AFTER_SECONDS` with the signal's handler not run since, or a repeated stop signal has
waited that long for its handler, it writes the one line itself and ends the process with the
same exit status. A remote call that returns in time lets the handler run and clean up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import os
import select
import signal
import struct
import sys
import termios
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
    """What the watcher compares: where each stop signal's byte sits in the wakeup pipe, and how
    far into the pipe each signal's handler has reached (a handler call takes up every byte of
    its signal written before it: Python merges a quick repeat into one call)."""

    read_total = 0  # bytes the watcher has taken from the pipe
    handled_upto: dict[int, int] = {}  # signal number -> bytes of it before this position are handled
    received = 0
    remote_calls: list[tuple[int, str]] = []  # the main thread's remote calls in progress, innermost last
    call_ids = itertools.count()
    watching = False
    pipe: tuple[int, int] | None = None
    lock = threading.RLock()  # re-entrant: a handler may run inside another one


def _note_handled(signum: int) -> None:
    with _Signals.lock:
        reached = _Signals.read_total + _backlog()
        _Signals.handled_upto[signum] = max(_Signals.handled_upto.get(signum, 0), reached)


def _backlog() -> int:
    """Bytes written into the wakeup pipe that the watcher has not read yet."""
    if _Signals.pipe is None:
        return 0
    with contextlib.suppress(OSError):
        return struct.unpack("i", fcntl.ioctl(_Signals.pipe[0], termios.FIONREAD, b"\0\0\0\0"))[0]
    return 0


def _raise(signum: int, frame: Any) -> None:
    _note_handled(signum)
    raise Interrupted(signum)


def _keyboard_interrupt(signum: int, frame: Any) -> None:
    _note_handled(signum)
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
    _Signals.remote_calls.append((next(_Signals.call_ids), path))
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
    _Signals.pipe = (read_end, write_end)
    threading.Thread(target=_watch, args=(read_end,), name="stop-signal-watcher", daemon=True).start()


def _forget_in_child() -> None:
    """A forked child is a worker whose parent owns the clean stop: a Pool ends its workers with
    SIGTERM, which must end them quietly, as it would without this module, and they have no
    watcher thread, so they must not write into the parent's pipe either (their stop signals
    would count as the parent's)."""
    with contextlib.suppress(ValueError):  # forked from a thread other than the main one
        for signum, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
            if getattr(signal.getsignal(signum), "__module__", None) == __name__:
                signal.signal(signum, default)
    if _Signals.pipe is None:
        return
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    for end in _Signals.pipe:
        with contextlib.suppress(OSError):
            os.close(end)
    _Signals.pipe = None
    _Signals.watching = False
    _Signals.received = 0
    _Signals.read_total = 0
    _Signals.handled_upto = {}
    _Signals.lock = threading.RLock()
    _Signals.remote_calls = []


os.register_at_fork(after_in_child=_forget_in_child)


@dataclasses.dataclass(frozen=True)
class _Arrival:
    """One stop signal as the watcher read it, with what was true at that moment."""

    signum: int
    position: int  # its place in the pipe
    call: tuple[int, str] | None  # the innermost remote call then in progress
    repeat: bool  # not the first stop signal of the process
    deadline: float

    def taken_up(self) -> bool:
        """Whether its handler has run since it arrived (a repeat merged into that run counts too)."""
        return _Signals.handled_upto.get(self.signum, 0) > self.position

    def overdue(self) -> None:
        """At the deadline, not taken up: ends the process if the remote call it interrupted is
        still the one in progress, or if it is a repeat; else the handler is left to run."""
        if self.call is not None and self.call in _Signals.remote_calls:
            _force_stop(self.signum, self.call[1])
        elif self.repeat:
            _force_stop(self.signum, None)


def _watch(read_end: int) -> None:
    pending: list[_Arrival] = []
    while True:
        timeout = max(0.0, min(a.deadline for a in pending) - time.monotonic()) if pending else None
        try:
            ready, _, _ = select.select([read_end], [], [], timeout)
            with _Signals.lock:
                delivered = os.read(read_end, 64) if ready else b""
                start = _Signals.read_total
                _Signals.read_total += len(delivered)
        except (OSError, ValueError):
            return
        if ready and not delivered:
            return
        now = time.monotonic()
        for offset, signum in enumerate(delivered):
            if signum not in _STOP_SIGNALS:
                continue
            _Signals.received += 1
            calls = list(_Signals.remote_calls)
            pending.append(
                _Arrival(
                    signum=signum,
                    position=start + offset,
                    call=calls[-1] if calls else None,
                    repeat=_Signals.received > 1,
                    deadline=now + FORCE_AFTER_SECONDS,
                )
            )
        still: list[_Arrival] = []
        for arrival in pending:
            if arrival.taken_up():
                continue
            if time.monotonic() < arrival.deadline:
                still.append(arrival)
                continue
            arrival.overdue()
        pending = still


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
            _note_handled(signum)
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
