"""The two lines a process's first XLA compile writes to stderr, spent out of sight.

The fused loss (`t2tcli.model.token_loss`) and norms (`t2tcli.model.rms_norm`) are XLA
functions. A process's first XLA compile logs two INFO lines to stderr through absl,
which TF_CPP_MIN_LOG_LEVEL does not silence in TensorFlow 2.15; both are logged once per
process, so a binary spends them on a trivial function before it builds a graph.
"""

from __future__ import annotations

import functools
import os

from t2tcli.compat import tf


@functools.cache
def spend_first_compile_logs() -> None:
    """Compiles a trivial function with stderr pointed at /dev/null for that moment.

    Call it before an Estimator builds its graph, while nothing else writes. Not from
    inside model_fn: a session run there, in the middle of building the Estimator's
    graph, made runs with the same --random_seed start from different weights.
    """
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1])
        plus_one = tf.function(lambda v: v + 1.0, jit_compile=True)(x)
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            with tf.compat.v1.Session() as session:
                session.run(plus_one, {x: [0.0]})
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
