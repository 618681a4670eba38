"""HParams: a small typed container for model and training settings.

Overrides arrive as strings (`--hparams="a=1,layout=batch:batch;d_ff:model"`), so every
value is typed by the default it replaces; a typo in a key or a value of the wrong type
fails loudly instead of training the wrong model for hours.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from absl import logging

from t2tcli import t2t_hparam_names
from t2tcli.errors import UserError, did_you_mean

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _split_overrides(text: str) -> list[str]:
    """Splits 'a=1,b=[1,2],mesh_shape=model:2,batch:2' into one 'key=value' per hparam.

    Commas inside brackets never split, and a piece with no '=' belongs to the value
    before it, so comma-separated values such as mesh shapes need no quoting.
    """
    pieces: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += ch
    pieces.append(current)
    merged: list[str] = []
    for piece in pieces:
        if not piece.strip():
            continue
        if "=" not in piece.split("[", 1)[0] and merged:
            merged[-1] += "," + piece
        else:
            merged.append(piece)
    return merged


def _parse_scalar(key: str, raw: str, kind: type) -> Any:
    text = raw.strip()
    try:
        if kind is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise UserError(f"hparam '{key}': expected {kind.__name__}, got '{raw}'") from None
    return text


def _infer(raw: str) -> Any:
    """Types a value for an hparam whose default is None (or a new hparam)."""
    text = raw.strip()
    if text.startswith("[") and text.endswith("]"):
        return [_infer(p) for p in text[1:-1].split(",") if p.strip()]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "none":
        return None
    return text


class HParams:
    """Named, typed settings with string overrides and a JSON round trip."""

    # True for a set from tensor2tensor, where the heads share the model width: there an
    # override of num_heads or d_model (hidden_size) keeps d_kv = d_model / num_heads.
    heads_share_width = False

    def __init__(self, **values: Any) -> None:
        for key, value in values.items():
            self.add_hparam(key, value)

    @property
    def _values(self) -> dict[str, Any]:
        # The values live in the instance's own namespace, so that reading `hp.d_model` is a
        # plain attribute read rather than a call; every write still goes through set_hparam.
        return self.__dict__

    def add_hparam(self, key: str, value: Any) -> None:
        if key in self._values:
            raise UserError(f"hparam '{key}' already exists")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UserError(f"hparam name '{key}' is not a valid identifier")
        if hasattr(type(self), key):
            raise UserError(f"hparam name '{key}' is reserved (a method of HParams)")
        self._values[key] = value

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"no hparam '{key}'{did_you_mean(key, self._values)}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self.set_hparam(key, value)

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HParams) and self._values == other._values

    def __repr__(self) -> str:
        return f"HParams({', '.join(f'{k}={v!r}' for k, v in sorted(self._values.items()))})"

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def values(self) -> dict[str, Any]:
        return dict(self._values)

    def copy(self) -> HParams:
        return HParams(**json.loads(json.dumps(self._values)))

    def set_hparam(self, key: str, value: Any) -> None:
        """Sets an existing hparam, checking the type against its current value."""
        if key not in self._values:
            raise UserError(f"unknown hparam '{key}'{did_you_mean(key, self._values)}")
        current = self._values[key]
        if current is not None and value is not None:
            value = self._coerce(key, value, current)
        self._values[key] = value

    def _coerce(self, key: str, value: Any, current: Any) -> Any:
        if isinstance(current, bool):
            if isinstance(value, bool):
                return value
        elif isinstance(current, int):
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif isinstance(current, float):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif isinstance(current, str):
            if isinstance(value, str):
                return value
        elif isinstance(current, (list, tuple)):
            if isinstance(value, (list, tuple)):
                return list(value)
        else:
            return value
        raise UserError(f"hparam '{key}': expected {type(current).__name__}, got {type(value).__name__} {value!r}")

    def parse(self, overrides: str) -> HParams:
        """Applies 'a=1,b=0.5,c=true,d=[1,2],e=text' in place; returns self.

        tensor2tensor's names (hidden_size, filter_size, ...) set their counterparts here,
        so a T2T user's `--hparams` works as written (t2tcli.t2t_hparam_names).
        """
        given: list[tuple[str, str]] = []
        for piece in _split_overrides(overrides or ""):
            key, sep, raw = piece.partition("=")
            key = key.strip()
            if not sep or not key:
                raise UserError(f"--hparams: '{piece}' is not of the form name=value")
            given.append((key, raw))
        renamed: dict[str, tuple[str, ...]] = {}
        for key, raw in given:
            targets = (key,) if key in self._values else self._t2t_counterparts(key)
            if targets != (key,):
                renamed[key] = targets
            for target in targets:
                self._values[target] = self._parse_value(key, raw, self._values[target])
        if "batch_size" in dict(given) and self._values.get("batch_size_unit") == "tokens":
            longest = max(int(self._values.get("inputs_length", 1)), int(self._values.get("targets_length", 1)), 1)
            logging.info(
                "--hparams: batch_size %s counts tokens (batch_size_unit=tokens): %d sequences of up to %d tokens",
                self._values["batch_size"],
                max(1, int(self._values["batch_size"]) // longest),
                longest,
            )
        self._follow_t2t_width({key for key, _ in given})
        if renamed:
            logging.info(
                "--hparams: tensor2tensor's %s", ", ".join(f"{k} sets {' and '.join(v)}" for k, v in renamed.items())
            )
        return self

    def _t2t_counterparts(self, key: str) -> tuple[str, ...]:
        """The hparams a tensor2tensor name sets here, or the one-line error for an unknown name."""
        targets = t2t_hparam_names.counterparts(key)
        if targets and all(t in self._values for t in targets):
            return targets
        raise UserError(t2t_hparam_names.refusal(key) or f"unknown hparam '{key}'{did_you_mean(key, self._values)}")

    def share_width_among_heads(self) -> HParams:
        """Marks a set from tensor2tensor (see `heads_share_width`); returns self. The mark
        is the instance's class, since its own namespace holds only hparams."""
        object.__setattr__(self, "__class__", _WidthSharedAmongHeads)
        return self

    def _follow_t2t_width(self, given: set[str]) -> None:
        """T2T's hidden_size is shared among the heads: d_kv follows it unless given too."""
        widths = {"hidden_size", "d_model", "num_heads"} if self.heads_share_width else {"hidden_size"}
        if not widths & given or "d_kv" in given or not {"d_model", "d_kv", "num_heads"} <= set(self._values):
            return
        try:
            self._values["d_kv"] = t2t_hparam_names.heads_split(int(self.d_model), int(self.num_heads))
        except ValueError as exc:
            raise UserError(f"--hparams: {exc}") from None

    def _parse_value(self, key: str, raw: str, current: Any) -> Any:
        if current is None:
            return _infer(raw)
        if isinstance(current, (list, tuple)):
            text = raw.strip()
            if not (text.startswith("[") and text.endswith("]")):
                raise UserError(f"hparam '{key}': expected a list like [1,2], got '{raw}'")
            items = [p for p in text[1:-1].split(",") if p.strip()]
            kind = type(current[0]) if current else None
            return [_parse_scalar(key, p, kind) if kind else _infer(p) for p in items]
        return _parse_scalar(key, raw, type(current))

    def override_from_dict(self, values: dict[str, Any]) -> HParams:
        for key, value in values.items():
            self.set_hparam(key, value)
        return self

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self._values, indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HParams:
        return cls(**json.loads(text))


# Every hparam the model, the input pipeline and the trainer read: its default (the values
# of `mtf_transformer_base`, which every built-in set changes only where it differs) and
# what it means (--hparams_help). A value read from a model_dir is typed by its default.
SCHEMA: dict[str, tuple[Any, str]] = {
    # Model dimensions.
    "d_model": (512, "model (embedding) size"),
    "d_ff": (2048, "feed-forward hidden size"),
    "num_heads": (8, "attention heads"),
    "d_kv": (64, "size of each attention head's keys and values"),
    "num_encoder_layers": (6, "encoder blocks"),
    "num_decoder_layers": (6, "decoder blocks"),
    "ffn_activation": ("relu", "relu, gelu, ... or gated-<one of them> (T5 v1.1: gated-gelu)"),
    "relative_attention_num_buckets": (32, "relative-position buckets of the attention bias"),
    "vocab_divisor": (128, "the vocabulary is padded to a multiple of this"),
    # T5 v1.0 computes logits with the embedding matrix; v1.1 has decoder/logits/kernel.
    "tie_embeddings": (True, "logits from the embedding matrix (T5 v1.0) or from decoder/logits/kernel (v1.1)"),
    # Norm variables: T5 v1.0's .../layer_norm/scale and final_layer_norm/scale, or
    # T5 v1.1's .../rms_norm/scale (see t2tcli.model.weight_names).
    "norm_scope": ("layer_norm", "norm variable names: layer_norm (T5 v1.0) or rms_norm (T5 v1.1)"),
    # Regularisation and loss.
    "dropout_rate": (0.1, "dropout of every sublayer, attention and FFN (training only)"),
    "label_smoothing": (0.0, "label smoothing of the training loss"),
    "z_loss": (1e-4, "weight of the log(Z)^2 term that keeps logits from drifting"),
    # Numerics: auto is bfloat16 where the hardware runs it natively (TPUs, GPUs of
    # compute capability 8.0+, CPUs with AMX or AVX512-BF16) and float32 elsewhere,
    # decided on the machine that runs the model (t2tcli.model.activation_dtype); variables stay float32.
    "activation_dtype": (
        "auto",
        "auto (bfloat16 where the hardware runs it natively, else float32), bfloat16 or float32",
    ),
    # Sequences and batches.
    "inputs_length": (128, "input tokens per example, EOS included; longer inputs are cut"),
    "targets_length": (128, "target tokens per example, EOS included; longer targets are cut"),
    "batch_size": (64, "sequences per step (or tokens, with batch_size_unit=tokens)"),
    "batch_size_unit": ("sequences", "sequences or tokens"),
    "pack": (True, "several examples per training row (segment ids keep them apart)"),
    # Optimizer and learning-rate schedule.
    "optimizer": ("adafactor", "adafactor or adam"),
    "learning_rate_schedule": ("rsqrt_decay", "constant, rsqrt_decay or linear_decay"),
    "learning_rate": (0.01, "peak (rsqrt_decay: during warmup) or constant learning rate"),
    "warmup_steps": (10000, "steps of linear warmup to learning_rate"),
    "decay_steps": (0, "linear_decay: steps to reach 0 (0: the run's --train_steps)"),
    "adam_beta1": (0.9, "Adam's first-moment decay"),
    "adam_beta2": (0.999, "Adam's second-moment decay"),
    "adam_epsilon": (1e-8, "Adam's epsilon"),
    "weight_decay": (0.0, "decoupled weight decay"),
    # Mesh: empty mesh_shape = one device.
    "mesh_shape": ("", "devices as named mesh dimensions, e.g. model:2,batch:4 ('' is one device)"),
    "layout": (
        "batch:batch;d_ff:model;heads:model;vocab:model;experts:batch",
        "tensor dimension -> mesh dimension, e.g. batch:batch;d_ff:model;heads:model",
    ),
    # Decoding (PREDICT mode).
    "beam_size": (1, "decoding: 1 greedy (or sampling), more for beam search"),
    "alpha": (0.6, "beam search length penalty: score / ((5 + length) / 6) ** alpha"),
    "temperature": (0.0, "decoding: 0 greedy, above 0 samples"),
    "top_k": (0, "decoding: sample among the k most likely tokens (0: all)"),
    "max_decode_length": (0, "decoding: most output tokens (0: targets_length)"),
}
DESCRIPTIONS = {key: described for key, (_, described) in SCHEMA.items()}


def defaults() -> HParams:
    """Every hparam with its default."""
    return HParams(**{key: default for key, (default, _) in SCHEMA.items()})


class _WidthSharedAmongHeads(HParams):
    """A set from tensor2tensor: an override of num_heads or d_model keeps d_kv = d_model / num_heads."""

    heads_share_width = True
