"""The one place where hparams become mesh-tensorflow gin bindings.

mesh-tensorflow's `transformer` package reads its architecture from gin. Gin is global
state, so `apply()` clears it and installs the bindings derived from one HParams right
before a graph is built; nothing else in t2tcli touches gin. The bindings reproduce
T5 v1.0's `bi_v1.gin` layout (pre-norm RMS layers, relative attention biases, relu FFN,
shared embedding and softmax) so variable names match the released T5 checkpoints.
"""

from __future__ import annotations

import gin

from t2tcli import compat  # noqa: F401  (shims before mesh_tensorflow)
from t2tcli.hparams import HParams
from t2tcli.mesh import spec_from_hparams

_LAYERS = "mesh_tensorflow.transformer.transformer_layers"


def gathers_embeddings(hp: HParams, use_tpu: bool) -> bool:
    """Whether ids are embedded by row lookup (t2tcli.embedding) rather than mesh-tf's
    one-hot einsum: off TPU, when the mesh splits neither the ids nor the vocabulary."""
    spec = spec_from_hparams(hp)
    return not use_tpu and all(spec.split_of(d) == 1 for d in ("batch", "length", "vocab"))


def bindings(hp: HParams, use_tpu: bool = False) -> list[str]:
    """The gin bindings (one string each) that configure a Bitransformer for `hp`."""
    out = [
        f"encoder/make_layer_stack.layers = [@{_LAYERS}.SelfAttention, @{_LAYERS}.DenseReluDense]",
        f"decoder/make_layer_stack.layers = "
        f"[@{_LAYERS}.SelfAttention, @{_LAYERS}.EncDecAttention, @{_LAYERS}.DenseReluDense]",
        f"encoder/make_layer_stack.num_layers = {hp.num_encoder_layers}",
        f"decoder/make_layer_stack.num_layers = {hp.num_decoder_layers}",
        "make_layer_stack.block_scope = True",
        "LayerStack.sublayers_initial = [@transformer.sublayer_dropout]",
        "LayerStack.sublayers_per_layer = [@transformer.sublayer_rms_norm, @transformer.sublayer_call_layer, "
        "@transformer.sublayer_dropout, @transformer.sublayer_residual]",
        "LayerStack.sublayers_final = [@transformer.sublayer_rms_norm, @transformer.sublayer_dropout]",
        f"sublayer_dropout.dropout_rate = {hp.dropout_rate!r}",
        f"Unitransformer.d_model = {hp.d_model}",
        "Unitransformer.shared_embedding_and_softmax_weights = True",
        "Unitransformer.positional_embedding = False",
        "Unitransformer.max_length = 512",
        f"Unitransformer.vocab_divisor = {hp.vocab_divisor}",
        f"Unitransformer.z_loss = {hp.z_loss!r}",
        f"decoder/Unitransformer.label_smoothing = {hp.label_smoothing!r}",
        "Bitransformer.shared_embedding = True",
        f"SelfAttention.num_heads = {hp.num_heads}",
        f"SelfAttention.key_value_size = {hp.d_kv}",
        f"SelfAttention.dropout_rate = {hp.dropout_rate!r}",
        "SelfAttention.relative_attention_type = 'bias_shared'",
        f"SelfAttention.relative_attention_num_buckets = {hp.relative_attention_num_buckets}",
        f"DenseReluDense.hidden_size = {hp.d_ff}",
        f"DenseReluDense.dropout_rate = {hp.dropout_rate!r}",
        f"DenseReluDense.activation = {hp.ffn_activation!r}",
    ]
    if gathers_embeddings(hp, use_tpu):
        out.append("get_vocab_embedding_cls.cls = @t2tcli.GatherVocabEmbedding")
    return out


def apply(hp: HParams, use_tpu: bool = False) -> None:
    """Replaces the global gin config with the bindings of `hp`."""
    import mesh_tensorflow.transformer.transformer  # noqa: F401  (registers configurables)
    import mesh_tensorflow.transformer.transformer_layers  # noqa: F401

    from t2tcli import embedding  # noqa: F401  (registers t2tcli.GatherVocabEmbedding)

    with gin.unlock_config():
        gin.clear_config(clear_constants=True)
        gin.parse_config(bindings(hp, use_tpu))
