"""Shims that make the pinned stack (TF 2.15 + mesh-tensorflow 0.1.21) import cleanly.

Every module of t2tcli that touches TensorFlow imports this module first, so the
patches below are in place before TensorFlow or mesh-tensorflow is loaded. Nothing
else in the code base patches third-party modules.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings


def _verbosity_requested(argv: list[str]) -> bool:
    """True when the command line asks for absl verbosity >= 1 (-v 1, --verbosity=1...).

    TensorFlow prints its C++ start-up noise while it is imported, before absl has
    parsed flags, so the decision has to be taken from the raw argv.
    """
    for i, arg in enumerate(argv):
        value = None
        if arg.startswith(("--verbosity=", "-v=")):
            value = arg.split("=", 1)[1]
        elif arg in ("--verbosity", "-v") and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None:
            try:
                return int(value) >= 1
            except ValueError:
                return value.lower() in ("debug", "info")
    return False


VERBOSE = _verbosity_requested(sys.argv)
# Whether this is an x86-64 machine: where /proc/cpuinfo's flags name AVX2, AVX-512 and
# AMX, and where TensorFlow has oneDNN kernels to switch on.
X86 = platform.machine().lower() in ("x86_64", "amd64")

# TensorFlow 2.15 turns its oneDNN kernels on by itself only on x86 CPUs with AVX512-VNNI,
# AVX512-BF16 or AMX; elsewhere its einsums run on Eigen, whose float32 training steps on
# AVX2-only CPUs are markedly slower than oneDNN's (docs/performance-design.md), so
# every binary asks for it; TF_ENABLE_ONEDNN_OPTS=0 in the environment still wins.
if X86:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# Each session sizes an intra-op thread pool of its own from its config, rather than all
# sharing the first one's: the fast decode engine's session runs a batch on each core
# (t2tcli.decode.engines), while other sessions keep a thread per core for each op.
os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")
if not VERBOSE:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*is deprecated.*")

import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import ops as _tf_ops  # noqa: E402
from tensorflow.python.framework import tensor_conversion_registry as _tcr  # noqa: E402

# mesh-tensorflow 0.1.21 still calls ops.register_tensor_conversion_function, which
# TF 2.15 moved to tensor_conversion_registry.
if not hasattr(_tf_ops, "register_tensor_conversion_function"):
    _tf_ops.register_tensor_conversion_function = _tcr.register_tensor_conversion_function

if not VERBOSE:
    tf.get_logger().setLevel("ERROR")
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)

import mesh_tensorflow  # noqa: E402,F401  (imported here so the shim above is proven)

__all__ = ["tf", "VERBOSE", "X86"]
