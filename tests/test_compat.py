"""What importing t2tcli does to TensorFlow before TensorFlow loads.

Each case runs in a fresh interpreter: the switch only takes effect before the first
`import tensorflow`, which this test process did long ago.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from t2tcli.compat import X86

REPO = Path(__file__).resolve().parent.parent
PROBE = (
    "import t2tcli.compat\n"
    "from tensorflow.python.util import _pywrap_util_port as port\n"
    "print('onednn', port.IsMklEnabled())\n"
)


@pytest.mark.skipif(not X86, reason="oneDNN's switch is x86's")
@pytest.mark.parametrize("setting, enabled", [(None, True), ("0", False)])
def test_onednn_is_on_unless_the_environment_turns_it_off(setting, enabled):
    """TensorFlow leaves oneDNN off on AVX2-only CPUs, where training ran 1.4-1.5x slower without it."""
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    assert f"onednn {enabled}" in out.stdout.splitlines()


THREADS_PROBE = """
import os
import numpy as np
from t2tcli.compat import tf


def cpu_ticks():
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


tf.constant(1.0) + 1.0  # the process's first device, as an eager op creates it
tf1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    x = tf1.placeholder(tf.float32, [1024, 1024])
    y = x
    for _ in range(8):
        y = tf.matmul(y, x) * 1e-3
config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
with tf1.Session(graph=graph, config=config) as session:
    feed = {x: np.ones([1024, 1024], np.float32)}
    session.run(y, feed)
    before = cpu_ticks()
    for _ in range(5):
        session.run(y, feed)
    spent = [n - before.get(t, 0) for t, n in cpu_ticks().items()]
print("threads computing", sum(n > 0.2 * sum(spent) for n in spent))
"""


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and 2 cores"
)
def test_a_session_computes_on_the_threads_its_own_config_gives_it():
    """The fast decode engine's session runs each batch on one thread (t2tcli.decode.engines);
    TensorFlow would give it the pool of the process's first device instead, unless told."""
    out = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    assert "threads computing 1" in out.stdout.splitlines()
