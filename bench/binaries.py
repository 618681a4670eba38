"""What the benchmarks that drive t2tcli's binaries share: running one, their work folder, and naming the CPU and VM.

They run the binaries as a user would, each in its own process, so a figure includes
everything a shell script pays for; the commands are printed as they run.
"""

from __future__ import annotations

import os
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


def machine(cpuinfo: str = "/proc/cpuinfo") -> str:
    """How BENCHMARKS.md names the VM a kind's figures come from: VMs often report a bare
    model name, so the flags that set the kind (and those it lacks) are named beside it."""
    sys.path.insert(0, str(REPO))
    from t2tcli.model import hardware

    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's fields only
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = hardware.cpu_flags(cpuinfo)
    has = [f for f in ("amx_bf16", "avx512_bf16") if f in flags] or [f for f in ("avx512f", "avx2") if f in flags][:1]
    lacks = [name for name, present in (("AVX-512", "avx512f" in flags), ("AMX", "amx_bf16" in flags)) if not present]
    if "avx512f" in flags and "avx512_bf16" not in flags:
        lacks.insert(0, "avx512_bf16")
    named = " and ".join(has) + "".join(f", no {name}" for name in lacks)
    family = f" (CPU family {fields['cpu family']})" if "cpu family" in fields else ""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    model = fields.get("model name", "a CPU")
    return f"{model}{' with ' + named if named else ''}{family}, {os.cpu_count()} cores, {memory} GiB"


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
