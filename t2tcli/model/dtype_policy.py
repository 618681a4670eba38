"""The activation dtype a model runs in on this machine, resolved once at run time.

`activation_dtype=auto` (the default) means bfloat16 where the hardware multiplies it
natively and float32 everywhere else; variables stay float32 either way, so a model
trained on one machine runs at full speed on another. Every binary that builds the
model asks `resolve()`; nothing else looks at the hardware.

Why not bfloat16 everywhere: on a CPU without native bfloat16, TensorFlow's bfloat16
MatMul and BatchMatMul convert to float32 and are as fast as float32, but its bfloat16
Einsum (every mesh-tensorflow matmul is one) runs a scalar contraction, an order of
magnitude slower. `t2tcli.model.mesh` therefore computes bfloat16 einsums in float32 on
such CPUs (`emulated_einsum`), rounding the result back as a native kernel would; what is
left is the element-wise work, which bfloat16 does not speed up without native support,
so float32 remains the faster choice there (docs/performance-design.md).

Native means: a TPU; a GPU of compute capability 8.0 or more; an x86 CPU with AMX or
AVX512-BF16 that oneDNN may use (`ONEDNN_MAX_CPU_ISA` below AVX512_CORE_BF16, or
`TF_ENABLE_ONEDNN_OPTS=0`, take that away). Plain AVX-512 only emulates bfloat16 and
is treated like AVX2.
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging

from t2tcli.errors import UserError

ACTIVATION_DTYPES = ("auto", "bfloat16", "float32")
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) from which bfloat16 dot products are native.
_NATIVE_BF16_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX10_", "ALL")
_NATIVE_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclasses.dataclass(frozen=True)
class Machine:
    """What decides the dtype: the device the model runs on and, on CPU, what oneDNN may use."""

    device: str  # "tpu", "gpu" or "cpu"
    cpu_flags: frozenset[str] = frozenset()
    gpu_capability: tuple[int, int] | None = None
    onednn_max_isa: str = ""
    onednn_enabled: bool = True

    def cpu_kind(self) -> str:
        """'AMX', 'AVX512-BF16', 'AVX-512' or 'AVX2' (or 'no AVX2'): the class a figure holds for."""
        for flag, kind in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512")):
            if flag in self.cpu_flags:
                return kind
        return "AVX2" if "avx2" in self.cpu_flags else "no AVX2"


@dataclasses.dataclass(frozen=True)
class Choice:
    """The dtype to run in, why, and a warning when an explicit choice will be slow."""

    dtype: str
    reason: str
    warning: str | None = None


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's feature flags (empty where /proc/cpuinfo does not exist)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def _gpu_capability() -> tuple[int, int] | None:
    """The lowest compute capability among visible GPUs, None when there is none."""
    from t2tcli.compat import tf

    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        capabilities.append(tuple(details.get("compute_capability") or (0, 0)))
    return min(capabilities) if capabilities else None


def detect(use_tpu: bool = False) -> Machine:
    """This process's machine: TPU when training on one, else the first GPU, else the CPU."""
    from t2tcli.compat import X86

    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")
    common = dict(
        cpu_flags=cpu_flags() if X86 else frozenset(),
        onednn_max_isa=os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper(),
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
    if not any(flag in machine.cpu_flags for flag in _NATIVE_CPU_FLAGS):
        return False, f"{kind} CPU without AMX or AVX512-BF16"
    if not machine.onednn_enabled:
        return False, f"{kind} CPU, but TF_ENABLE_ONEDNN_OPTS=0 turns oneDNN off"
    isa = machine.onednn_max_isa
    if isa and not isa.startswith(_NATIVE_BF16_ISAS):
        return False, f"{kind} CPU, but ONEDNN_MAX_CPU_ISA={isa} keeps oneDNN below AVX512_CORE_BF16"
    return True, f"{kind} CPU"


def check(requested: str) -> None:
    """A one-line error for a value that is not auto, bfloat16 or float32."""
    if requested not in ACTIVATION_DTYPES:
        raise UserError(f"hparam activation_dtype={requested!r}: use one of {', '.join(ACTIVATION_DTYPES)}")


def choose(requested: str, machine: Machine) -> Choice:
    """The dtype for `requested` (auto, bfloat16 or float32) on `machine`."""
    check(requested)
    native, why = native_bfloat16(machine)
    if requested == "auto":
        dtype = "bfloat16" if native else "float32"
        return Choice(dtype, f"activation_dtype=auto: {dtype} on this {why}")
    warning = None
    if requested == "bfloat16" and not native:
        warning = (
            f"activation_dtype=bfloat16 on this {why}: bfloat16 is emulated here, so training steps run "
            "slower than float32 on such CPUs (BENCHMARKS.md); activation_dtype=auto picks the faster one"
        )
    return Choice(requested, f"activation_dtype={requested} (set explicitly)", warning)


_said: set[str] = set()


def resolve(requested: str, use_tpu: bool = False, machine: Machine | None = None) -> str:
    """The concrete dtype ('bfloat16' or 'float32') for hparam `requested` here.

    Logs once per process what was chosen and why, and the warning for an explicit
    bfloat16 that this machine runs slowly.
    """
    check(requested)
    choice = choose(requested, machine or detect(use_tpu))
    if choice.reason not in _said:
        _said.add(choice.reason)
        logging.info("activations in %s (%s)", choice.dtype, choice.reason)
        if choice.warning:
            logging.warning("%s", choice.warning)
    return choice.dtype


def emulated_einsum(machine: Machine) -> bool:
    """Whether bfloat16 einsums should run in float32: on CPUs without native bfloat16,
    where TensorFlow's bfloat16 Einsum kernel is far slower than float32's."""
    return machine.device == "cpu" and not native_bfloat16(machine)[0]


# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) from which its GEMMs use AVX-512 registers.
_AVX512_ISAS = ("AVX512", "AVX10_", "ALL")


def onednn_avx512(machine: Machine) -> bool:
    """Whether oneDNN runs its AVX-512 kernels here: a CPU with AVX-512, oneDNN on, and no
    ONEDNN_MAX_CPU_ISA holding it below AVX-512."""
    if machine.device != "cpu" or not machine.onednn_enabled or "avx512f" not in machine.cpu_flags:
        return False
    isa = machine.onednn_max_isa
    return not isa or isa == "DEFAULT" or isa.startswith(_AVX512_ISAS)


def beam_attention_on_onednn(machine: Machine) -> bool:
    """Whether a decode step's attention with several queries per product (beam search's
    encoder-decoder attention: an input's beams against its encoder keys) runs on oneDNN's
    batch matmul and softmax rather than Eigen's.

    Where oneDNN runs AVX-512: there its batch matmul beats Eigen's for several queries
    per product, and whole beam decodes run faster with the same outputs. Single queries
    (greedy decoding, every self-attention step) stay on Eigen everywhere, which is faster
    for them. Where oneDNN runs AVX2-class kernels its gain for a beam step is within the
    noise, so those CPUs keep Eigen (`bench/decode_layout.py --variants=attention`
    measures both).
    """
    return onednn_avx512(machine)


def transposed_kernels(machine: Machine) -> bool:
    """Whether the fast decode engine should keep its kernels [out, in] (multiplying by
    them transposed) rather than [in, out] as checkpoints hold them.

    Where oneDNN runs AVX2-class kernels: on an AVX2-only CPU, and on a CPU with AVX-512
    held back by ONEDNN_MAX_CPU_ISA. There oneDNN's float32 GEMM is slow on an [in, out]
    kernel whose rows are a multiple of 512 floats long (T5's 512-, 1,536-, 2,048- and
    3,072-wide projections) and fast on the same kernel transposed, so beam decodes run
    faster transposed, with the same outputs. oneDNN's AVX-512 GEMM and Eigen's
    (TF_ENABLE_ONEDNN_OPTS=0) prefer the kernels as held. Every GEMM where oneDNN runs AVX2
    is float32 (bfloat16 ones run in float32 too, t2tcli.decode.fast_kernels.matmul), so
    the activation dtype need not be asked (`bench/decode_layout.py` measures each choice).
    """
    onednn_cpu = machine.device == "cpu" and machine.onednn_enabled and "avx2" in machine.cpu_flags
    return onednn_cpu and not onednn_avx512(machine)


# Zero columns added to the FFN's inner width where ffn_padding() asks for them.
FFN_PADDING = 16


def ffn_padding(machine: Machine, d_ff: int) -> int:
    """Zero columns the fast decode engine adds to the FFN's inner width (its input
    kernels' outputs and its output kernel's inputs): the FFN computes the same values,
    as the added units are zero in and out.

    On an AVX2-only CPU both of TensorFlow's float32 GEMMs (Eigen's and oneDNN's) slow
    down on a kernel whose rows are a multiple of 2,048 floats (8 KiB) long, T5's d_ff of
    2,048 among them (a power-of-two row stride); a few zero units more break that stride
    at no cost to the values. Widths that are no multiple
    of 2,048 (3,072, 2,816, 1,024) do not gain. A CPU with AVX-512 held back to AVX2
    transposes its kernels and keeps the width; AVX-512's and bfloat16's GEMMs were not
    seen to slow down so.
    """
    if machine.device != "cpu" or "avx2" not in machine.cpu_flags or "avx512f" in machine.cpu_flags:
        return 0
    return FFN_PADDING if d_ff % 2048 == 0 else 0
