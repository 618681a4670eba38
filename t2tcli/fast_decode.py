"""Decoding and scoring the Bitransformer with plain TensorFlow ops on one device.

mesh-tensorflow's decode loop is written for meshes, and on one CPU or GPU that costs
several times the model's arithmetic: its key/value caches are rewritten whole each
step (multiplied by one-hot masks), every step runs many small einsums and
transposes, the greedy loop first runs a full decoder pass over zeros to shape its
caches, and scores need a second, teacher-forced pass. This module computes the same
function from the same variables (T5 v1.0's layer layout, as `t2tcli.gin_bindings`
configures it): inputs cut to the batch's longest row, caches that grow by one
position per step, one fused q/k/v projection, encoder-decoder keys and values
computed once, scores summed while decoding, and (in `t2tcli.fast_search`, the greedy,
sampled and beam loops over this module's decoder step) a loop from which finished
inputs drop out and which stops when every row has ended.

The model_fn uses it for PREDICT on a one-device mesh; TPUs and model-parallel meshes
keep mesh-tensorflow's decode. `tests/test_fast_decode.py` checks that both give the
same teacher-forced scores and the same greedy and beam decodes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

from t2tcli import numerics, weight_names
from t2tcli.compat import tf
from t2tcli.hparams import HParams

tf1 = tf.compat.v1
# mesh-tf's attention bias for a hidden position, and its relative-position bucketing.
NEG_INF = -1e9
MAX_DISTANCE = 128
RMS_EPSILON = 1e-6


def _gelu(x: tf.Tensor) -> tf.Tensor:
    # mesh-tf's gelu is the tanh approximation.
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "relu": tf.nn.relu,
    "gelu": _gelu,
    "swish": lambda x: x * tf.sigmoid(x),
    "sigmoid": tf.sigmoid,
    "tanh": tf.tanh,
    "linear": lambda x: x,
}


@dataclasses.dataclass(frozen=True)
class Dims:
    d_model: int
    num_heads: int
    d_kv: int
    dtype: tf.DType

    @property
    def inner(self) -> int:
        return self.num_heads * self.d_kv


def _variable(name: str, shape: list[int]) -> tf.Tensor:
    # Restored from the checkpoint by name, as mesh-tf names its master variables.
    return tf1.get_variable(name, shape, tf.float32, initializer=tf1.zeros_initializer(), trainable=False)


class Weights:
    """The model's variables, read once per batch in the activation dtype, named as
    t2tcli.weight_names names them for this architecture.

    The layers' kernels are kept [out, in] on a CPU with AVX-512 held back to AVX2
    (`numerics.transposed_kernels`; transposed once per batch, outside the decode loop),
    [in, out] as the checkpoint holds them elsewhere; `dense` multiplies by them either way.
    The FFN's inner width may carry zero units (`numerics.ffn_padding`) that change no value.
    """

    def __init__(self, hp: HParams, vocab_size: int) -> None:
        arch = weight_names.Architecture.from_hparams(hp, vocab_size)
        shapes = weight_names.mesh_shapes(arch)
        self.dims = Dims(hp.d_model, hp.num_heads, hp.d_kv, tf.as_dtype(numerics.resolve(hp.activation_dtype)))
        self.activation = ACTIVATIONS[hp.ffn_activation.removeprefix("gated-")]
        self.gated = arch.gated
        self.transposed = _transposed_kernels()
        ffn_padding = numerics.ffn_padding(_machine(), hp.d_ff)
        cast = self.cast

        def read(name: str) -> tf.Tensor:
            # Read here, outside the decode loop: a variable used inside it is read (and
            # its whole buffer copied) again at every step, 64 MiB for T5's embedding.
            return cast(tf.convert_to_tensor(_variable(name, shapes[name])))

        def kernel(*names: str, zero_rows: int = 0, zero_columns: int = 0) -> tf.Tensor:
            """The kernels of `names` side by side: one matmul computes all their outputs;
            each kernel with zero rows and columns appended (numerics.ffn_padding)."""
            parts = [read(n) for n in names]
            if zero_rows or zero_columns:
                parts = [tf.pad(x, [[0, zero_rows], [0, zero_columns]]) for x in parts]
            fused = tf.concat(parts, axis=1) if len(parts) > 1 else parts[0]
            return tf.transpose(fused) if self.transposed else fused

        def attention(scope: str, fused: tuple[str, ...]) -> dict[str, tf.Tensor]:
            return {
                "".join(fused): kernel(*(f"{scope}/{n}" for n in fused)),
                **({} if "q" in fused else {"q": kernel(f"{scope}/q")}),
                "o": kernel(f"{scope}/o"),
            }

        def block(side: str, i: int) -> dict[str, Any]:
            """Block i of a stack: self-attention, (decoder) encoder-decoder attention, FFN,
            each with the norm in front of it."""
            out: dict[str, Any] = {}
            for sublayer in weight_names.sublayers(side):
                out[f"{sublayer}_norm"] = read(weight_names.norm(arch, side, i, sublayer))
                if sublayer == "ffn":
                    kernels = weight_names.ffn(arch, side, i)
                    # A gated FFN's two input projections run as one matmul, split after.
                    # Zero units added to the inner width stay zero through the activation
                    # (and gate) and meet zero rows of the output kernel.
                    inputs = (kernels[role] for role in kernels if role != "wo")
                    out["wi"] = kernel(*inputs, zero_columns=ffn_padding)
                    out["wo"] = kernel(kernels["wo"], zero_rows=ffn_padding)
                else:
                    fused = ("q", "k", "v") if sublayer == "self" else ("k", "v")
                    out[sublayer] = attention(weight_names.attention(side, i, sublayer), fused)
            return out

        self.embedding = read(weight_names.EMBEDDING)
        # T5 v1.0 computes logits with the embedding (and scales the decoder's output by
        # d_model ** -0.5 first); v1.1 has an output projection of its own, unscaled.
        # Either way the output projection is kept as [d_model, vocab]: a step's logits
        # matmul then runs about twice as fast as against the embedding transposed on the fly.
        self.logits_kernel = tf.transpose(self.embedding) if arch.tie_embeddings else read(weight_names.LOGITS)
        self.logits_scale = arch.d_model**-0.5 if arch.tie_embeddings else 1.0
        self.encoder = [block("encoder", i) for i in range(hp.num_encoder_layers)]
        self.decoder = [block("decoder", i) for i in range(hp.num_decoder_layers)]
        # "bias_shared": each stack's first layer holds the one relative-position bias. It
        # is added to float32 logits, rounded to the activation dtype first as mesh-tf does.
        self.encoder_bias, self.decoder_bias = (
            tf.cast(read(weight_names.relative_bias(side)), tf.float32) for side in weight_names.SIDES
        )
        self.encoder_final_norm, self.decoder_final_norm = (
            read(weight_names.final_norm(arch, side)) for side in weight_names.SIDES
        )

    def cast(self, x: tf.Tensor) -> tf.Tensor:
        return tf.cast(x, self.dims.dtype)

    def dense(self, x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        """x [..., in] times one of the layers' kernels: [..., out]."""
        return _dense(x, kernel, transpose=self.transposed)


def relative_buckets(relative_position: tf.Tensor, bidirectional: bool, num_buckets: int) -> tf.Tensor:
    """T5's bucket of each (memory position - query position), as mesh-tf computes it."""
    n = -relative_position
    out = tf.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        out += tf.cast(n < 0, tf.int32) * num_buckets
        n = tf.abs(n)
    else:
        n = tf.maximum(n, 0)
    max_exact = num_buckets // 2
    scaled = tf.math.log(tf.cast(n, tf.float32) / max_exact) / math.log(MAX_DISTANCE / max_exact)
    large = tf.minimum(max_exact + tf.cast(scaled * (num_buckets - max_exact), tf.int32), num_buckets - 1)
    return out + tf.where(n < max_exact, n, large)


def position_bias(table: tf.Tensor, queries: int | tf.Tensor, keys: int | tf.Tensor, bidirectional: bool) -> tf.Tensor:
    """[heads, queries, keys] float32 bias: relative-position bias, plus the causal mask
    when not bidirectional."""
    q = tf.range(queries)[:, None]
    k = tf.range(keys)[None, :]
    buckets = relative_buckets(k - q, bidirectional, int(table.shape[-1]))
    bias = tf.gather(table, buckets, axis=1)
    if not bidirectional:
        bias += tf.where(k > q, NEG_INF, 0.0)
    return bias


def _rms_norm(x: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    variance = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
    return x * tf.math.rsqrt(variance + RMS_EPSILON) * scale


def _heads(x: tf.Tensor, dims: Dims) -> tf.Tensor:
    """[batch, length, heads * d_kv] -> [batch, heads, length, d_kv]."""
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    return tf.transpose(tf.reshape(x, [batch, length, dims.num_heads, dims.d_kv]), [0, 2, 1, 3])


def _merge_heads(x: tf.Tensor, dims: Dims) -> tf.Tensor:
    """[batch, heads, length, d_kv] -> [batch, length, heads * d_kv]."""
    batch, length = tf.shape(x)[0], tf.shape(x)[2]
    return tf.reshape(tf.transpose(x, [0, 2, 1, 3]), [batch, length, dims.inner])


@functools.cache
def _machine() -> numerics.Machine:
    """This process's machine, detected once (detection lists the GPUs)."""
    return numerics.detect()


def _transposed_kernels() -> bool:
    """Whether this process keeps the layers' kernels [out, in] (t2tcli.numerics.transposed_kernels)."""
    return numerics.transposed_kernels(_machine())


def _beam_attention_on_onednn() -> bool:
    """Whether this process attends several queries per product on oneDNN (t2tcli.numerics.beam_attention_on_onednn)."""
    return numerics.beam_attention_on_onednn(_machine())


def _bfloat16_in_float32() -> bool:
    """Whether this process multiplies bfloat16 in float32 (t2tcli.numerics.emulated_einsum)."""
    return numerics.emulated_einsum(_machine())


def _matmul(a: tf.Tensor, b: tf.Tensor, transpose_b: bool = False) -> tf.Tensor:
    """tf.matmul; bfloat16 operands are multiplied in float32 and rounded once where the
    CPU has no native bfloat16, as the training graph's einsums are. That is the same
    arithmetic TensorFlow's CPU kernel does, and it avoids oneDNN's bfloat16 matmul,
    which aborts the process (dnnl::error) on a bfloat16 CPU held back by
    ONEDNN_MAX_CPU_ISA=AVX2."""
    if a.dtype == tf.bfloat16 and _bfloat16_in_float32():
        product = tf.matmul(tf.cast(a, tf.float32), tf.cast(b, tf.float32), transpose_b=transpose_b)
        return tf.cast(product, tf.bfloat16)
    return tf.matmul(a, b, transpose_b=transpose_b)


# Queries per attention at most, in a decode step (one per beam of an input).
DECODE_QUERIES = 8


def _attend(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Softmax attention over [..., length, d_kv] tensors; logits in float32 as mesh-tf's."""
    q, k = tf.cast(q, tf.float32), tf.cast(k, tf.float32)
    queries = q.shape[-2]
    decode_step = queries is not None and queries <= DECODE_QUERIES
    if decode_step and (queries == 1 or not _beam_attention_on_onednn()):
        # A decode step's queries: hundreds of [queries x d_kv] x [d_kv x positions]
        # products. With one query each (greedy decoding, every self-attention step),
        # Eigen's batch matmul (BatchMatMulV3, which oneDNN leaves alone) and an
        # element-wise softmax beat oneDNN's wherever measured (an AVX512-BF16 CPU as
        # itself and held back to AVX2); a beam step's several queries per input go to
        # oneDNN where it runs AVX-512 (numerics.beam_attention_on_onednn). Longer
        # queries (the encoder, teacher forcing) stay with oneDNN, several times faster.
        logits = tf.raw_ops.BatchMatMulV3(x=q, y=k, adj_y=True, Tout=tf.float32) + bias
        exp = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
        weights = exp / tf.reduce_sum(exp, axis=-1, keepdims=True)
        if v.dtype == tf.float32:  # Eigen's bfloat16 matmul is slow; oneDNN takes those
            return tf.raw_ops.BatchMatMulV3(x=weights, y=v, Tout=tf.float32)
    else:
        weights = tf.nn.softmax(_matmul(q, k, transpose_b=True) + bias)
    return _matmul(tf.cast(weights, v.dtype), v)


def _ffn(w: Weights, layer: dict[str, Any], x: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """x plus the FFN of its norm (scaled by `scale`, in x's dtype); the matmuls run in
    the activation dtype."""
    h = w.dense(w.cast(_rms_norm(x, scale)), layer["wi"])
    if w.gated:
        gate, linear = tf.split(h, 2, axis=-1)
        h = w.activation(gate) * linear
    else:
        h = w.activation(h)
    return x + tf.cast(w.dense(h, layer["wo"]), x.dtype)


def _dense(x: tf.Tensor, kernel: tf.Tensor, transpose: bool = False) -> tf.Tensor:
    """x [..., d] @ kernel [d, n] (kernel [n, d] with `transpose`) for 2-D or 3-D x.

    A 3-D x is flattened to one 2-D MatMul rather than an Einsum: TensorFlow's
    bfloat16 Einsum runs 10-20x slower than its MatMul on CPUs without native
    bfloat16 (t2tcli.numerics).
    """
    if x.shape.rank == 2:
        return _matmul(x, kernel, transpose_b=transpose)
    flat = _matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel, transpose_b=transpose)
    return tf.reshape(flat, tf.concat([tf.shape(x)[:-1], tf.shape(flat)[-1:]], axis=0))


def _self_attention_full(w: Weights, layer: dict[str, Any], x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    h = _rms_norm(x, layer["self_norm"])
    q, k, v = tf.split(w.dense(h, layer["self"]["qkv"]), 3, axis=-1)
    o = _attend(_heads(q, w.dims), _heads(k, w.dims), _heads(v, w.dims), bias)
    return x + w.dense(_merge_heads(o, w.dims), layer["self"]["o"])


def _padding_bias(visible: tf.Tensor) -> tf.Tensor:
    return tf.where(visible, 0.0, NEG_INF)


@dataclasses.dataclass
class Encoded:
    """The encoder's output as the decoder reads it: per layer keys and values
    [batch, heads, inputs_length, d_kv], and the float32 bias [batch, 1, 1, length]
    that hides padding."""

    keys: list[tf.Tensor]
    values: list[tf.Tensor]
    bias: tf.Tensor

    def tensors(self) -> list[tf.Tensor]:
        """Keys, values and bias as one list (a decode loop carries them as its variables)."""
        return [*self.keys, *self.values, self.bias]

    @classmethod
    def from_tensors(cls, tensors: list[tf.Tensor] | tuple[tf.Tensor, ...]) -> Encoded:
        """The inverse of tensors()."""
        layers = (len(tensors) - 1) // 2
        return cls(list(tensors[:layers]), list(tensors[layers : 2 * layers]), tensors[-1])


def trim_padding(ids: tf.Tensor) -> tf.Tensor:
    """int32 [batch, length] ids cut after the batch's last non-padding column.

    Batches are padded to one static length for the whole file (or the model's
    maximum), while a length-sorted batch of short lines needs a fraction of it; every
    position cut is one the encoder and each decoder step's attention no longer compute.
    Padding is masked everywhere it is seen, so results do not change.
    """
    columns = tf.range(1, tf.shape(ids)[1] + 1)
    used = tf.reduce_max(tf.where(ids > 0, columns[None, :], 0))
    return ids[:, : tf.maximum(used, 1)]


def encode(w: Weights, inputs: tf.Tensor) -> Encoded:
    """Runs the encoder on int32 [batch, length] inputs (0 = padding)."""
    inputs = trim_padding(inputs)
    length = tf.shape(inputs)[1]
    nonpad = inputs > 0
    # mesh-tf's encoder sequence id is min(inputs, 1): real tokens see real tokens, padding
    # sees padding.
    same = tf.equal(nonpad[:, :, None], nonpad[:, None, :])
    bias = position_bias(w.encoder_bias, length, length, bidirectional=True)[None] + _padding_bias(same)[:, None]
    x = tf.gather(w.embedding, inputs)
    for layer in w.encoder:
        x = _ffn(w, layer, _self_attention_full(w, layer, x, bias), layer["ffn_norm"])
    x = _rms_norm(x, w.encoder_final_norm)
    keys, values = [], []
    for layer in w.decoder:
        k, v = tf.split(w.dense(x, layer["cross"]["kv"]), 2, axis=-1)
        keys.append(_heads(k, w.dims))
        values.append(_heads(v, w.dims))
    return Encoded(keys, values, _padding_bias(nonpad)[:, None, None, :])


def _cross_attention(w: Weights, layer: dict[str, Any], i: int, x: tf.Tensor, enc: Encoded) -> tf.Tensor:
    h = _rms_norm(x, layer["cross_norm"])
    o = _attend(_heads(w.dense(h, layer["cross"]["q"]), w.dims), enc.keys[i], enc.values[i], enc.bias)
    return x + w.dense(_merge_heads(o, w.dims), layer["cross"]["o"])


def _projected(w: Weights, x: tf.Tensor) -> tf.Tensor:
    """The output projection's input from the decoder's last layer, in the activation
    dtype; the final norm runs in x's dtype."""
    x = _rms_norm(x, tf.cast(w.decoder_final_norm, x.dtype))
    if w.logits_scale != 1.0:
        x = x * w.logits_scale
    return w.cast(x)


def _logits(w: Weights, x: tf.Tensor) -> tf.Tensor:
    """Float32 logits from the decoder's last layer."""
    return tf.cast(_dense(_projected(w, x), w.logits_kernel), tf.float32)


# Logits of one step are computed and reduced this many bytes at a time.
LOGITS_BLOCK_BYTES = 4 << 20
# Top-k within a block first keeps the k chunks of this many logits with the largest
# maxima; the k best logits of the block lie in those chunks.
TOP_K_CHUNK = 32


def logits_blocks(w: Weights, rows: int) -> list[tuple[int, tf.Tensor]]:
    """(first token id, kernel columns) blocks of the output projection such that `rows`
    rows of logits of one block take about LOGITS_BLOCK_BYTES.

    At beam search's row counts a step's whole [rows, vocab] logits (33 MB for 256 rows
    of T5's vocabulary) leave the CPU caches before the top-k and log-sum-exp read them
    back: per block they are still in cache, and the step's projection, top-k and
    log-sum-exp took 72 ms instead of 134 ms (t5_small, 256 rows, 2 AVX2 cores). The
    kernel is split once per batch, outside the decode loop, so no step copies it.
    Blocks are whole TOP_K_CHUNKs wide where the vocabulary allows.
    """
    vocab = int(w.logits_kernel.shape[1])
    count = max(1, round(rows * vocab * 4 / LOGITS_BLOCK_BYTES))
    size = -(-vocab // count)
    size = -(-size // TOP_K_CHUNK) * TOP_K_CHUNK
    starts = list(range(0, vocab, size))
    return [(start, w.logits_kernel[:, start : start + size]) for start in starts]


def _top_k_by_chunks(logits: tf.Tensor, k: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(values [rows, k], positions [rows, k], row maxima [rows, 1]) of float32 logits
    [rows, n]: the k largest of each row, best first, ties to the lower position.

    TensorFlow's CPU top-k costs a few nanoseconds a logit, about 8% of a t5_small beam
    search step at T5's vocabulary. A row's k best logits lie in the k chunks with the
    largest maxima (ties to the lower chunk, as to the lower position), so top-k runs
    over the n / TOP_K_CHUNK chunk maxima and then over the k chosen chunks' logits
    only. Those chunks are taken in position order, so ties still go to the lower
    position. A block's top-k took 0.75 ms instead of 2.0 ms (256 x 4,032 logits, 2-core
    AVX512-BF16 CPU held to AVX2).
    """
    n = int(logits.shape[1])
    chunks = n // TOP_K_CHUNK
    if n % TOP_K_CHUNK or chunks <= k:
        top, at = tf.math.top_k(logits, k=k)
        return top, at, tf.reduce_max(logits, axis=-1, keepdims=True)
    by_chunk = tf.reshape(logits, [-1, chunks, TOP_K_CHUNK])
    maxima = tf.reduce_max(by_chunk, axis=-1)
    kept = tf.sort(tf.math.top_k(maxima, k=k).indices, axis=-1)  # [rows, k], in position order
    candidates = tf.reshape(tf.gather(by_chunk, kept, batch_dims=1), [-1, k * TOP_K_CHUNK])
    top, at = tf.math.top_k(candidates, k=k)
    positions = tf.gather(kept, at // TOP_K_CHUNK, batch_dims=1) * TOP_K_CHUNK + at % TOP_K_CHUNK
    return top, positions, tf.reduce_max(maxima, axis=-1, keepdims=True)


def top_log_probs(w: Weights, x: tf.Tensor, k: int, blocks: list[tuple[int, tf.Tensor]]) -> tuple[tf.Tensor, tf.Tensor]:
    """(float32 [rows, k] log-probabilities, int32 [rows, k] token ids) of each row's k most
    probable next tokens, best first, ties to the lower id; no [rows, vocab] tensor is kept."""
    h = _projected(w, x)
    values, ids, sums = [], [], []
    for start, kernel in blocks:
        logits = tf.cast(_matmul(h, kernel), tf.float32)
        top, at, peak = _top_k_by_chunks(logits, k)
        values.append(top)
        ids.append(at + start)
        # The block's log-sum-exp, shifted by the maximum the top-k found.
        sums.append(tf.math.log(tf.reduce_sum(tf.exp(logits - peak), axis=-1, keepdims=True)) + peak)
    if len(blocks) == 1:
        return values[0] - sums[0], ids[0]
    top, at = tf.math.top_k(tf.concat(values, axis=1), k=k)
    lse = tf.reduce_logsumexp(tf.concat(sums, axis=1), axis=-1, keepdims=True)
    return top - lse, tf.gather(tf.concat(ids, axis=1), at, batch_dims=1)


def teacher_forced_logits(w: Weights, enc: Encoded, targets: tf.Tensor) -> tf.Tensor:
    """Float32 [batch, length, vocab] logits of each target given the ones before it."""
    length = int(targets.shape[1])
    shifted = tf.pad(targets[:, :-1], [[0, 0], [1, 0]])
    bias = position_bias(w.decoder_bias, length, length, bidirectional=False)[None]
    x = tf.gather(w.embedding, shifted)
    for i, layer in enumerate(w.decoder):
        x = _self_attention_full(w, layer, x, bias)
        x = _ffn(w, layer, _cross_attention(w, layer, i, x, enc), layer["ffn_norm"])
    return _logits(w, x)


def score(w: Weights, inputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """Sum of log p(target token) over each row's non-padding targets, float32 [batch]."""
    logits = teacher_forced_logits(w, encode(w, inputs), targets)
    logp = tf.gather(tf.nn.log_softmax(logits), targets, batch_dims=2)
    return tf.reduce_sum(logp * tf.cast(targets > 0, tf.float32), axis=1)


class Caches:
    """Self-attention keys and values of every decoder layer, [rows, heads, steps so far,
    d_kv], carried by the decode loop and one position longer each step (and fewer rows
    once finished inputs leave it: t2tcli.fast_search). Keys are kept
    in float32, the dtype attention logits are computed in; values in `value_dtype`
    (the activation dtype), the dtype they are multiplied in, as mesh-tf does.

    Appending copies what is there so far, so a step costs what its position needs, not
    what the longest allowed output would (T5's 512 positions). Loop tensors, rather
    than variables written in place, keep the graph free of shared state: a SavedModel
    may serve concurrent requests on one session.
    """

    def __init__(self, layers: int, rows: int, heads: int, d_kv: int, value_dtype: tf.DType) -> None:
        self.layers, self.rows, self.heads, self.d_kv = layers, rows, heads, d_kv
        self.value_dtype = value_dtype

    def loop_vars(self) -> list[tf.Tensor]:
        """Keys and values of layer 0, then of layer 1, ..."""
        empty = [self.rows, self.heads, 0, self.d_kv]
        return [tf.zeros(empty, dtype) for _ in range(self.layers) for dtype in (tf.float32, self.value_dtype)]

    def loop_shapes(self) -> list[tf.TensorShape]:
        """shape_invariants of loop_vars()."""
        return [tf.TensorShape([None, self.heads, None, self.d_kv]) for _ in range(2 * self.layers)]

    @staticmethod
    def append(
        state: list[tf.Tensor], i: int, k: tf.Tensor, v: tf.Tensor, source: tf.Tensor | None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Layer i's keys and values, rows taken from `source` (None: as they are), with
        k, v [rows, heads, d_kv] appended."""
        out = []
        for j, x in enumerate((k, v)):
            cache = state[2 * i + j] if source is None else tf.gather(state[2 * i + j], source)
            out.append(tf.concat([cache, x[:, :, None, :]], axis=2))
        return out[0], out[1]


class Stepper:
    """One incremental decoder step for `beams` rows per encoded input, up to `length` steps.

    A row's hypotheses (beams) sit next to each other and share their input's encoder
    keys and values: one matmul per input attends all its beams at once. The encoder's
    output is an argument of each step, not part of the stepper, so that a decode loop
    can drop finished inputs from it; `encoded` is the whole batch's.
    """

    def __init__(self, w: Weights, enc: Encoded, length: int, beams: int = 1) -> None:
        self.w, self.beams = w, beams
        self.batch = int(enc.bias.shape[0])
        self.rows = rows = self.batch * beams
        dims = w.dims
        # Logits are float32 (as mesh-tf's are), so encoder keys are kept in float32
        # rather than cast each step; values stay in the activation dtype, like the
        # attention weights they are multiplied with.
        self.encoded = Encoded([tf.cast(k, tf.float32) for k in enc.keys], enc.values, enc.bias)
        self.bias = position_bias(w.decoder_bias, length, length, bidirectional=False)
        self.caches = Caches(len(w.decoder), rows, dims.num_heads, dims.d_kv, dims.dtype)
        self.norm_scales = [
            {name: tf.cast(layer[name], tf.float32) for name in ("self_norm", "cross_norm", "ffn_norm")}
            for layer in w.decoder
        ]

    def _rows(self, o: tf.Tensor) -> tf.Tensor:
        """Attention output, one row per hypothesis: [rows, heads * d_kv] in the activation dtype."""
        return tf.cast(tf.reshape(o, [-1, self.w.dims.inner]), self.w.dims.dtype)

    def _attend_self(self, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
        """q [rows, heads, d_kv] over k, v [rows, heads, steps, d_kv] -> [rows, heads * d_kv]."""
        return self._rows(_attend(q[:, :, None, :], k, v, bias))

    def _attend_encoder(self, q: tf.Tensor, enc: Encoded, i: int) -> tf.Tensor:
        """q [inputs, heads, beams, d_kv] over layer i's encoder keys and values ->
        [rows, heads * d_kv]."""
        o = _attend(q, enc.keys[i], enc.values[i], enc.bias)
        return self._rows(tf.transpose(o, [0, 2, 1, 3]))

    def __call__(
        self, step: tf.Tensor, ids: tf.Tensor, state: list[tf.Tensor], enc: Encoded, source: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(float32 logits [rows, vocab] for the token after `ids` [rows], new cache state);
        `enc`: the encoder's output for these rows' inputs (`encoded`, or rows of it);
        `source`: the row of `state` each row continues (beam search)."""
        x, new_state = self.hidden(step, ids, state, enc, source)
        return _logits(self.w, x), new_state

    def hidden(
        self, step: tf.Tensor, ids: tf.Tensor, state: list[tf.Tensor], enc: Encoded, source: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(the decoder's last layer [rows, d_model], float32, new cache state): see __call__."""
        w, dims = self.w, self.w.dims
        bias = tf.gather(self.bias, step, axis=1)[None, :, None, : step + 1]  # [1, heads, 1, step + 1]
        # The residual stream between sublayers is float32 (mesh-tf's is in the activation
        # dtype): on CPU, norms and adds over a step's few rows are several times faster
        # in float32 than in bfloat16, and no less precise. Matmuls keep the activation dtype.
        f32 = tf.float32
        x = tf.cast(tf.gather(w.embedding, ids), f32)
        new_state = []
        for i, (layer, scales) in enumerate(zip(w.decoder, self.norm_scales, strict=True)):
            h = w.cast(_rms_norm(x, scales["self_norm"]))
            qkv = tf.reshape(w.dense(h, layer["self"]["qkv"]), [-1, 3, dims.num_heads, dims.d_kv])
            q, k, v = qkv[:, 0], tf.cast(qkv[:, 1], f32), qkv[:, 2]
            keys, values = self.caches.append(state, i, k, v, source)
            new_state += [keys, values]
            x += tf.cast(w.dense(self._attend_self(q, keys, values, bias), layer["self"]["o"]), f32)
            h = w.cast(_rms_norm(x, scales["cross_norm"]))
            q = tf.reshape(w.dense(h, layer["cross"]["q"]), [-1, self.beams, dims.num_heads, dims.d_kv])
            o = self._attend_encoder(tf.transpose(q, [0, 2, 1, 3]), enc, i)
            x = _ffn(w, layer, x + tf.cast(w.dense(o, layer["cross"]["o"]), f32), scales["ffn_norm"])
        return x, new_state
