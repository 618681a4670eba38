"""Hugging Face T5 model directories: read as a mesh checkpoint, written from a model_dir.

Most pretrained T5s (T5, T5 v1.1, FLAN-T5, mT5) reach users as a directory holding
`config.json`, `model.safetensors` (or `pytorch_model.bin`) and `spiece.model`. Reading
one needs no torch: tensors come through the `safetensors` package as numpy arrays,
are renamed and transposed by `t2tcli.model.weight_names`, and are written as a TF checkpoint
named as t2t-train's. Writing one is the reverse, so `transformers`,
`T5Tokenizer` and CTranslate2's converter load what `t2t-export --export_format=hf`
writes.
"""

from __future__ import annotations

import io
import json
import os
import struct
from typing import Any

import numpy as np
from absl import logging

from t2tcli import registry
from t2tcli.data.vocabulary import hf_vocab, vocab
from t2tcli.data.vocabulary.hf_vocab import CONFIG, SPIECE, TOKENIZER_CONFIG
from t2tcli.data.vocabulary.hf_vocab import (
    is_model_dir as is_model_dir,  # the directory test is data's: callers ask here
)
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.interop import export_files
from t2tcli.io import fs
from t2tcli.model.weight_names import (
    GLOBAL_STEP,
    LOGITS,
    Architecture,
    hf_names,
    is_gated,
    mesh_shapes,
    padded_vocab_size,
)

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
MODEL_TYPES = ("t5", "mt5")
# t2tcli's activation names <-> T5Config.feed_forward_proj. mesh-tf's gelu is the tanh
# approximation, which Hugging Face T5 calls gelu only in "gated-gelu".
_TO_HF_ACTIVATION = {
    "relu": "relu",
    "gated-gelu": "gated-gelu",
    "gated-relu": "gated-relu",
    "gated-swish": "gated-silu",
}
_FROM_HF_ACTIVATION = {hf: ours for ours, hf in _TO_HF_ACTIVATION.items()} | {
    "silu": "swish",
    "gated-silu": "gated-swish",
}
# What mesh-tensorflow's T5 computes with; a config that says otherwise describes another model.
_FIXED = {"relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6}


class HfModel:
    """One Hugging Face T5 directory, checked on opening, read on demand."""

    def __init__(self, path: str) -> None:
        self.path = path
        config_path = os.path.join(path, CONFIG)
        try:
            self.config: dict[str, Any] = json.loads(fs.read_bytes(config_path))
        except (OSError, ValueError) as exc:
            raise UserError(f"{config_path}: unreadable Hugging Face config ({exc})") from None
        model_type = self.config.get("model_type")
        if model_type not in MODEL_TYPES:
            raise UserError(
                f"{config_path}: model_type {model_type!r} is not a T5 (expected one of {', '.join(MODEL_TYPES)})"
            )
        for key, value in _FIXED.items():
            if key in self.config and float(self.config[key]) != value:
                raise UserError(f"{config_path}: {key}={self.config[key]} (t2tcli's T5 computes with {value})")
        self.activation = _FROM_HF_ACTIVATION.get(self.config.get("feed_forward_proj", "relu"))
        if self.activation is None:
            raise UserError(
                f"{config_path}: feed_forward_proj={self.config['feed_forward_proj']!r} is not supported "
                f"(supported: {', '.join(sorted(_FROM_HF_ACTIVATION))})"
            )
        # T5 v1.0 computes logits with the embedding, its input scaled by d_model ** -0.5; v1.1
        # (and every mT5) with lm_head, unscaled. transformers < 5 says which by
        # tie_word_embeddings, transformers 5 by scale_decoder_outputs (mT5 never scales).
        scaled = self.config.get("scale_decoder_outputs", self.config.get("tie_word_embeddings", True))
        self.tied = model_type == "t5" and bool(scaled)
        self.weights_file = self._find_weights()
        hf_vocab.spiece_path(path)  # a one-line error when there is none

    @property
    def vocab_rows(self) -> int:
        return int(self.config["vocab_size"])

    def _find_weights(self) -> str:
        for name in (SAFETENSORS, SAFETENSORS_INDEX, TORCH_WEIGHTS):
            if fs.isfile(os.path.join(self.path, name)):
                return name
        raise UserError(f"{self.path}: no {SAFETENSORS}, {SAFETENSORS_INDEX} or {TORCH_WEIGHTS} beside {CONFIG}")

    def tensors(self) -> dict[str, np.ndarray]:
        """Every tensor of the checkpoint, by Hugging Face name, as float32 numpy arrays."""
        if self.weights_file == TORCH_WEIGHTS:
            return _torch_tensors(os.path.join(self.path, TORCH_WEIGHTS))
        files = [SAFETENSORS]
        if self.weights_file == SAFETENSORS_INDEX:
            index = json.loads(fs.read_bytes(os.path.join(self.path, SAFETENSORS_INDEX)))
            files = sorted(set(index["weight_map"].values()))
        out: dict[str, np.ndarray] = {}
        for name in files:
            out.update(_safetensors(os.path.join(self.path, name)))
        return out

    def sentinels(self) -> int:
        """How many T5 sentinels (<extra_id_N>) the model's vocabulary has beyond spiece.model."""
        return hf_vocab.sentinels(self.path)

    def vocabulary_proto(self) -> bytes:
        """spiece.model with the model's sentinels appended: t2tcli's vocabulary file for it."""
        return hf_vocab.vocabulary_proto(self.path)


def open_model(path: str) -> HfModel:
    return HfModel(path)


def _safetensors(path: str) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load, load_file

    try:
        tensors = load(fs.read_bytes(path)) if fs.is_remote(path) else load_file(path)
        return {k: v.astype(np.float32, copy=False) for k, v in tensors.items()}
    except TypeError:  # numpy has no bfloat16: such files (FLAN-T5 XL and up) are read below
        return _bfloat16_safetensors(path)
    except (SafetensorError, OSError) as exc:
        raise UserError(f"{path}: unreadable safetensors file ({exc}); download it again") from None


def _bfloat16_safetensors(path: str) -> dict[str, np.ndarray]:
    """A safetensors file holding bfloat16 tensors, read through ml_dtypes' bfloat16.

    The format is an 8-byte little-endian header length, a JSON header naming each
    tensor's dtype, shape and byte range, then the bytes.
    """
    import ml_dtypes

    kinds = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32, "F64": np.float64}
    out = {}
    try:
        with fs.open_file(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
            data = f.read()
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in kinds:
                raise UserError(f"{path}: tensor {name} has dtype {info['dtype']}, expected a float type")
            start, end = info["data_offsets"]
            array = np.frombuffer(data[start:end], dtype=kinds[info["dtype"]]).reshape(info["shape"])
            out[name] = array.astype(np.float32)
    except (struct.error, ValueError, KeyError, TypeError) as exc:  # a file cut short or not safetensors
        raise UserError(f"{path}: unreadable safetensors file ({exc}); download it again") from None
    return out


def _torch_tensors(path: str) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise UserError(
            f"{path}: reading pytorch_model.bin needs torch (pip install torch), or a directory with "
            f"{SAFETENSORS} instead"
        ) from None
    state = torch.load(io.BytesIO(fs.read_bytes(path)), map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in state.items()}


def _dims(config: dict[str, Any]) -> dict[str, int]:
    return {
        "d_model": int(config["d_model"]),
        "d_ff": int(config["d_ff"]),
        "num_heads": int(config["num_heads"]),
        "d_kv": int(config["d_kv"]),
        "num_encoder_layers": int(config["num_layers"]),
        "num_decoder_layers": int(config.get("num_decoder_layers") or config["num_layers"]),
        "relative_attention_num_buckets": int(config.get("relative_attention_num_buckets", 32)),
    }


def architecture_hparams(model: HfModel, vocab_size: int) -> dict[str, Any]:
    """The hparams that decide the weights, as the model's config says."""
    rows = model.vocab_rows
    if vocab_size > rows:
        raise UserError(
            f"{model.path}: its vocabulary has {vocab_size} ids ({SPIECE} plus {model.sentinels()} sentinels) "
            f"but the model only {rows} rows"
        )
    return {
        **_dims(model.config),
        "ffn_activation": model.activation,
        "tie_embeddings": model.tied,
        # Any vocab_divisor that pads the vocabulary to exactly the model's rows will do.
        "vocab_divisor": 128 if padded_vocab_size(vocab_size, 128) == rows else rows,
    }


def _family(model: HfModel) -> str:
    if model.config.get("model_type") == "mt5":
        return "mt5"
    return "t5_v1_1" if is_gated(model.activation) else "t5"


def hparams_for(model: HfModel, vocab_size: int) -> tuple[str, HParams]:
    """(name of the registered hparams set, its hparams) for the model: a set whose shapes
    match the config, or the family's smallest set with the config's shapes put in."""
    wanted = architecture_hparams(model, vocab_size)
    family = _family(model)
    candidates = [n for n in registry.list_hparams() if n.startswith(f"{family}_") and not n.endswith("_tpu")]
    for name in candidates:
        hp = registry.hparams(name)
        if all(hp.get(k) == v for k, v in wanted.items() if k != "vocab_divisor"):
            hp.vocab_divisor = wanted["vocab_divisor"]
            hp.dropout_rate = float(model.config.get("dropout_rate", hp.dropout_rate))
            return name, hp
    name = f"{family}_small"
    hp = registry.hparams(name)
    hp.override_from_dict(wanted)
    hp.dropout_rate = float(model.config.get("dropout_rate", hp.dropout_rate))
    logging.info("%s: no registered hparams set has its shapes; using %s with %s", model.path, name, wanted)
    return name, hp


def check_fits(model: HfModel, hp: HParams, vocab_size: int) -> None:
    """A one-line error listing what differs when `hp` does not describe the model's weights."""
    wanted = architecture_hparams(model, vocab_size)
    wrong = [f"{k} {hp.get(k)!r} vs {v!r}" for k, v in wanted.items() if k != "vocab_divisor" and hp.get(k) != v]
    if padded_vocab_size(vocab_size, hp.vocab_divisor) != model.vocab_rows:
        wrong.append(
            f"vocabulary rows {padded_vocab_size(vocab_size, hp.vocab_divisor)} "
            f"({vocab_size} ids padded to a multiple of vocab_divisor={hp.vocab_divisor}) vs {model.vocab_rows}"
        )
    if wrong:
        raise UserError(
            f"--init_checkpoint={model.path} does not fit the hparams (hparams vs model): {'; '.join(wrong)}"
        )


def mesh_values(model: HfModel, hp: HParams, vocab_size: int) -> dict[str, np.ndarray]:
    """The model's weights under t2tcli's mesh names and shapes for `hp`."""
    check_fits(model, hp, vocab_size)
    arch = Architecture.from_hparams(hp, vocab_size)
    tensors = model.tensors()
    shapes = mesh_shapes(arch)
    out: dict[str, np.ndarray] = {}
    for mesh_name, hf in hf_names(arch).items():
        source = hf.name
        if mesh_name == LOGITS and source not in tensors:
            source = "shared.weight"  # a v1.1 config whose output projection was saved tied
        if source not in tensors:
            raise UserError(f"{model.path}: tensor {hf.name} is missing")
        value = tensors[source].T if hf.transposed else tensors[source]
        if list(value.shape) != shapes[mesh_name]:
            expected = shapes[mesh_name][::-1] if hf.transposed else shapes[mesh_name]
            raise UserError(f"{model.path}: {hf.name} has shape {list(tensors[source].shape)}, expected {expected}")
        out[mesh_name] = np.ascontiguousarray(value, dtype=np.float32)
    if (
        arch.tie_embeddings
        and "lm_head.weight" in tensors
        and not np.array_equal(tensors["lm_head.weight"], tensors["shared.weight"])
    ):
        raise UserError(
            f"{model.path}: config says the output projection is the embedding (scaled, T5 v1.0), "
            "but lm_head.weight differs from shared.weight"
        )
    out[GLOBAL_STEP] = np.int64(0)
    return out


def export(
    values: dict[str, np.ndarray], hp: HParams, vocabulary_proto: bytes, vocab_size: int, export_dir: str
) -> None:
    """Writes a Hugging Face T5 directory (config, safetensors, SentencePiece) into export_dir.

    `values` are the model's weights under mesh names (e.g. read from a checkpoint). The
    directory is written whole (`export_files.write_whole`): complete or absent, config.json
    last where an object store allows no rename.
    """
    from safetensors.numpy import save

    if hp.ffn_activation not in _TO_HF_ACTIVATION:
        raise UserError(
            f"ffn_activation={hp.ffn_activation!r} has no Hugging Face T5 equivalent "
            f"(exportable: {', '.join(_TO_HF_ACTIVATION)})"
        )
    target = export_files.place(export_dir)
    arch = Architecture.from_hparams(hp, vocab_size)
    tensors = {}
    for mesh_name, hf in hf_names(arch).items():
        value = np.asarray(values[mesh_name], dtype=np.float32)
        tensors[hf.name] = np.ascontiguousarray(value.T if hf.transposed else value)
    spiece, sentinels = vocab.without_sentinels(vocabulary_proto)
    config = {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        **{
            hf_key: getattr(arch, ours)
            for hf_key, ours in (
                ("d_model", "d_model"),
                ("d_ff", "d_ff"),
                ("num_heads", "num_heads"),
                ("d_kv", "d_kv"),
                ("num_layers", "num_encoder_layers"),
                ("num_decoder_layers", "num_decoder_layers"),
                ("relative_attention_num_buckets", "relative_attention_num_buckets"),
            )
        },
        "feed_forward_proj": _TO_HF_ACTIVATION[hp.ffn_activation],
        "tie_word_embeddings": arch.tie_embeddings,
        "vocab_size": arch.vocab_rows,
        "dropout_rate": float(hp.dropout_rate),
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "pad_token_id": vocab.PAD_ID,
        "eos_token_id": vocab.EOS_ID,
        "decoder_start_token_id": vocab.PAD_ID,
        **_FIXED,
    }
    tokenizer_config = {
        "tokenizer_class": "T5Tokenizer",
        "extra_ids": sentinels,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": int(hp.inputs_length),
    }
    files = {
        SAFETENSORS: save(tensors, metadata={"format": "pt"}),
        TOKENIZER_CONFIG: _json_bytes(tokenizer_config),
        SPIECE: spiece,
        CONFIG: _json_bytes(config),  # last: loaders look for it first
    }
    export_files.write_whole(files, target)


def _json_bytes(content: dict[str, Any]) -> bytes:
    return (json.dumps(content, indent=2, sort_keys=True) + "\n").encode()


def mesh_values_from_checkpoint(checkpoint_path: str, hp: HParams, vocab_size: int) -> dict[str, np.ndarray]:
    """The model's weights read from a t2tcli checkpoint, by mesh name."""
    from t2tcli.model import checkpoints

    return checkpoints.read_tensors(checkpoint_path, mesh_shapes(Architecture.from_hparams(hp, vocab_size)))
