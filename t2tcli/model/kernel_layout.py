"""How the CPU's kernels are fed on this machine: whether bfloat16 products are computed
in float32, which library runs beam attention, whether the fast decode engine keeps its
kernels transposed, whether it pads the FFN's inner width, whether it has oneDNN lay
its kernels out once a session, and how beam search sums a step's probabilities.

Each choice follows one machine's facts (t2tcli.model.hardware), never the model's
numbers: every variant computes the same values, only at a different speed. The
measurements behind each choice are in BENCHMARKS.md; bench/decode_layout.py forces each
variant to measure them again on another CPU.
"""

from __future__ import annotations

import dataclasses

from t2tcli.model import hardware

# Zero columns added to the FFN's inner width where ffn_padding() asks for them.
FFN_PADDING = 16


def emulated_einsum(machine: hardware.Machine) -> bool:
    """Whether bfloat16 einsums should run in float32: on CPUs without native bfloat16,
    where TensorFlow's bfloat16 Einsum kernel is a scalar loop far slower than float32's."""
    return machine.device == "cpu" and not hardware.native_bfloat16(machine)[0]


def beam_attention_on_onednn(machine: hardware.Machine) -> bool:
    """Whether a decode step's attention with several queries per product (an input's beams
    at once: beam search's encoder-decoder attention, and the older part of its
    self-attention caches) runs on oneDNN's batch matmul and softmax rather than Eigen's.

    Only where oneDNN runs AVX-512 does its batch matmul beat Eigen's at these shapes.
    Single queries (greedy decoding, a beam row's own recent positions) stay on Eigen
    everywhere, which is faster for them; AVX2-class CPUs keep Eigen, where oneDNN's gain
    was within noise.
    """
    return hardware.onednn_avx512(machine)


def transposed_kernels(machine: hardware.Machine) -> bool:
    """Whether the fast decode engine should keep its kernels [out, in] (multiplying by
    them transposed) rather than [in, out] as checkpoints hold them.

    Where oneDNN runs AVX2-class kernels (an AVX2-only CPU, or one with AVX-512 held back
    by ONEDNN_MAX_CPU_ISA), its float32 GEMM is slow on an [in, out] kernel whose rows are
    a multiple of 512 floats long, as T5's projections are; transposed it is not. oneDNN's
    AVX-512 GEMM and Eigen's (TF_ENABLE_ONEDNN_OPTS=0) prefer the kernels as held. Every
    GEMM where oneDNN runs AVX2 is float32 (bfloat16 ones run in float32 too,
    t2tcli.decode.fast_kernels.matmul), so the activation dtype need not be asked.
    """
    return hardware.onednn_avx2_class(machine)


def ffn_padding(machine: hardware.Machine, d_ff: int) -> int:
    """Zero columns the fast decode engine adds to the FFN's inner width (its input
    kernels' outputs and its output kernel's inputs): the FFN computes the same values,
    as the added units are zero in and out.

    On an AVX2-only CPU both of TensorFlow's float32 GEMMs (Eigen's and oneDNN's) slow
    down on a kernel whose rows are a multiple of 2,048 floats (8 KiB) long, T5's d_ff
    among them; a few zero columns more move the rows off that stride. Other widths do
    not gain, and AVX-512's and bfloat16's GEMMs were not seen to slow down so; a CPU
    with AVX-512 held back to AVX2 transposes its kernels instead and keeps the width.
    """
    if machine.device != "cpu" or "avx2" not in machine.cpu_flags or "avx512f" in machine.cpu_flags:
        return 0
    return FFN_PADDING if d_ff % 2048 == 0 else 0


def packed_kernels(machine: hardware.Machine, beam_search: bool) -> bool:
    """Whether the fast engine multiplies by its held kernels on oneDNN's inner product told
    they are constant, which lays each kernel out for its inner loops once a session,
    rather than on TensorFlow's MatMul, which lays it out again at every call; for beam
    search (`beam_search`, each step multiplying an input's beams) or for greedy decoding
    and sampling (one row an input).

    That pass over the kernel weighs most where a product's few rows take least time: on
    bfloat16-native CPUs, whose GEMMs also interleave a kernel's bfloat16 rows in pairs.
    Where oneDNN multiplies on AMX tiles, greedy and beam-4 decodes ran faster laid out
    once (`bench/decode_layout.py --variants=packing`, in BENCHMARKS.md). On AVX512-BF16
    without AMX, greedy decodes ran faster so, but beam-4 decodes, whose steps multiply
    four times the rows, ran slower: beam search keeps MatMul there (with float32
    activations too, which decoded there the same way round). The sums are rounded
    in another order, so a bfloat16 decode may differ from MatMul's where two tokens
    nearly tie. Where oneDNN runs AVX2-class kernels, whole greedy decodes ran slower (its
    float32 inner product is slower there than its GEMM), so they keep MatMul.
    """
    if hardware.onednn_amx(machine):
        return True
    return not beam_search and machine.device == "cpu" and hardware.native_bfloat16(machine)[0]


def log_sum_exp_by_softmax(machine: hardware.Machine) -> bool:
    """Whether beam search takes a block of logits' log-sum-exp from one softmax kernel
    (its maximum less the log of the maximum's probability) rather than from a
    subtraction, an exp and a sum, three float32 passes over the block.

    Where oneDNN multiplies on AMX tiles, and where it runs AVX2-class kernels, its softmax
    made whole beam-4 decodes faster in turns, with the same outputs
    (`bench/decode_layout.py --variants=log-sum-exp`). Where it runs AVX-512 kernels
    without AMX (measured on AVX512-BF16) they ran level; there, and wherever it was not
    measured (GPUs, Eigen's kernels, CPUs without AVX2), the element-wise ops stay.
    """
    return hardware.onednn_amx(machine) or hardware.onednn_avx2_class(machine)


@dataclasses.dataclass(frozen=True)
class KernelLayout:
    """This machine's choices for the model's kernels, as t2tcli.model.config carries them."""

    float32_einsums: bool = False  # bfloat16 products computed in float32 (emulated_einsum)
    transposed_kernels: bool = False  # the fast engine keeps kernels [out, in]
    ffn_padding: int = 0  # zero units the fast engine adds to the FFN's inner width
    packed_kernels: bool = False  # greedy: the fast engine's held kernels laid out once a session (packed_kernels)
    packed_kernels_in_beam_search: bool = False  # the same for beam search


def for_machine(machine: hardware.Machine, d_ff: int) -> KernelLayout:
    """Every kernel choice for a model of FFN width `d_ff` on `machine`."""
    return KernelLayout(
        emulated_einsum(machine),
        transposed_kernels(machine),
        ffn_padding(machine, d_ff),
        packed_kernels(machine, beam_search=False),
        packed_kernels(machine, beam_search=True),
    )
