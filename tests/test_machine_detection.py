"""What the real machine detection resolves to on the machine the tests run on.

Every other dtype test describes a machine; this one reads /proc/cpuinfo itself and
checks that `hardware.detect` sees the same CPU and that `auto` picks what that
CPU calls for, so detection switched off (or seeing the wrong flags) fails somewhere.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from t2tcli.model import activation_dtype, hardware, kernel_layout

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _cpuinfo_flags() -> frozenset[str]:
    """The first processor's flags as /proc/cpuinfo lists them."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        pytest.skip("no /proc/cpuinfo on this system")
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    pytest.skip("/proc/cpuinfo lists no flags here")


def _expected_kind(flags: frozenset[str]) -> str:
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX512-BF16"
    if "avx512f" in flags:
        return "AVX-512"
    return "AVX2" if "avx2" in flags else "no AVX2"


@pytest.fixture
def onednn_default(monkeypatch):
    """oneDNN as a default install runs it: on, at the CPU's own ISA."""
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


@pytest.mark.skipif(not X86, reason="CPU flags are read on x86 only")
def test_detection_sees_the_flags_proc_cpuinfo_lists(onednn_default):
    flags = _cpuinfo_flags()
    machine = hardware.detect()
    assert machine.cpu_flags == flags
    assert machine.cpu_kind() == _expected_kind(flags)
    assert machine.onednn_enabled and machine.onednn_max_isa == ""


@pytest.mark.skipif(not X86, reason="CPU flags are read on x86 only")
def test_auto_resolves_to_what_this_cpu_runs_natively(onednn_default):
    flags = _cpuinfo_flags()
    machine = hardware.detect()
    if machine.device != "cpu":
        pytest.skip(f"the model runs on a {machine.device} here")
    native = bool(flags & {"amx_bf16", "avx512_bf16"})
    assert activation_dtype.resolve("auto") == ("bfloat16" if native else "float32")
    assert kernel_layout.emulated_einsum(machine) == (not native)
    assert hardware.onednn_avx512(machine) == ("avx512f" in flags)


@pytest.mark.skipif(not X86, reason="CPU flags are read on x86 only")
def test_onednn_switched_off_or_held_back_is_seen(monkeypatch):
    flags = _cpuinfo_flags()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    machine = hardware.detect()
    assert machine.cpu_flags == flags
    assert not machine.onednn_enabled and machine.onednn_max_isa == "AVX2"
    if machine.device == "cpu":
        assert activation_dtype.resolve("auto") == "float32"


def test_onednn_s_older_variable_name_holds_it_back_too(onednn_default, monkeypatch):
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "avx2 ")
    assert hardware.onednn_max_isa() == "AVX2"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core_vnni")  # oneDNN reads its own name first
    assert hardware.onednn_max_isa() == "AVX512_CORE_VNNI"
