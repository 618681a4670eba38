"""What the benchmarks that drive t2tcli's binaries share: running one, their work folder, and naming the CPU.

They run the binaries as a user would, each in its own process, so a figure includes
everything a shell script pays for; the commands are printed as they run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "bin"


def cpu_kind() -> str:
    """The class of CPU a figure holds for: 'AMX', 'AVX512-BF16', 'AVX-512' or 'AVX2'."""
    sys.path.insert(0, str(REPO))
    from t2tcli.model import hardware

    return hardware.detect().cpu_kind()


def work_dir(given: str | None, name: str) -> Path:
    """The user's --work_dir, or else a new private temp folder (never a fixed /tmp path
    another local user could create first); printed, as its runs are kept there."""
    work = Path(given or tempfile.mkdtemp(prefix=f"t2tcli-bench-{name}-"))
    print(f"data, models and logs: {work}")
    return work


def run(binary: str, *args: str) -> tuple[float, str]:
    """Runs one binary; returns its wall seconds and its stderr (its log). Stops the
    benchmark with the binary's last output when it fails."""
    command = [sys.executable, str(BIN / binary), *args]
    print("$", " ".join([binary, *args]), flush=True)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{binary} failed (exit {done.returncode})")
    return time.monotonic() - started, done.stderr
