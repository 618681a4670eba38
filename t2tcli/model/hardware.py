"""The machine a model runs on, as the choices about it need it: the device (TPU, GPU or
CPU), the CPU's feature flags, and what oneDNN is allowed to use.

Both the activation dtype (t2tcli.model.activation_dtype) and the CPU kernels' layout
(t2tcli.model.kernel_layout) depend on these facts; detecting them in one place keeps
the two decisions about one machine. Tests describe a `Machine` rather than detect one.

Native bfloat16 means: a TPU; a GPU of compute capability 8.0 or more; an x86 CPU with
AMX or AVX512-BF16 that oneDNN may use (`ONEDNN_MAX_CPU_ISA` below AVX512_CORE_BF16, or
`TF_ENABLE_ONEDNN_OPTS=0`, take that away). Plain AVX-512 only emulates bfloat16 and is
treated like AVX2.
"""

from __future__ import annotations

import dataclasses
import os

# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) from which bfloat16 dot products are native.
_NATIVE_BF16_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX10_", "ALL")
NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) from which it runs AVX2 kernels or better.
_AVX2_ISAS = ("AVX2", "AVX512", "AVX10_", "ALL")
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) from which its GEMMs use AVX-512 registers.
_AVX512_ISAS = ("AVX512", "AVX10_", "ALL")
# oneDNN's ISA names from which its bfloat16 GEMMs use AMX tiles.
_AMX_ISAS = ("AVX512_CORE_AMX", "AVX10_1_512_AMX", "ALL")
# Each CPU flag whose VNNI dot products sum oneDNN's int8 products in 32 bits, and the ISA
# names from which oneDNN uses it; a limit of uncertain reach counts as none.
_VNNI_ISAS = {
    "avx512_vnni": ("AVX512_CORE_VNNI", *_NATIVE_BF16_ISAS),
    "avx_vnni": ("AVX2_VNNI", "ALL"),
    "amx_int8": _AMX_ISAS,
}


@dataclasses.dataclass(frozen=True)
class Machine:
    """The device the model runs on and, on CPU, what oneDNN may use."""

    device: str  # "tpu", "gpu" or "cpu"
    cpu_flags: frozenset[str] = frozenset()
    gpu_capability: tuple[int, int] | None = None
    onednn_max_isa: str = ""
    onednn_enabled: bool = True

    def cpu_kind(self) -> str:
        """'AMX', 'AVX512-BF16', 'AVX-512' or 'AVX2' (or 'no AVX2'): the class a benchmark figure holds for."""
        for flag, kind in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512")):
            if flag in self.cpu_flags:
                return kind
        return "AVX2" if "avx2" in self.cpu_flags else "no AVX2"

    def onednn_cpu(self) -> bool:
        """Whether oneDNN runs the products here: a CPU, with TF_ENABLE_ONEDNN_OPTS not 0."""
        return self.device == "cpu" and self.onednn_enabled


def _first_processor(cpuinfo: str, keys: tuple[str, ...]) -> str:
    """The value of the first of `keys` in /proc/cpuinfo (empty where it does not exist)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in keys:
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's feature flags (empty where /proc/cpuinfo does not exist)."""
    return frozenset(_first_processor(cpuinfo, ("flags", "Features")).split())


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The x86 vendor id ('GenuineIntel', 'AuthenticAMD'; empty where unknown), by which
    some libraries choose their kernels."""
    return _first_processor(cpuinfo, ("vendor_id",))


def _gpu_capability() -> tuple[int, int] | None:
    """The lowest compute capability among visible GPUs, None when there is none."""
    from t2tcli.compat import tf

    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        capabilities.append(tuple(details.get("compute_capability") or (0, 0)))
    return min(capabilities) if capabilities else None


def onednn_max_isa() -> str:
    """ONEDNN_MAX_CPU_ISA as oneDNN reads it (any case, its older name DNNL_MAX_CPU_ISA where
    it is unset), or "" where neither is set; TensorFlow's oneDNN and CTranslate2's own both
    honour it."""
    value = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    return value.strip().upper()


def _isa_limit_allows(isa: str, isas: tuple[str, ...]) -> bool:
    """Whether an ONEDNN_MAX_CPU_ISA of `isa` lets oneDNN reach the levels named by `isas`
    (prefixes): unset and DEFAULT set no limit."""
    return not isa or isa == "DEFAULT" or isa.startswith(isas)


def onednn_vnni(flags: frozenset[str], isa: str) -> bool:
    """Whether oneDNN's int8 products sum in 32 bits (VNNI) on a CPU with `flags` under an
    ONEDNN_MAX_CPU_ISA of `isa`; without VNNI they add pairs of products in 16 bits."""
    return any(flag in flags and _isa_limit_allows(isa, isas) for flag, isas in _VNNI_ISAS.items())


def detect(use_tpu: bool = False) -> Machine:
    """This process's machine: TPU when training on one, else the first GPU, else the CPU."""
    from t2tcli.compat import X86

    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")
    common = dict(
        cpu_flags=cpu_flags() if X86 else frozenset(),
        onednn_max_isa=onednn_max_isa(),
        onednn_enabled=onednn,
    )
    if use_tpu:
        return Machine("tpu", **common)
    capability = _gpu_capability()
    if capability is not None:
        return Machine("gpu", gpu_capability=capability, **common)
    return Machine("cpu", **common)


def native_bfloat16(machine: Machine) -> tuple[bool, str]:
    """(whether bfloat16 matmuls run natively, the reason in a few words)."""
    if machine.device == "tpu":
        return True, "TPU"
    if machine.device == "gpu":
        major, minor = machine.gpu_capability or (0, 0)
        return major >= 8, f"GPU of compute capability {major}.{minor}"
    kind = machine.cpu_kind()
    if not any(flag in machine.cpu_flags for flag in NATIVE_BF16_CPU_FLAGS):
        return False, f"{kind} CPU without AMX or AVX512-BF16"
    if not machine.onednn_enabled:
        return False, f"{kind} CPU, but TF_ENABLE_ONEDNN_OPTS=0 turns oneDNN off"
    isa = machine.onednn_max_isa
    if not _isa_limit_allows(isa, _NATIVE_BF16_ISAS):
        return False, f"{kind} CPU, but ONEDNN_MAX_CPU_ISA={isa} keeps oneDNN below AVX512_CORE_BF16"
    return True, f"{kind} CPU"


def onednn_avx512(machine: Machine) -> bool:
    """Whether oneDNN runs its AVX-512 kernels here: a CPU with AVX-512, oneDNN on, and no
    ONEDNN_MAX_CPU_ISA holding it below AVX-512."""
    return _onednn_reaches(machine, "avx512f", _AVX512_ISAS)


def onednn_avx2_class(machine: Machine) -> bool:
    """Whether oneDNN runs AVX2-class kernels here: a CPU with AVX2, oneDNN on, and
    ONEDNN_MAX_CPU_ISA (if set) letting it reach AVX2 but not AVX-512, so a newer CPU held
    back to AVX2 counts and one held below AVX2 does not."""
    return _onednn_reaches(machine, "avx2", _AVX2_ISAS) and not onednn_avx512(machine)


def onednn_amx(machine: Machine) -> bool:
    """Whether oneDNN multiplies bfloat16 on AMX tiles here: a CPU with AMX, oneDNN on, and
    no ONEDNN_MAX_CPU_ISA holding it below AMX."""
    return _onednn_reaches(machine, "amx_bf16", _AMX_ISAS)


def _onednn_reaches(machine: Machine, cpu_flag: str, isas: tuple[str, ...]) -> bool:
    """Whether oneDNN is on, the CPU has `cpu_flag`, and ONEDNN_MAX_CPU_ISA (if set) is one
    of `isas` (prefixes) or DEFAULT."""
    if not machine.onednn_cpu() or cpu_flag not in machine.cpu_flags:
        return False
    return _isa_limit_allows(machine.onednn_max_isa, isas)
