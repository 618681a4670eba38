"""The one place where hparams become mesh-tensorflow gin bindings.

mesh-tensorflow's `transformer` package reads its architecture from gin. Gin is global
state, so `apply()` clears it and installs the bindings derived from one HParams right
before a graph is built; nothing else in t2tcli touches gin. The bindings reproduce
T5's layouts (pre-norm RMS layers, relative attention biases; v1.0's relu FFN and
embedding shared with the softmax, or v1.1's gated FFN and separate output projection)
so variable names match the released T5 checkpoints (see t2tcli.model.weight_names).
"""

from __future__ import annotations

import gin

from t2tcli import compat  # noqa: F401  (shims before mesh_tensorflow)
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.model.config import ModelConfig
from t2tcli.model.weight_names import is_gated

_LAYERS = "mesh_tensorflow.transformer.transformer_layers"


def gathers_embeddings(config: ModelConfig) -> bool:
    """Whether ids are embedded by row lookup (t2tcli.model.embedding) rather than mesh-tf's
    one-hot einsum: off TPU, when the mesh splits neither the ids nor the vocabulary."""
    return not config.use_tpu and all(config.mesh.split_of(d) == 1 for d in ("batch", "length", "vocab"))


def fuses_loss(config: ModelConfig) -> bool:
    """Whether training's loss is t2tcli.model.token_loss's fused float32 pass rather than
    mesh-tf's element-wise ops: off TPU, when the mesh does not split the vocabulary."""
    return not config.use_tpu and config.mesh.split_of("vocab") == 1


def fuses_norm(config: ModelConfig) -> bool:
    """Whether the RMS norms are t2tcli.model.rms_norm's fused passes rather than
    mesh-tf's element-wise ops: off TPU, when the mesh splits neither d_model nor length."""
    return not config.use_tpu and config.mesh.split_of("d_model") == 1 and config.mesh.split_of("length") == 1


def uses_xla(config: ModelConfig) -> bool:
    """Whether the model has XLA-compiled functions of its own: the fused loss, or the fused
    norms (in training graphs only)."""
    return fuses_loss(config) or fuses_norm(config)


def head_major(use_tpu: bool) -> bool:
    """Whether attention runs head-major (t2tcli.model.attention): off TPU, where layouts
    are the einsums' own."""
    return not use_tpu


# The widest attention kernel (heads x d_kv) whose products are joined: joining speeds
# up t5_small's 512-wide projections, but at t5_base's 768 the kernels one by one
# already run near the matmul peak and joining them costs time (`bench/projections.py`).
JOINED_PROJECTIONS_MAX_WIDTH = 512


def joins_projections(config: ModelConfig) -> bool:
    """Whether attention's projections of one input run as one product
    (t2tcli.model.projections): with head-major attention, for kernels up to
    JOINED_PROJECTIONS_MAX_WIDTH wide, when the mesh does not split the heads, along
    which the kernels are joined."""
    hp = config.hparams
    narrow = hp.num_heads * hp.d_kv <= JOINED_PROJECTIONS_MAX_WIDTH
    return head_major(config.use_tpu) and narrow and config.mesh.split_of("heads") == 1


def rounds_attention_logits(config: ModelConfig) -> bool:
    """Whether training takes head-major attention's logits from a bfloat16 product
    (t2tcli.model.attention.head_major_attention): with bfloat16 activations where the
    products are native, not computed in float32 (t2tcli.model.kernel_layout)."""
    native = not config.kernels.float32_einsums
    return head_major(config.use_tpu) and config.activation_dtype == "bfloat16" and native


def fuses_ffn_dropout(config: ModelConfig) -> bool:
    """Whether training's feed-forward layers apply ReLU and dropout in one fused pass each
    way (t2tcli.model.ffn_dropout): off TPU, for a plain ReLU FFN, with bfloat16
    activations where the products are native, whose separate passes run on TensorFlow's
    slow bfloat16 element-wise kernels; not when the mesh splits the length, over which
    each slice broadcasts its dropout mask."""
    native = not config.kernels.float32_einsums
    relu = config.hparams.get("ffn_activation") == "relu"
    whole_length = config.mesh.split_of("length") == 1
    return not config.use_tpu and relu and config.activation_dtype == "bfloat16" and native and whole_length


def _literal(hp: HParams, key: str, kind: type) -> str:
    """The hparam as a Python literal gin parses back to the same value; anything but a
    value of `kind` is refused, so no text from a model_dir can add a binding or an import."""
    value = hp.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not kind:
        raise UserError(f"hparam '{key}': expected {kind.__name__}, got {type(value).__name__} {value!r:.80}")
    return repr(value)


def _quoted(value: str | list[str]) -> str:
    """A string (or list of strings) as a quoted literal on one line."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in items):
        raise UserError(f"expected text for a gin string, got {value!r:.80}")
    return repr(value)


def bindings(config: ModelConfig) -> list[str]:
    """The gin bindings (one string each) that configure a Bitransformer for `config`."""
    hp = config.hparams
    # T5 v1.0's norm variables are .../layer_norm/scale and final_layer_norm/scale (mesh-tf's
    # "legacy" sublayers); v1.1's are .../rms_norm/scale. The computation is the same.
    if hp.norm_scope == "layer_norm":
        norm, final_norm = "legacy_rms_norm", "legacy_final_rms_norm"
    else:
        norm = final_norm = "rms_norm"
    # A gated FFN (T5 v1.1's gated-gelu) multiplies act(x wi_0) by the linear x wi_1.
    activation = (
        [hp.ffn_activation.removeprefix("gated-"), "linear"] if is_gated(hp.ffn_activation) else hp.ffn_activation
    )
    if head_major(config.use_tpu):
        self_attention, enc_dec_attention = "t2tcli.HeadMajorSelfAttention", "t2tcli.HeadMajorEncDecAttention"
    else:
        self_attention, enc_dec_attention = f"{_LAYERS}.SelfAttention", f"{_LAYERS}.EncDecAttention"
    ffn = "t2tcli.FusedDenseReluDense" if fuses_ffn_dropout(config) else f"{_LAYERS}.DenseReluDense"
    out = [
        f"encoder/make_layer_stack.layers = [@{self_attention}, @{ffn}]",
        f"decoder/make_layer_stack.layers = [@{self_attention}, @{enc_dec_attention}, @{ffn}]",
        f"encoder/make_layer_stack.num_layers = {_literal(hp, 'num_encoder_layers', int)}",
        f"decoder/make_layer_stack.num_layers = {_literal(hp, 'num_decoder_layers', int)}",
        "make_layer_stack.block_scope = True",
        "LayerStack.sublayers_initial = [@transformer.sublayer_dropout]",
        f"sublayer_dropout.dropout_rate = {_literal(hp, 'dropout_rate', float)}",
        f"Unitransformer.d_model = {_literal(hp, 'd_model', int)}",
        f"Unitransformer.shared_embedding_and_softmax_weights = {_literal(hp, 'tie_embeddings', bool)}",
        "Unitransformer.positional_embedding = False",
        "Unitransformer.max_length = 512",
        f"Unitransformer.vocab_divisor = {_literal(hp, 'vocab_divisor', int)}",
        f"Unitransformer.z_loss = {_literal(hp, 'z_loss', float)}",
        f"decoder/Unitransformer.label_smoothing = {_literal(hp, 'label_smoothing', float)}",
        "Bitransformer.shared_embedding = True",
        f"SelfAttention.num_heads = {_literal(hp, 'num_heads', int)}",
        f"SelfAttention.key_value_size = {_literal(hp, 'd_kv', int)}",
        f"SelfAttention.dropout_rate = {_literal(hp, 'dropout_rate', float)}",
        "SelfAttention.relative_attention_type = 'bias_shared'",
        f"SelfAttention.relative_attention_num_buckets = {_literal(hp, 'relative_attention_num_buckets', int)}",
        f"DenseReluDense.hidden_size = {_literal(hp, 'd_ff', int)}",
        f"DenseReluDense.dropout_rate = {_literal(hp, 'dropout_rate', float)}",
        f"DenseReluDense.activation = {_quoted(activation)}",
    ]
    fused = fuses_norm(config)
    norms = "t2tcli.fused_" if fused else "transformer.sublayer_"
    # Fused, the norm zeroes padding as it writes, in place of the layer call's own pass.
    norm_and_layer = (
        f"@t2tcli.fused_{norm}_and_layer"
        if fused
        else f"@transformer.sublayer_{norm}, @transformer.sublayer_call_layer"
    )
    out.append(
        f"LayerStack.sublayers_per_layer = [{norm_and_layer}, "
        "@transformer.sublayer_dropout, @transformer.sublayer_residual]"
    )
    out.append(f"LayerStack.sublayers_final = [@{norms}{final_norm}, @transformer.sublayer_dropout]")
    if joins_projections(config):
        out.append("t2tcli.HeadMajorSelfAttention.joined_projections = True")
        out.append("t2tcli.HeadMajorEncDecAttention.joined_projections = True")
    if rounds_attention_logits(config):
        out.append("t2tcli.HeadMajorSelfAttention.rounded_logits_product = True")
        out.append("t2tcli.HeadMajorEncDecAttention.rounded_logits_product = True")
    if gathers_embeddings(config):
        out.append("get_vocab_embedding_cls.cls = @t2tcli.GatherVocabEmbedding")
    if fuses_loss(config):
        out.append("decoder/Unitransformer.loss_fn = @t2tcli.fused_loss")
    return out


def apply(config: ModelConfig) -> None:
    """Replaces the global gin config with the bindings of `config`."""
    import mesh_tensorflow.transformer.transformer  # noqa: F401  (registers configurables)
    import mesh_tensorflow.transformer.transformer_layers  # noqa: F401

    from t2tcli.model import attention, embedding, ffn_dropout, rms_norm, token_loss  # noqa: F401  (register t2tcli's configurables)

    with gin.unlock_config():
        gin.clear_config(clear_constants=True)
        gin.parse_config(bindings(config))
