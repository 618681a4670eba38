"""A stop signal ends a process whose main thread is stuck in native code, where Python's own
handlers never run: a call that blocks for good (a locked mutex, through ctypes) stands in for
TensorFlow's GCS client retrying. No TensorFlow here, so each case takes about a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import REPO

# A mutex the main thread already holds, and "stuck" printed by another thread only once the main
# thread waits on it in the kernel: a signal sent while the main thread still runs bytecode is
# handled at once, which is not the case under test.
MUTEX = """
import ctypes, threading, time

libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)  # glibc's PTHREAD_MUTEX_INITIALIZER is all zeros
libc.pthread_mutex_lock(mutex)

def say_when_blocked(main=threading.get_native_id()):
    wanted = hex(ctypes.addressof(mutex))  # a futex wait names the mutex as its first argument
    try:
        while True:
            with open(f"/proc/self/task/{main}/syscall") as f:
                if f.read().split()[1:2] == [wanted]:
                    break
            time.sleep(0.01)
    except OSError:  # no /proc syscall file here: a margin instead
        time.sleep(1)
    print("stuck", flush=True)

threading.Thread(target=say_when_blocked, daemon=True).start()
"""

STUCK = (
    MUTEX
    + """
import sys
from t2tcli import interrupts

interrupts.install()
if sys.argv[1] == "remote":
    with interrupts.remote_call("gs://bucket/data"):
        libc.pthread_mutex_lock(mutex)
else:
    libc.pthread_mutex_lock(mutex)
"""
)


def _start(mode: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK, mode],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "stuck\n"
    return proc


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stderr


def test_sigterm_during_a_remote_call_that_never_returns_is_one_line_and_143():
    proc = _start("remote")
    proc.send_signal(signal.SIGTERM)
    status, stderr = _finish(proc)
    assert status == 128 + signal.SIGTERM, stderr
    assert stderr.strip().splitlines() == [
        "-c: stopped by SIGTERM while waiting on gs://bucket/data, which had not answered"
    ]


def test_outside_a_remote_call_the_first_signal_waits_and_a_second_one_stops():
    """The first signal is left to its handler (a training run saves a checkpoint first);
    a second one, with the first still not taken up, ends the process."""
    proc = _start("native")
    proc.send_signal(signal.SIGTERM)
    time.sleep(3)
    assert proc.poll() is None, "the first signal alone does not end the process"
    proc.send_signal(signal.SIGTERM)
    status, stderr = _finish(proc)
    assert status == 128 + signal.SIGTERM, stderr
    assert stderr.strip().splitlines() == ["-c: stopped by SIGTERM, a second time, inside a call that had not returned"]


def test_sigint_is_a_stop_signal_too():
    proc = _start("remote")
    proc.send_signal(signal.SIGINT)
    status, stderr = _finish(proc)
    assert status == 128 + signal.SIGINT, stderr
    assert "stopped by SIGINT while waiting on gs://bucket/data" in stderr


RETURNS = (
    MUTEX
    + """
import sys, time
from t2tcli import interrupts

class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

interrupts.install()
until = time.time() + float(sys.argv[1])
try:
    with interrupts.remote_call("gs://bucket/data"):  # native, deaf to signals, but it returns
        libc.pthread_mutex_timedlock(mutex, ctypes.byref(Timespec(int(until), int(until % 1 * 1e9))))
    print("not stopped", flush=True)
except interrupts.Interrupted:
    time.sleep(3)  # cleaning up, past the deadline
    print("cleaned up", flush=True)
    sys.exit(143)
"""
)


def test_two_quick_signals_taken_up_by_one_handler_call_let_the_cleanup_finish():
    """Python runs a handler once for signals that arrive together: both count as handled,
    and a remote call that returns lets the handler run and clean up."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RETURNS, "1.5"],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "stuck\n"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # two deliveries, two bytes in the wakeup pipe, while Python can run no handler
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=20)
    assert (proc.returncode, stdout, stderr) == (128 + signal.SIGTERM, "cleaned up\n", "")


FORKS = """
import multiprocessing, time
from t2tcli import interrupts

interrupts.install()
with multiprocessing.get_context("fork").Pool(3) as pool:
    assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]
    time.sleep(0.5)  # every worker waiting for a task, in Python, when the pool ends them
time.sleep(3)  # past the deadline of any stop signal counted as this process's
print("alive", flush=True)
"""


def test_stop_signals_of_forked_workers_are_not_the_parents():
    """A pool's workers get SIGTERM as it closes and end quietly, as without the handlers they
    inherited; the parent, never signalled, goes on."""
    done = subprocess.run(
        [sys.executable, "-c", FORKS],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "alive\n", "")


ANOTHER_CALL = (
    MUTEX
    + """
import signal
from t2tcli import interrupts

class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

def hold(path, seconds):  # native and deaf to signals, but it returns
    until = time.time() + seconds
    with interrupts.remote_call(path):
        libc.pthread_mutex_timedlock(mutex, ctypes.byref(Timespec(int(until), int(until % 1 * 1e9))))

interrupts.install()
signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a handler that lets the run go on
hold("gs://bucket/a", 1)
hold("gs://bucket/b", 3)
print("done", flush=True)
"""
)


def test_only_the_remote_call_the_signal_interrupted_is_waited_on():
    """The call in progress when the signal came returned in time: a later one, however long,
    is not a reason to end the process."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ANOTHER_CALL],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "stuck\n"
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=20)
    assert (proc.returncode, stdout, stderr) == (0, "done\n", "")
