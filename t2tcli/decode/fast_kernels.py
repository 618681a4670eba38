"""The fast engine's matrix products and attention, in the kernels this machine runs best.

Which kernel a product or an attention takes depends on the CPU (native bfloat16 or
not, AVX-512 or held back to AVX2): t2tcli.model.kernel_layout decides, once per process,
and the functions here follow. The rest of the fast engine multiplies only through them.

Imports: core, model.
"""

from __future__ import annotations

import functools

from t2tcli.compat import tf
from t2tcli.model import hardware, kernel_layout

tf1 = tf.compat.v1

# Queries per attention at most, in a decode step (one per beam of an input).
DECODE_QUERIES = 8


@functools.cache
def machine() -> hardware.Machine:
    """This process's machine, detected once (detection lists the GPUs)."""
    return hardware.detect()


def beam_attention_on_onednn() -> bool:
    """Whether this process attends several queries per product on oneDNN
    (t2tcli.model.kernel_layout.beam_attention_on_onednn)."""
    return kernel_layout.beam_attention_on_onednn(machine())


def log_sum_exp_by_softmax() -> bool:
    """Whether this process takes beam search's log-sum-exp from a softmax
    (t2tcli.model.kernel_layout.log_sum_exp_by_softmax)."""
    return kernel_layout.log_sum_exp_by_softmax(machine())


def bfloat16_in_float32() -> bool:
    """Whether this process multiplies bfloat16 in float32 (t2tcli.model.kernel_layout.emulated_einsum)."""
    return kernel_layout.emulated_einsum(machine())


def matmul(a: tf.Tensor, b: tf.Tensor, transpose_b: bool = False, packed: bool = False) -> tf.Tensor:
    """tf.matmul; bfloat16 operands are multiplied in float32 and rounded once where the
    CPU has no native bfloat16, as the training graph's einsums are. That is the same
    arithmetic TensorFlow's CPU kernel does, and it avoids oneDNN's bfloat16 matmul,
    which aborts the process (dnnl::error) on a bfloat16 CPU held back by
    ONEDNN_MAX_CPU_ISA=AVX2.

    With `packed`, `b` must not change for the session's lifetime (see packed_matmul).
    """
    if a.dtype == tf.bfloat16 and bfloat16_in_float32():
        product = tf.matmul(tf.cast(a, tf.float32), tf.cast(b, tf.float32), transpose_b=transpose_b)
        return tf.cast(product, tf.bfloat16)
    if _on_packed(a, packed):
        return packed_matmul(a, b, transpose_b)
    return tf.matmul(a, b, transpose_b=transpose_b)


def _on_packed(a: tf.Tensor, packed: bool) -> bool:
    """Whether a product of `a` by a kernel that may be `packed` runs on packed_matmul."""
    return packed and machine().onednn_cpu() and not (a.dtype == tf.bfloat16 and bfloat16_in_float32())


def packed_matmul(
    a: tf.Tensor, kernel: tf.Tensor, transpose_b: bool = False, relu: bool = False, addend: tf.Tensor | None = None
) -> tf.Tensor:
    """a @ kernel on oneDNN's inner product, told the kernel is constant: the op lays the
    kernel out for its inner loops at its first call and multiplies every later call by
    that copy, where TensorFlow's MatMul lays its kernel out at every call. With `relu`,
    the product's ReLU; with `addend` (a's rows, the kernel's width), the product plus
    it: each applied to the float32 sums before they are rounded, which saves a pass over
    the result (the ReLU's values are the same; the sum is rounded once, not twice).

    The op keeps the first kernel it sees, so `kernel` must hold the same values for as
    long as the session runs (the fast engine's held weights do). TensorFlow builds this
    op only from constants; held weights are variables, so it is named here (oneDNN's
    fused MatMul, with a zero bias).
    """
    if relu and addend is not None:
        raise ValueError("packed_matmul fuses a ReLU or an addend, not both")
    width = kernel.shape[0] if transpose_b else kernel.shape[1]
    fused = [b"BiasAdd"] + [b"Relu"] * relu + [b"Add"] * (addend is not None)
    attrs = {
        "T": tf1.AttrValue(type=a.dtype.as_datatype_enum),
        "transpose_a": tf1.AttrValue(b=False),
        "transpose_b": tf1.AttrValue(b=transpose_b),
        "is_filter_const": tf1.AttrValue(b=True),
        "num_args": tf1.AttrValue(i=1 + (addend is not None)),
        "fused_ops": tf1.AttrValue(list=tf1.AttrValue.ListValue(s=fused)),
        "_kernel": tf1.AttrValue(s=b"MklNameChangeOp"),  # the label oneDNN's kernels register under
    }
    graph = tf1.get_default_graph()
    inputs = [a, kernel, tf.fill([width], tf.constant(0, a.dtype))]  # a Fill whatever the width
    inputs += [] if addend is None else [addend]
    return graph.create_op("_MklNativeFusedMatMul", inputs, [a.dtype], name="packed_matmul", attrs=attrs).outputs[0]


def relu(x: tf.Tensor) -> tf.Tensor:
    """ReLU; a 16-bit float's as the integer maximum of its bits and 0.

    TensorFlow's CPU ReLU converts each bfloat16 element on its own, where an int16
    maximum is vectorized: twice as fast over an encoder's [batch * length, d_ff]. A
    16-bit float with its sign bit set reads as a negative int16 and becomes +0, as
    ReLU makes every negative value (-0 too, where TensorFlow keeps -0: an equal value);
    the rest keep their bits. GPUs (whose kernels have no int16 maximum) take tf.nn.relu.
    """
    if x.dtype not in (tf.bfloat16, tf.float16) or machine().device != "cpu":
        return tf.nn.relu(x)
    return tf.bitcast(tf.maximum(tf.bitcast(x, tf.int16), tf.constant(0, tf.int16)), x.dtype)


def dense(
    x: tf.Tensor,
    kernel: tf.Tensor,
    transpose: bool = False,
    packed: bool = False,
    relu_after: bool = False,
    plus: tf.Tensor | None = None,
) -> tf.Tensor:
    """x [..., d] @ kernel [d, n] (kernel [n, d] with `transpose`) for 2-D or 3-D x, then
    its ReLU (`relu_after`), plus `plus` ([..., n], x's dtype); `packed` as matmul's,
    and a packed product applies both before it rounds (packed_matmul).

    A 3-D x is flattened to one 2-D MatMul rather than an Einsum: TensorFlow's
    bfloat16 Einsum runs far slower than its MatMul on CPUs without native
    bfloat16 (t2tcli.model.kernel_layout).
    """
    if plus is not None and plus.dtype != x.dtype:
        raise ValueError(f"dense: plus is {plus.dtype.name}, x {x.dtype.name}")
    flat = x if x.shape.rank == 2 else tf.reshape(x, [-1, x.shape[-1]])
    flat_plus = None if plus is None else tf.reshape(plus, [-1, plus.shape[-1]])
    if _on_packed(x, packed):
        y = packed_matmul(flat, kernel, transpose, relu=relu_after, addend=flat_plus)
    else:
        y = matmul(flat, kernel, transpose_b=transpose)
        y = relu(y) if relu_after else y
        y = y if flat_plus is None else flat_plus + y
    if x.shape.rank == 2:
        return y
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(y)[-1:]], axis=0))


def on_eigen(queries: int | None) -> bool:
    """Whether attention with `queries` queries per product multiplies on Eigen's batch
    matmul (BatchMatMulV3, which oneDNN leaves alone) with an element-wise softmax.

    A decode step's queries make hundreds of [queries x d_kv] x [d_kv x positions]
    products. With one query each (greedy decoding, every self-attention step), Eigen's
    products beat oneDNN's wherever measured (an AVX512-BF16 CPU as itself and held back
    to AVX2); a beam step's several queries per input go to oneDNN where it runs AVX-512
    (kernel_layout.beam_attention_on_onednn). Longer queries (the encoder, teacher
    forcing) stay with oneDNN, several times faster.
    """
    decode_step = queries is not None and queries <= DECODE_QUERIES
    return decode_step and (queries == 1 or not beam_attention_on_onednn())


def attention_logits(q: tf.Tensor, k: tf.Tensor, eigen: bool) -> tf.Tensor:
    """Float32 q k^T of [..., length, d_kv] tensors, on the kernel on_eigen chose."""
    q, k = tf.cast(q, tf.float32), tf.cast(k, tf.float32)
    if eigen:
        return tf.raw_ops.BatchMatMulV3(x=q, y=k, adj_y=True, Tout=tf.float32)
    return matmul(q, k, transpose_b=True)


def softmax(logits: tf.Tensor, eigen: bool) -> tf.Tensor:
    """Softmax over the last axis; element-wise ops beside Eigen's products, which beat
    TensorFlow's fused softmax over a decode step's few positions."""
    if not eigen:
        return tf.nn.softmax(logits)
    exp = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
    return exp / tf.reduce_sum(exp, axis=-1, keepdims=True)


def attention_mix(weights: tf.Tensor, v: tf.Tensor, eigen: bool) -> tf.Tensor:
    """Float32 weights [..., queries, length] times v [..., length, d_kv], in v's dtype."""
    if eigen and v.dtype == tf.float32:  # Eigen's bfloat16 matmul is slow; oneDNN takes those
        return tf.raw_ops.BatchMatMulV3(x=weights, y=v, Tout=tf.float32)
    return matmul(tf.cast(weights, v.dtype), v)


def attend(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Softmax attention over [..., length, d_kv] tensors; logits in float32 as mesh-tf's."""
    eigen = on_eigen(q.shape[-2])
    weights = softmax(attention_logits(q, k, eigen) + bias, eigen)
    return attention_mix(weights, v, eigen)
