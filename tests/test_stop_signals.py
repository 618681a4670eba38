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

STUCK = """
import ctypes, sys
from t2tcli import interrupts

interrupts.install()
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)  # glibc's PTHREAD_MUTEX_INITIALIZER is all zeros
libc.pthread_mutex_lock(mutex)
print("stuck", flush=True)
if sys.argv[1] == "remote":
    with interrupts.remote_call("gs://bucket/data"):
        libc.pthread_mutex_lock(mutex)
else:
    libc.pthread_mutex_lock(mutex)
"""


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
    time.sleep(0.2)
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
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    status, stderr = _finish(proc)
    assert status == 128 + signal.SIGINT, stderr
    assert "stopped by SIGINT while waiting on gs://bucket/data" in stderr
