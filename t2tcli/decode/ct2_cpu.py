"""CTranslate2 on this CPU: the instruction set its own kernels run, and whether its int8
products saturate; both follow from the CPU's flags and vendor and from CTranslate2's own
environment variables, which it reads once, when its first model loads.

Imports: core (compat) and model (hardware).
"""

from __future__ import annotations

import os

from t2tcli.model import hardware

# CTranslate2 reads the instruction set of its own kernels from here when its first model loads.
ISA_VARIABLE = "CT2_FORCE_CPU_ISA"


def fastest_isa(machine: hardware.Machine) -> str | None:
    """The instruction set CTranslate2's own kernels (softmax, norms, quantizing rows) should
    run on here, where its own choice is slower; None keeps its choice.

    CTranslate2 never picks AVX-512 by itself (it is not faster on every CPU), so it runs
    AVX2 kernels on AVX-512 CPUs. On bfloat16-native CPUs (AMX, AVX512-BF16) its AVX-512
    kernels decoded faster, in turns with the AVX2 ones; plain AVX-512 keeps its choice
    until measured there.
    """
    return "AVX512" if machine.cpu_kind() in ("AMX", "AVX512-BF16") else None


def fastest_isa_here() -> str | None:
    """`fastest_isa` for this process's CPU."""
    return fastest_isa(hardware.Machine("cpu", hardware.cpu_flags()))


def use_fastest_isa() -> None:
    """Set `ISA_VARIABLE` to this CPU's `fastest_isa` unless the user set it; call before a model loads."""
    isa = fastest_isa_here()
    if isa and ISA_VARIABLE not in os.environ:
        os.environ[ISA_VARIABLE] = isa


# Where CTranslate2 reads whether to multiply with Intel MKL rather than oneDNN.
MKL_VARIABLE = "CT2_USE_MKL"
# CPU flags with which oneDNN's int8 products sum in 32 bits (VNNI dot products).
_VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def int8_sums_saturate(flags: frozenset[str], vendor: str, use_mkl: str | None) -> bool:
    """Whether CTranslate2's int8 products on this x86 CPU add pairs of products in 16 bits,
    where they saturate: a large activation against a large weight is clipped, and int8's
    outputs stray from float32's further than on CPUs where the sums are 32 bits.

    CTranslate2 multiplies int8 with Intel MKL on Intel CPUs and with oneDNN on the others
    (`MKL_VARIABLE` overrides: "1", "true" or "TRUE" for MKL, any other value for oneDNN);
    oneDNN's u8 x s8 product adds pairs in int16 unless the CPU has VNNI. A CPU whose flags
    and vendor are unknown (no /proc/cpuinfo) is not claimed to saturate.
    """
    if not flags or not vendor:
        return False
    on_onednn = vendor != "GenuineIntel" if not use_mkl else use_mkl not in ("1", "true", "TRUE")
    return on_onednn and not any(flag in flags for flag in _VNNI_FLAGS)


def int8_sums_saturate_here() -> bool:
    """`int8_sums_saturate` for this CPU and environment (never off x86, where neither library runs)."""
    from t2tcli.compat import X86

    return X86 and int8_sums_saturate(hardware.cpu_flags(), hardware.cpu_vendor(), os.environ.get(MKL_VARIABLE))


def int8_saturation_warning(quantization: str) -> str | None:
    """The warning for an int8 `quantization` where `int8_sums_saturate_here`, else None."""
    if not quantization.startswith("int8") or not int8_sums_saturate_here():
        return None
    return (
        f"quantization={quantization}: CTranslate2 multiplies int8 with oneDNN here, which on a CPU "
        "without VNNI adds pairs of products in 16 bits that saturate, so outputs stray further from "
        f"float32 than on CPUs with VNNI; quantization=float32 avoids it, and so does {MKL_VARIABLE}=1 "
        "(Intel MKL), more slowly"
    )
