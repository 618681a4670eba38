"""CTranslate2 on this CPU: the instruction set its own kernels run, whether its int8
products saturate, and the int8 weights that keep them from it; all follow from the CPU's
flags and vendor and from CTranslate2's own environment variables, which it reads once,
when its first model loads.

Imports: core (compat) and model (hardware).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

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


def int8_sums_saturate(flags: frozenset[str], vendor: str, use_mkl: str | None, onednn_max_isa: str = "") -> bool:
    """Whether CTranslate2's int8 products on this x86 CPU add pairs of products in 16 bits,
    where they saturate: a large activation against a large weight is clipped, and int8's
    outputs stray from float32's further than on CPUs where the sums are 32 bits.

    CTranslate2 multiplies int8 with Intel MKL on Intel CPUs and with oneDNN on the others
    (`MKL_VARIABLE` overrides: "1", "true" or "TRUE" for MKL, any other value for oneDNN);
    oneDNN's u8 x s8 product adds pairs in int16 unless the CPU has VNNI and
    `onednn_max_isa` (ONEDNN_MAX_CPU_ISA, which CTranslate2's oneDNN honours) lets it use
    it. A CPU whose flags and vendor are unknown (no /proc/cpuinfo) is not claimed to saturate.
    """
    if not flags or not vendor:
        return False
    on_onednn = vendor != "GenuineIntel" if not use_mkl else use_mkl not in ("1", "true", "TRUE")
    return on_onednn and not hardware.onednn_vnni(flags, onednn_max_isa)


def int8_sums_saturate_here() -> bool:
    """`int8_sums_saturate` for this CPU and environment (never off x86, where neither library runs)."""
    from t2tcli.compat import X86

    return X86 and int8_sums_saturate(
        hardware.cpu_flags(), hardware.cpu_vendor(), os.environ.get(MKL_VARIABLE), hardware.onednn_max_isa()
    )


# The largest int8 weight CTranslate2 stores.
INT8_WEIGHT_LIMIT = 127
# The largest 7-bit weight, whose products cannot saturate a 16-bit pair sum: CTranslate2 shifts
# each int8 activation to unsigned (at most 255) for oneDNN, and 2 x 255 x 63 = 32,130 fits.
NARROW_INT8_WEIGHT_LIMIT = 63
# Why a conversion here stores int8 weights within NARROW_INT8_WEIGHT_LIMIT, for its log line.
NARROW_WHY = (
    "CTranslate2 multiplies int8 with oneDNN here, which adds pairs of products in 16 bits "
    "where it may not use VNNI, and 7-bit weights keep those sums from saturating"
)


def int8_weight_limit(quantization: str) -> int | None:
    """The largest int8 weight a conversion for `quantization` stores on this CPU (None when
    it stores no int8): 7 bits where `int8_sums_saturate_here`, where one bit of each weight
    costs outputs far less than the clipped sums do."""
    if not quantization.startswith("int8"):
        return None
    return NARROW_INT8_WEIGHT_LIMIT if int8_sums_saturate_here() else INT8_WEIGHT_LIMIT


def narrow(weight_limit: int | None) -> bool:
    """Whether a conversion with `weight_limit` (`int8_weight_limit`'s) stores int8 weights
    narrower than CTranslate2 would: the one test behind its cache name, its log line and
    the quantization pass."""
    return weight_limit is not None and weight_limit < INT8_WEIGHT_LIMIT


def quantize(spec: Any, quantization: str, weight_limit: int | None) -> None:
    """CTranslate2's own `spec.optimize` (aliases and quantization), then, for a
    `weight_limit` below CTranslate2's, each int8 weight as quantized beforehand from its
    float values with that limit, each row scaled so its largest value reaches it (held as
    int8 meanwhile, a quarter of the float weights)."""
    from ctranslate2.specs import model_spec

    narrowed: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def quantize_narrow(layer: Any, name: str, value: Any) -> None:
        key = name.rsplit("/", 1)[-1]
        if isinstance(value, model_spec.Variable) and not value.is_scalar() and hasattr(layer, f"{key}_scale"):
            narrowed[name] = int8_rows(value.to("float32").numpy(), weight_limit)

    def put_back(layer: Any, name: str, value: Any) -> None:
        if name in narrowed and isinstance(value, model_spec.Variable) and value.dtype == "int8":
            key = name.rsplit("/", 1)[-1]
            ints, scale = narrowed[name]
            setattr(layer, key, model_spec.NumpyVariable(ints))
            setattr(layer, f"{key}_scale", model_spec.NumpyVariable(scale))

    wanted = narrow(weight_limit)
    if wanted:
        model_spec.visit_spec(spec, quantize_narrow)
    spec.optimize(quantization=quantization)
    if wanted:  # aliases are names by now, and keep pointing at the weight they share
        model_spec.visit_spec(spec, put_back)


def int8_rows(weight: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values, float32 scale per row) of `weight`, its rows its first axis, each row
    scaled by limit / its largest magnitude (1 for a row of zeros), as CTranslate2 scales by 127."""
    rows = np.asarray(weight, dtype=np.float32).reshape(weight.shape[0], -1)
    largest = np.abs(rows).max(axis=1)
    largest[largest == 0] = limit
    largest = np.maximum(largest, np.float32(limit) / np.finfo(np.float32).max)  # a finite scale
    scale = (np.float32(limit) / largest).astype(np.float32)
    return np.rint(rows * scale[:, None]).astype(np.int8).reshape(weight.shape), scale
