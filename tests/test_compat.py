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
