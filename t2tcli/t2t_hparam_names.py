"""tensor2tensor's hparam names in terms of this toolkit's, for `--hparams` and for T2T sets.

A T2T user's scripts say `--hparams=hidden_size=64,num_hidden_layers=2`; each such name
stands for one or more hparams of the mesh-tf Transformer here. Names T2T has but this
model has no counterpart for are refused by name, so nothing is silently dropped.
Imports: nothing of t2tcli.
"""

from __future__ import annotations

# T2T name -> the hparams it sets here (one value to each).
RENAMED: dict[str, tuple[str, ...]] = {
    "hidden_size": ("d_model",),
    "filter_size": ("d_ff",),
    "num_hidden_layers": ("num_encoder_layers", "num_decoder_layers"),
    "layer_prepostprocess_dropout": ("dropout_rate",),
    "learning_rate_warmup_steps": ("warmup_steps",),
    "max_length": ("inputs_length", "targets_length"),
    "max_input_seq_length": ("inputs_length",),
    "max_target_seq_length": ("targets_length",),
    "optimizer_adam_beta1": ("adam_beta1",),
    "optimizer_adam_beta2": ("adam_beta2",),
    "optimizer_adam_epsilon": ("adam_epsilon",),
    "shared_embedding_and_softmax_weights": ("tie_embeddings",),
}

# T2T names whose meaning the model here has built in or lacks: what to use instead.
NO_COUNTERPART: dict[str, str] = {
    "attention_dropout": "dropout_rate (T2T's layer_prepostprocess_dropout) covers every sublayer",
    "relu_dropout": "dropout_rate (T2T's layer_prepostprocess_dropout) covers every sublayer",
    "learning_rate_constant": "learning_rate is the peak rate here (see --hparams_help)",
    "learning_rate_schedule": "learning_rate_schedule takes constant, rsqrt_decay or linear_decay here",
    "learning_rate_decay_scheme": "learning_rate_schedule takes constant, rsqrt_decay or linear_decay here",
    "clip_grad_norm": "the optimizers here do not clip gradients",
    "initializer": "the model's initializers are fixed",
    "initializer_gain": "the model's initializers are fixed",
    "norm_type": "the model normalises with layer norm (T5's) only",
    "layer_preprocess_sequence": "the model normalises before each sublayer (T5's layout)",
    "layer_postprocess_sequence": "the model normalises before each sublayer (T5's layout)",
    "pos": "the model uses relative position buckets (relative_attention_num_buckets)",
    "ffn_layer": "ffn_activation picks the feed-forward layer's activation",
    "symbol_modality_num_shards": "the embedding is one variable, laid out over the mesh by layout",
}


def counterparts(name: str) -> tuple[str, ...] | None:
    """The hparams a T2T name sets here, or None when it is not one of T2T's renamed names."""
    return RENAMED.get(name)


def refusal(name: str) -> str | None:
    """Why a T2T hparam has no counterpart here, or None when it is not one of those."""
    why = NO_COUNTERPART.get(name)
    return f"hparam '{name}' is tensor2tensor's and has no counterpart here: {why}" if why else None


def heads_split(d_model: int, num_heads: int) -> int:
    """d_kv as T2T derives it: the model width shared among the heads (must divide evenly)."""
    if num_heads <= 0 or d_model % num_heads:
        raise ValueError(f"hidden_size {d_model} is not a multiple of num_heads {num_heads}")
    return d_model // num_heads
