"""The fast engine's incremental decoder step and the self-attention caches it grows.

One step computes one new position for every row still decoding; the search loops
(t2tcli.decode.search) decide what to feed it and when to stop.

Imports: core, decode (fast, fast_kernels, fast_weights).
"""

from __future__ import annotations

from t2tcli.compat import tf
from t2tcli.decode import fast, fast_kernels
from t2tcli.decode.fast import Encoded
from t2tcli.decode.fast_weights import Weights


class Caches:
    """Self-attention keys and values of every decoder layer, [rows, heads, steps so far,
    d_kv], carried by the decode loop and one position longer each step (and fewer rows
    once finished inputs leave it: t2tcli.decode.search). Keys are kept
    in float32, the dtype attention logits are computed in; values in `value_dtype`
    (the activation dtype), the dtype they are multiplied in, as mesh-tf does.

    Appending copies what is there so far, so a step costs what its position needs, not
    what the longest allowed output would (T5's 512 positions). Loop tensors, rather
    than variables written in place, keep the graph free of shared state: a SavedModel
    may serve concurrent requests on one session.
    """

    def __init__(self, layers: int, rows: int | tf.Tensor, heads: int, d_kv: int, value_dtype: tf.DType) -> None:
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
        # A tensor: one graph decodes batches of any size (t2tcli.decode.engines splits some).
        self.batch = tf.shape(enc.bias)[0]
        self.rows = rows = self.batch * beams
        dims = w.dims
        # Logits are float32 (as mesh-tf's are), so encoder keys are kept in float32
        # rather than cast each step; values stay in the activation dtype, like the
        # attention weights they are multiplied with.
        self.encoded = Encoded([tf.cast(k, tf.float32) for k in enc.keys], enc.values, enc.bias)
        self.bias = fast.position_bias(w.decoder_bias, length, length, bidirectional=False)
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
        return self._rows(fast_kernels.attend(q[:, :, None, :], k, v, bias))

    def _attend_encoder(self, q: tf.Tensor, enc: Encoded, i: int) -> tf.Tensor:
        """q [inputs, heads, beams, d_kv] over layer i's encoder keys and values ->
        [rows, heads * d_kv]."""
        o = fast_kernels.attend(q, enc.keys[i], enc.values[i], enc.bias)
        return self._rows(tf.transpose(o, [0, 2, 1, 3]))

    def __call__(
        self, step: tf.Tensor, ids: tf.Tensor, state: list[tf.Tensor], enc: Encoded, source: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(float32 logits [rows, vocab] for the token after `ids` [rows], new cache state);
        `enc`: the encoder's output for these rows' inputs (`encoded`, or rows of it);
        `source`: the row of `state` each row continues (beam search)."""
        x, new_state = self.hidden(step, ids, state, enc, source)
        with tf.name_scope("logits"):
            return fast.output_logits(self.w, x), new_state

    def hidden(
        self, step: tf.Tensor, ids: tf.Tensor, state: list[tf.Tensor], enc: Encoded, source: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(the decoder's last layer [rows, d_model], float32, new cache state): see __call__.

        Its ops are named by sublayer (decoder/layer_<i>/self_attention, cross_attention,
        ffn), so a traced step says where its time goes (bench/decode_step.py)."""
        w, dims = self.w, self.w.dims
        # The residual stream between sublayers is float32 (mesh-tf's is in the activation
        # dtype): on CPU, norms and adds over a step's few rows are several times faster
        # in float32 than in bfloat16, and no less precise. Matmuls keep the activation dtype.
        f32 = tf.float32
        new_state = []
        with tf.name_scope("decoder"):
            bias = tf.gather(self.bias, step, axis=1)[None, :, None, : step + 1]  # [1, heads, 1, step + 1]
            x = tf.cast(tf.gather(w.embedding, ids), f32)
            for i, (layer, scales) in enumerate(zip(w.decoder, self.norm_scales, strict=True)):
                with tf.name_scope(f"layer_{i}/self_attention"):
                    h = w.cast(fast.rms_norm(x, scales["self_norm"]))
                    qkv = tf.reshape(w.dense(h, layer["self"]["qkv"]), [-1, 3, dims.num_heads, dims.d_kv])
                    q, k, v = qkv[:, 0], tf.cast(qkv[:, 1], f32), qkv[:, 2]
                    keys, values = self.caches.append(state, i, k, v, source)
                    new_state += [keys, values]
                    x += tf.cast(w.dense(self._attend_self(q, keys, values, bias), layer["self"]["o"]), f32)
                with tf.name_scope(f"layer_{i}/cross_attention"):
                    h = w.cast(fast.rms_norm(x, scales["cross_norm"]))
                    q = tf.reshape(w.dense(h, layer["cross"]["q"]), [-1, self.beams, dims.num_heads, dims.d_kv])
                    o = self._attend_encoder(tf.transpose(q, [0, 2, 1, 3]), enc, i)
                    x += tf.cast(w.dense(o, layer["cross"]["o"]), f32)
                with tf.name_scope(f"layer_{i}/ffn"):
                    x = fast.ffn(w, layer, x, scales["ffn_norm"])
        return x, new_state
