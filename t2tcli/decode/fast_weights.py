"""The fast engine's weights: the checkpoint's variables, read once per batch (or
prepared once a session), in the layout and dtype its kernels
(t2tcli.decode.fast_kernels) multiply fastest.

Imports: core, model, decode (fast_kernels).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from t2tcli.compat import tf
from t2tcli.decode import fast_kernels
from t2tcli.model import weight_names
from t2tcli.model.config import ModelConfig

tf1 = tf.compat.v1


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
assert tuple(ACTIVATIONS) == weight_names.ACTIVATIONS, "the fast engine computes every activation the model has"


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


def _held(t: tf.Tensor) -> tf.Tensor:
    """`t`, computed once a session into a local variable where it is more than a read of
    a checkpoint variable (a cast, transpose or concatenation of them)."""
    if t.op.type == "ReadVariableOp":
        return t
    held = tf1.Variable(
        t, trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES], name="held_weight", use_resource=True
    )
    return tf.convert_to_tensor(held)


class Weights:
    """The model's variables, read once per batch in the activation dtype, named as
    t2tcli.model.weight_names names them for this architecture.

    With `held`, the layout and dtype each kernel is multiplied in are computed once a
    session instead (by the local variables' initializer, to run after the checkpoint is
    restored): preparing them reads the whole model, a share of a batch's decode that
    grows as its outputs get shorter, and each batch in flight would otherwise hold a copy
    of its own.

    The layers' kernels are kept [out, in] where oneDNN runs AVX2-class kernels
    (`kernel_layout.transposed_kernels`; transposed outside the decode loop),
    [in, out] as the checkpoint holds them elsewhere; `dense` multiplies by them either way.
    The FFN's inner width may carry zero units (`kernel_layout.ffn_padding`) that change no value.
    Held kernels may be laid out once a session by oneDNN (`kernel_layout.packed_kernels`,
    which may choose otherwise for `beam_search`, the decode these weights serve).
    """

    def __init__(self, config: ModelConfig, held: bool = False, beam_search: bool = False) -> None:
        hp = config.hparams
        arch = weight_names.Architecture.from_hparams(hp, config.vocab_size)
        shapes = weight_names.mesh_shapes(arch)
        self.dims = Dims(hp.d_model, hp.num_heads, hp.d_kv, tf.as_dtype(config.activation_dtype))
        # Held weights are the engine's own session's: its graph may use what a portable one
        # (an exported SavedModel's) should not, such as fast_kernels.relu's int16 maximum.
        self.held = held
        activation = hp.ffn_activation.removeprefix("gated-")
        self.activation = fast_kernels.relu if held and activation == "relu" else ACTIVATIONS[activation]
        self.gated = arch.gated
        self.transposed = config.kernels.transposed_kernels
        # Only held kernels stay the same for a whole session, as packing them once asks.
        packed = config.kernels.packed_kernels_in_beam_search if beam_search else config.kernels.packed_kernels
        self.packed = held and packed
        # An ungated ReLU FFN on packed kernels takes its activation inside its input product.
        self.relu_ffn = self.packed and hp.ffn_activation == "relu"
        ffn_padding = config.kernels.ffn_padding
        cast = self.cast

        def read(name: str) -> tf.Tensor:
            # Read here, outside the decode loop: a variable used inside it is read (and
            # its whole buffer copied) again at every step, 64 MiB for T5's embedding.
            return cast(tf.convert_to_tensor(_variable(name, shapes[name])))

        def kernel(*names: str, zero_rows: int = 0, zero_columns: int = 0) -> tf.Tensor:
            """The kernels of `names` side by side: one matmul computes all their outputs;
            each kernel with zero rows and columns appended (kernel_layout.ffn_padding)."""
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
        if held:
            with tf.name_scope("held_weights"):
                prepared = (self.embedding, self.logits_kernel, self.encoder, self.decoder)
                self.embedding, self.logits_kernel, self.encoder, self.decoder = tf.nest.map_structure(_held, prepared)

    def cast(self, x: tf.Tensor) -> tf.Tensor:
        return tf.cast(x, self.dims.dtype)

    def dense(
        self, x: tf.Tensor, kernel: tf.Tensor, relu_after: bool = False, plus: tf.Tensor | None = None
    ) -> tf.Tensor:
        """x [..., in] times one of the layers' kernels: [..., out], then its ReLU
        (`relu_after`), plus `plus` (fast_kernels.dense)."""
        return fast_kernels.dense(x, kernel, self.transposed, self.packed, relu_after, plus)
