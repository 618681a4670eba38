"""A tensor2tensor hparams object -> the mesh-tf Transformer's hparams of the same shape.

Width, depth, heads, dropout, label smoothing, lengths, the optimizer and the learning
rate curve carry over; T2T's batch_size counts tokens, and so does the converted set
(batch_size_unit=tokens: tokens / the longest sequence length = sequences per batch).
What the model here does not read is named in one log line, never silently dropped.
"""

from __future__ import annotations

from typing import Any

from absl import logging

from t2tcli import t2t_hparam_names
from t2tcli.errors import UserError
from t2tcli.hparams import HParams, defaults
from t2tcli.t2t_compat.t2t_hparams import T2THParams

# T2T leaves max_length 0 to mean "as long as a batch"; sequences here need a length.
DEFAULT_LENGTH = 256
# Names the conversion reads (directly or through t2t_hparam_names.RENAMED).
_READ = {
    "hidden_size",
    "filter_size",
    "num_heads",
    "num_hidden_layers",
    "num_encoder_layers",
    "num_decoder_layers",
    "attention_key_channels",
    "layer_prepostprocess_dropout",
    "label_smoothing",
    "batch_size",
    "use_fixed_batch_size",
    "max_length",
    "max_input_seq_length",
    "max_target_seq_length",
    "optimizer",
    "optimizer_adam_beta1",
    "optimizer_adam_beta2",
    "optimizer_adam_epsilon",
    "weight_decay",
    "shared_embedding_and_softmax_weights",
    "learning_rate",
    "learning_rate_constant",
    "learning_rate_schedule",
    "learning_rate_decay_scheme",
    "learning_rate_warmup_steps",
    "ffn_layer",
}


def _learning_rate(t2t: T2THParams, d_model: int) -> dict[str, Any]:
    """T2T's schedule as a peak rate, a warmup and a decay; the same curve for T2T's sets.

    constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size peaks at
    constant / sqrt(warmup) / sqrt(width) and then falls as 1/sqrt(step), as rsqrt_decay does here.
    """
    warmup = int(t2t.get("learning_rate_warmup_steps", 0) or 0)
    schedule = str(t2t.get("learning_rate_schedule", "legacy"))
    if schedule == "legacy":
        rate = float(t2t.get("learning_rate", 0.1))
        if t2t.get("learning_rate_decay_scheme", "none") == "noam":
            peak = rate * 5000.0 * d_model**-0.5 * max(warmup, 1) ** -0.5
            return dict(learning_rate=peak, learning_rate_schedule="rsqrt_decay", warmup_steps=warmup)
        return dict(learning_rate=rate, learning_rate_schedule="constant", warmup_steps=warmup)
    factors = {f.strip() for f in schedule.split("*") if f.strip()}
    peak = float(t2t.get("learning_rate_constant", 1.0)) if "constant" in factors else 1.0
    if "rsqrt_hidden_size" in factors:
        peak *= d_model**-0.5
    decay = "constant"
    if "rsqrt_decay" in factors:
        peak *= max(warmup, 1) ** -0.5
        decay = "rsqrt_decay"
    elif "linear_decay" in factors:
        decay = "linear_decay"
    return dict(
        learning_rate=peak, learning_rate_schedule=decay, warmup_steps=warmup if "linear_warmup" in factors else 0
    )


def _optimizer(t2t: T2THParams) -> dict[str, Any]:
    name = str(t2t.get("optimizer", "adam")).lower()
    if name == "adafactor":
        return dict(optimizer="adafactor")
    if "adam" not in name:
        logging.info("tensor2tensor optimizer '%s' has no counterpart here: training with Adam", name)
    out: dict[str, Any] = dict(optimizer="adam")
    for t2t_name in ("optimizer_adam_beta1", "optimizer_adam_beta2", "optimizer_adam_epsilon"):
        if t2t_name in t2t:
            out[t2t_hparam_names.RENAMED[t2t_name][0]] = float(t2t.get(t2t_name))
    return out


def _shape(t2t: T2THParams, set_name: str) -> dict[str, Any]:
    d_model = int(t2t.hidden_size)
    num_heads = int(t2t.get("num_heads", 8))
    layers = int(t2t.get("num_hidden_layers", 6))
    key_channels = int(t2t.get("attention_key_channels", 0) or 0)
    try:
        d_kv = t2t_hparam_names.heads_split(key_channels or d_model, num_heads)
    except ValueError as exc:
        raise UserError(f"hparams set '{set_name}': {exc}") from None
    ffn = str(t2t.get("ffn_layer", "dense_relu_dense"))
    if ffn != "dense_relu_dense":
        raise UserError(
            f"hparams set '{set_name}': ffn_layer='{ffn}' has no counterpart here; "
            "the Transformer's feed-forward layer is dense_relu_dense (ffn_activation picks its activation)"
        )
    shape: dict[str, Any] = dict(
        d_model=d_model,
        num_heads=num_heads,
        d_kv=d_kv,
        num_encoder_layers=int(t2t.get("num_encoder_layers", 0) or layers),
        num_decoder_layers=int(t2t.get("num_decoder_layers", 0) or layers),
        ffn_activation="relu",
    )
    if "filter_size" in t2t:
        shape["d_ff"] = int(t2t.filter_size)
    return shape


def _lengths_and_batch(t2t: T2THParams) -> dict[str, Any]:
    length = int(t2t.get("max_length", 0) or 0) or DEFAULT_LENGTH
    out: dict[str, Any] = dict(
        inputs_length=int(t2t.get("max_input_seq_length", 0) or 0) or length,
        targets_length=int(t2t.get("max_target_seq_length", 0) or 0) or length,
        batch_size=int(t2t.get("batch_size", 4096)),
        batch_size_unit="sequences" if t2t.get("use_fixed_batch_size", False) else "tokens",
    )
    return out


def convert(t2t: T2THParams, set_name: str) -> HParams:
    """The mesh-tf Transformer's hparams for T2T set `set_name`, said in one log line."""
    if "hidden_size" not in t2t:
        raise UserError(f"hparams set '{set_name}' has no hidden_size; start it from transformer.transformer_base()")
    hp = defaults()
    values: dict[str, Any] = _shape(t2t, set_name)
    values.update(_lengths_and_batch(t2t))
    values.update(_learning_rate(t2t, values["d_model"]))
    values.update(_optimizer(t2t))
    values["dropout_rate"] = float(t2t.get("layer_prepostprocess_dropout", 0.1))
    values["label_smoothing"] = float(t2t.get("label_smoothing", 0.0))
    values["weight_decay"] = float(t2t.get("weight_decay", 0.0))
    values["tie_embeddings"] = bool(t2t.get("shared_embedding_and_softmax_weights", True))
    try:
        hp.override_from_dict(values)
    except UserError as exc:
        raise UserError(f"hparams set '{set_name}': {exc}") from None
    hp.share_width_among_heads()
    logging.info("%s", describe(set_name, hp))
    unread = sorted(n for n in t2t.user_set() if n not in _READ)
    if unread:
        logging.info(
            "hparams set '%s': not read by the mesh-tf Transformer: %s",
            set_name,
            ", ".join(f"{n}={t2t.get(n)!r}" for n in unread),
        )
    return hp


def describe(set_name: str, hp: HParams) -> str:
    """The one line saying which architecture a T2T set runs as, and what its batch is."""
    line = (
        f"hparams set '{set_name}' is tensor2tensor's: it runs the mesh-tf Transformer with d_model {hp.d_model}, "
        f"d_ff {hp.d_ff}, {hp.num_heads} heads, {hp.num_encoder_layers}+{hp.num_decoder_layers} layers "
        "(T5's layout: pre-norm, relative positions)"
    )
    if hp.batch_size_unit == "tokens":
        longest = max(int(hp.inputs_length), int(hp.targets_length))
        line += (
            f"; batch_size {hp.batch_size} counts tokens, as in tensor2tensor: "
            f"{max(1, int(hp.batch_size) // longest)} sequences of up to {longest} tokens per batch"
        )
    return line
