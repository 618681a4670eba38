"""Names and shapes of the transformer's weights, and the map to Hugging Face T5's.

One module owns them so that the mesh-tensorflow model (through gin), the fast
decoder, checkpoint import and export all agree. Three layouts meet here:

* mesh-tensorflow names, as T5's released checkpoints and t2t-train write them:
  `encoder/block_003/layer_001/DenseReluDense/wi/kernel` [d_model, d_ff]. The norm
  scales are named by `norm_scope`: T5 v1.0 (and t2tcli's T5 v1.0-style sets) say
  `.../layer_norm/scale` and `{encoder,decoder}/final_layer_norm/scale`; T5 v1.1,
  FLAN-T5, mT5 and t2tcli runs made before this distinction say `.../rms_norm/scale`
  and `{encoder,decoder}/rms_norm/scale`.
* T5 v1.1's other differences: a gated FFN (`wi_0`, `wi_1`) and an output projection of
  its own, `decoder/logits/kernel` [d_model, vocab], where v1.0 reuses the embedding.
* Hugging Face T5 state dicts: `encoder.block.3.layer.1.DenseReluDense.wi.weight`
  [d_ff, d_model]: torch Linear weights are stored [out, in], so every kernel is the
  transpose of the mesh one, and so is the relative-position bias ([buckets, heads]
  against mesh-tf's [heads, buckets]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from t2tcli.errors import UserError
from t2tcli.hparams import HParams

NORM_SCOPES = ("layer_norm", "rms_norm")
SIDES = ("encoder", "decoder")
EMBEDDING = "shared/embedding"
LOGITS = "decoder/logits/kernel"
GLOBAL_STEP = "global_step"
# The FFN activations every engine computes (each may be "gated-" too).
ACTIVATIONS = ("relu", "gelu", "swish", "sigmoid", "tanh", "linear")


def padded_vocab_size(vocab_size: int, vocab_divisor: int) -> int:
    """The model's vocabulary dimension: mesh-tf pads it to a multiple of vocab_divisor."""
    return -(-vocab_size // vocab_divisor) * vocab_divisor


def is_gated(ffn_activation: str) -> bool:
    """'gated-gelu' (T5 v1.1): two input projections, the activation of one times the other."""
    return ffn_activation.startswith("gated-")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What decides the weights' names and shapes."""

    d_model: int
    d_ff: int
    num_heads: int
    d_kv: int
    num_encoder_layers: int
    num_decoder_layers: int
    vocab_rows: int
    relative_attention_num_buckets: int = 32
    gated: bool = False
    tie_embeddings: bool = True
    norm_scope: str = "layer_norm"

    @classmethod
    def from_hparams(cls, hp: HParams, vocab_size: int) -> Architecture:
        if hp.norm_scope not in NORM_SCOPES:
            raise UserError(f"hparam norm_scope={hp.norm_scope!r}: use one of {', '.join(NORM_SCOPES)}")
        return cls(
            d_model=hp.d_model,
            d_ff=hp.d_ff,
            num_heads=hp.num_heads,
            d_kv=hp.d_kv,
            num_encoder_layers=hp.num_encoder_layers,
            num_decoder_layers=hp.num_decoder_layers,
            vocab_rows=padded_vocab_size(vocab_size, hp.vocab_divisor),
            relative_attention_num_buckets=hp.relative_attention_num_buckets,
            gated=is_gated(hp.ffn_activation),
            tie_embeddings=bool(hp.tie_embeddings),
            norm_scope=hp.norm_scope,
        )

    @property
    def inner(self) -> int:
        return self.num_heads * self.d_kv

    def layers(self, side: str) -> int:
        return self.num_encoder_layers if side == "encoder" else self.num_decoder_layers


def sublayers(side: str) -> tuple[str, ...]:
    """A block's sublayers in order: self-attention, (decoder) encoder-decoder attention, FFN."""
    return ("self", "cross", "ffn") if side == "decoder" else ("self", "ffn")


def _scope(side: str, block: int, sublayer: str) -> str:
    return f"{side}/block_{block:03d}/layer_{sublayers(side).index(sublayer):03d}"


def norm(arch: Architecture, side: str, block: int, sublayer: str) -> str:
    """The scale of the norm in front of a sublayer."""
    return f"{_scope(side, block, sublayer)}/{arch.norm_scope}/scale"


def final_norm(arch: Architecture, side: str) -> str:
    """The scale of a stack's last norm."""
    return f"{side}/{'final_layer_norm' if arch.norm_scope == 'layer_norm' else 'rms_norm'}/scale"


def attention(side: str, block: int, sublayer: str) -> str:
    """Scope of an attention sublayer's q, k, v, o kernels."""
    return f"{_scope(side, block, sublayer)}/{'SelfAttention' if sublayer == 'self' else 'EncDecAttention'}"


def relative_bias(side: str) -> str:
    """Each stack's one relative-position bias ("bias_shared"), held by its first layer."""
    return f"{attention(side, 0, 'self')}/relative_attention_bias"


def ffn(arch: Architecture, side: str, block: int) -> dict[str, str]:
    """The FFN's kernels by role: 'wi' (or 'wi_0' and 'wi_1' when gated) and 'wo'."""
    scope = f"{_scope(side, block, 'ffn')}/DenseReluDense"
    inputs = ("wi_0", "wi_1") if arch.gated else ("wi",)
    return {role: f"{scope}/{role}/kernel" for role in (*inputs, "wo")}


def mesh_shapes(arch: Architecture) -> dict[str, list[int]]:
    """Every weight of the model (no optimizer slots, no global step) with its shape."""
    d, inner = arch.d_model, arch.inner
    out: dict[str, list[int]] = {EMBEDDING: [arch.vocab_rows, d]}
    for side in SIDES:
        out[relative_bias(side)] = [arch.num_heads, arch.relative_attention_num_buckets]
        for block in range(arch.layers(side)):
            for sublayer in sublayers(side):
                out[norm(arch, side, block, sublayer)] = [d]
                if sublayer == "ffn":
                    for role, name in ffn(arch, side, block).items():
                        out[name] = [arch.d_ff, d] if role == "wo" else [d, arch.d_ff]
                else:
                    scope = attention(side, block, sublayer)
                    out.update({f"{scope}/{w}": [d, inner] for w in "qkv"})
                    out[f"{scope}/o"] = [inner, d]
        out[final_norm(arch, side)] = [d]
    if not arch.tie_embeddings:
        out[LOGITS] = [d, arch.vocab_rows]
    return out


@dataclasses.dataclass(frozen=True)
class HfName:
    """Where a mesh weight lives in a Hugging Face T5 state dict, and whether it is transposed there."""

    name: str
    transposed: bool


def _hf_sublayer(side: str, block: int, sublayer: str) -> str:
    return f"{side}.block.{block}.layer.{sublayers(side).index(sublayer)}"


def hf_names(arch: Architecture) -> dict[str, HfName]:
    """mesh name -> its Hugging Face T5 name, for every weight of mesh_shapes(arch)."""
    out = {EMBEDDING: HfName("shared.weight", False)}
    for side in SIDES:
        out[relative_bias(side)] = HfName(
            f"{_hf_sublayer(side, 0, 'self')}.SelfAttention.relative_attention_bias.weight", True
        )
        for block in range(arch.layers(side)):
            for sublayer in sublayers(side):
                prefix = _hf_sublayer(side, block, sublayer)
                out[norm(arch, side, block, sublayer)] = HfName(f"{prefix}.layer_norm.weight", False)
                if sublayer == "ffn":
                    for role, name in ffn(arch, side, block).items():
                        out[name] = HfName(f"{prefix}.DenseReluDense.{role}.weight", True)
                else:
                    module = "SelfAttention" if sublayer == "self" else "EncDecAttention"
                    for w in "qkvo":
                        out[f"{attention(side, block, sublayer)}/{w}"] = HfName(f"{prefix}.{module}.{w}.weight", True)
        out[final_norm(arch, side)] = HfName(f"{side}.final_layer_norm.weight", False)
    if not arch.tie_embeddings:
        out[LOGITS] = HfName("lm_head.weight", True)
    return out


def renamed_from_other_norm_scope(arch: Architecture) -> dict[str, str]:
    """{name under the other norm_scope: name in `arch`} for every norm scale: how a
    checkpoint of the same model written with the other names (T5 v1.0 against v1.1 and
    earlier t2tcli runs) maps onto this one."""
    other = dataclasses.replace(arch, norm_scope=NORM_SCOPES[1 - NORM_SCOPES.index(arch.norm_scope)])
    out = {final_norm(other, side): final_norm(arch, side) for side in SIDES}
    for side, block, sublayer in _all_sublayers(arch):
        out[norm(other, side, block, sublayer)] = norm(arch, side, block, sublayer)
    return out


def _all_sublayers(arch: Architecture) -> Iterator[tuple[str, int, str]]:
    for side in SIDES:
        for block in range(arch.layers(side)):
            for sublayer in sublayers(side):
                yield side, block, sublayer
