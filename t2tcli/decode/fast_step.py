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

# Beam search's caches move their last positions into the part kept by input once they
# are this many (BeamCaches).
RECENT_STEPS = 16


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
    def append(state: list[tf.Tensor], i: int, k: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Layer i's keys and values with k, v [rows, heads, d_kv] appended, rows as they
        are (BeamCaches gathers its recent part by source before appending to it here)."""
        keys, values = (tf.concat([state[2 * i + j], x[:, :, None, :]], axis=2) for j, x in enumerate((k, v)))
        return keys, values


class BeamCaches:
    """Beam search's self-attention keys and values: per decoder layer, an older part kept
    by input and beam ([inputs, heads, beams, steps, d_kv]) and the last few positions
    ([rows, heads, steps, d_kv]), with each row's beam of the older part (int32 [rows],
    0 to beams - 1) shared by all layers.

    Each step a row continues a hypothesis that may sit in another row, so a cache kept
    in one piece is gathered by the rows' sources and then appended to: two copies of the
    whole cache a step, a share of a beam step that grows with the output's length. Here
    only the last positions (at most RECENT_STEPS) are gathered and appended to; a row
    reads the older part of the beam it descends from through its attention's mask, and
    the older part is rewritten only once every RECENT_STEPS steps, when the recent
    positions move into it.
    """

    def __init__(
        self, layers: int, inputs: tf.Tensor, beams: int, heads: int, d_kv: int, value_dtype: tf.DType
    ) -> None:
        self.layers, self.inputs, self.beams, self.heads, self.d_kv = layers, inputs, beams, heads, d_kv
        self.value_dtype = value_dtype

    def loop_vars(self) -> list[tf.Tensor]:
        """The rows' beams, the recent keys and values of layer 0, 1, ..., then the
        older keys and values of layer 0, 1, ...; see split()."""
        rows = self.inputs * self.beams
        dtypes = [dtype for _ in range(self.layers) for dtype in (tf.float32, self.value_dtype)]
        recent = [tf.zeros([rows, self.heads, 0, self.d_kv], dtype) for dtype in dtypes]
        older = [tf.zeros([self.inputs, self.heads, self.beams, 0, self.d_kv], dtype) for dtype in dtypes]
        return [tf.range(rows) % self.beams, *recent, *older]

    def loop_shapes(self) -> list[tf.TensorShape]:
        """shape_invariants of loop_vars()."""
        recent = tf.TensorShape([None, self.heads, None, self.d_kv])
        older = tf.TensorShape([None, self.heads, self.beams, None, self.d_kv])
        return [tf.TensorShape([None]), *[recent] * (2 * self.layers), *[older] * (2 * self.layers)]

    def split(self, state: list[tf.Tensor]) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        """(the tensors kept by row, which follow the rows' sources; those kept by input,
        which follow the inputs staying in the loop)."""
        return state[: 1 + 2 * self.layers], state[1 + 2 * self.layers :]

    def follow(self, state: list[tf.Tensor], source: tf.Tensor) -> list[tf.Tensor]:
        """`state` for rows continuing rows `source` of the last step; the recent
        positions moved into the older part once they are RECENT_STEPS."""
        by_row, by_input = self.split(state)
        by_row = [tf.gather(t, source) for t in by_row]
        full = tf.shape(by_row[1])[2] >= RECENT_STEPS
        return tf.cond(full, lambda: self._merged(by_row, by_input), lambda: by_row + by_input)

    def _merged(self, by_row: list[tf.Tensor], by_input: list[tf.Tensor]) -> list[tf.Tensor]:
        beam, recent = by_row[0], by_row[1:]
        n, k = tf.shape(by_input[0])[0], self.beams
        beam = tf.reshape(beam, [n, k])
        older = []
        for old, new in zip(by_input, recent, strict=True):
            new = tf.transpose(tf.reshape(new, [n, k, self.heads, -1, self.d_kv]), [0, 2, 1, 3, 4])
            older.append(tf.concat([tf.gather(old, beam, axis=2, batch_dims=1), new], axis=3))
        rows = n * k
        empty = [tf.zeros([rows, self.heads, 0, self.d_kv], t.dtype) for t in recent]
        return [tf.range(rows) % k, *empty, *older]

    def layer(
        self, state: list[tf.Tensor], i: int, k: tf.Tensor, v: tf.Tensor
    ) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        """([recent keys, recent values] of layer i with k, v [rows, heads, d_kv] appended,
        [older keys, older values] of layer i)."""
        by_row, by_input = self.split(state)
        # The recent parts, after the rows' beams, are laid out as Caches' state.
        return list(Caches.append(by_row[1:], i, k, v)), by_input[2 * i : 2 * i + 2]


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
        layers = len(w.decoder)
        self.caches: Caches | BeamCaches = (
            BeamCaches(layers, self.batch, beams, dims.num_heads, dims.d_kv, dims.dtype)
            if beams > 1
            else Caches(layers, rows, dims.num_heads, dims.d_kv, dims.dtype)
        )
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

    def _attend_beams(
        self, q: tf.Tensor, recent: list[tf.Tensor], older: list[tf.Tensor], beam: tf.Tensor, bias: tf.Tensor
    ) -> tf.Tensor:
        """q [rows, heads, d_kv] over BeamCaches' positions of one layer -> [rows, heads * d_kv].

        The recent positions are the row's own (one query each); the older ones are
        attended by all of an input's queries at once, over all its beams, and the mask
        keeps each query to the beam its row descends from.
        """
        k, heads, d_kv = self.beams, self.w.dims.num_heads, self.w.dims.d_kv
        n, seen = tf.shape(older[0])[0], tf.shape(older[0])[3]
        recent_logits = fast_kernels.attention_logits(q[:, :, None, :], recent[0], eigen=True) + bias[..., seen:]
        by_input = tf.transpose(tf.reshape(q, [n, k, heads, d_kv]), [0, 2, 1, 3])  # [inputs, heads, k, d_kv]
        eigen = fast_kernels.on_eigen(k)
        older_logits = fast_kernels.attention_logits(by_input, tf.reshape(older[0], [n, heads, -1, d_kv]), eigen)
        own = tf.one_hot(tf.reshape(beam, [n, k]), k, on_value=0.0, off_value=fast.NEG_INF)  # [inputs, k, k]
        older_logits = tf.reshape(older_logits, [n, heads, k, k, seen]) + own[:, None, :, :, None]
        older_logits += bias[:, :, :, None, :seen]
        recent_logits = tf.transpose(tf.reshape(recent_logits, [n, k, heads, -1]), [0, 2, 1, 3])
        logits = tf.concat([tf.reshape(older_logits, [n, heads, k, k * seen]), recent_logits], axis=-1)
        weights = fast_kernels.softmax(logits, eigen=True)
        older_out = fast_kernels.attention_mix(
            weights[..., : k * seen], tf.reshape(older[1], [n, heads, k * seen, d_kv]), eigen
        )
        recent_weights = tf.reshape(tf.transpose(weights[..., k * seen :], [0, 2, 1, 3]), [n * k, heads, 1, -1])
        recent_out = fast_kernels.attention_mix(recent_weights, recent[1], eigen=True)
        # Summed in float32: in bfloat16 the two parts would be rounded once more than one product's.
        out = tf.cast(tf.transpose(older_out, [0, 2, 1, 3]), tf.float32)
        out += tf.cast(tf.reshape(recent_out, [n, k, heads, d_kv]), tf.float32)
        return self._rows(out)

    def _attend_encoder(self, q: tf.Tensor, enc: Encoded, i: int) -> tf.Tensor:
        """q [inputs, heads, beams, d_kv] over layer i's encoder keys and values ->
        [rows, heads * d_kv]."""
        o = fast_kernels.attend(q, enc.keys[i], enc.values[i], enc.bias)
        return self._rows(tf.transpose(o, [0, 2, 1, 3]))

    def __call__(
        self,
        step: tf.Tensor,
        ids: tf.Tensor,
        state: list[tf.Tensor],
        enc: Encoded,
        source: tf.Tensor | None = None,
        float32: bool = True,
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(logits [rows, vocab] for the token after `ids` [rows], new cache state);
        `enc`: the encoder's output for these rows' inputs (`encoded`, or rows of it);
        `source`: the row of `state` each row continues (beam search: required); the
        logits float32, or (not `float32`) in the activation dtype (fast.output_logits)."""
        x, new_state = self.hidden(step, ids, state, enc, source)
        with tf.name_scope("logits"):
            return fast.output_logits(self.w, x, float32), new_state

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
            if isinstance(self.caches, BeamCaches):
                with tf.name_scope("self_attention"), tf.name_scope("caches"):
                    state = self.caches.follow(state, source)
            bias = tf.gather(self.bias, step, axis=1)[None, :, None, : step + 1]  # [1, heads, 1, step + 1]
            x = tf.cast(tf.gather(w.embedding, ids), f32)
            for i, (layer, scales) in enumerate(zip(w.decoder, self.norm_scales, strict=True)):
                with tf.name_scope(f"layer_{i}/self_attention"):
                    h = w.cast(fast.rms_norm(x, scales["self_norm"]))
                    qkv = tf.reshape(w.dense(h, layer["self"]["qkv"]), [-1, 3, dims.num_heads, dims.d_kv])
                    q, k, v = qkv[:, 0], tf.cast(qkv[:, 1], f32), qkv[:, 2]
                    if isinstance(self.caches, BeamCaches):
                        recent, older = self.caches.layer(state, i, k, v)
                        new_state += recent
                        o = self._attend_beams(q, recent, older, state[0], bias)
                    else:
                        keys, values = self.caches.append(state, i, k, v)
                        new_state += [keys, values]
                        o = self._attend_self(q, keys, values, bias)
                    x += tf.cast(w.dense(o, layer["self"]["o"]), f32)
                with tf.name_scope(f"layer_{i}/cross_attention"):
                    h = w.cast(fast.rms_norm(x, scales["cross_norm"]))
                    q = tf.reshape(w.dense(h, layer["cross"]["q"]), [-1, self.beams, dims.num_heads, dims.d_kv])
                    o = self._attend_encoder(tf.transpose(q, [0, 2, 1, 3]), enc, i)
                    x += tf.cast(w.dense(o, layer["cross"]["o"]), f32)
                with tf.name_scope(f"layer_{i}/ffn"):
                    x = fast.ffn(w, layer, x, scales["ffn_norm"])
        if isinstance(self.caches, BeamCaches):
            by_row, by_input = self.caches.split(state)
            new_state = [by_row[0], *new_state, *by_input]
        return x, new_state
