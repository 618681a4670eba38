"""Built-in hparams sets of the Mesh TensorFlow encoder-decoder transformer.

`base()` is every hparam the model, input pipeline and trainer read, with its default
(t2tcli.hparams.SCHEMA holds them with their meaning); each registered set starts from
it and changes only what differs, so a set is a readable diff. The `t5_*` sets use T5
v1.0's dimensions and layer layout (relu FFN, shared embeddings, relative attention,
vocabulary padded to a multiple of 128), so the variables are named and shaped as in the
released T5 mesh checkpoints; the `*_tpu` presets add T5's published v2-8 model
parallelism and batch sizes.
"""

from __future__ import annotations

from t2tcli.hparams import HParams, defaults
from t2tcli.registry import register_hparams


def base() -> HParams:
    """Every hparam with its default (t2tcli.hparams.SCHEMA, where each is described)."""
    return defaults()


def _t5(d_model: int, d_ff: int, num_heads: int, d_kv: int, num_layers: int) -> HParams:
    hp = base()
    hp.override_from_dict(
        dict(
            d_model=d_model,
            d_ff=d_ff,
            num_heads=num_heads,
            d_kv=d_kv,
            num_encoder_layers=num_layers,
            num_decoder_layers=num_layers,
            dropout_rate=0.1,
            inputs_length=512,
            targets_length=512,
            batch_size=128,
            # T5's fine-tuning recipe: constant 1e-3 with Adafactor.
            learning_rate_schedule="constant",
            learning_rate=0.001,
            warmup_steps=0,
        )
    )
    return hp


def _t5_v1_1(d_model: int, d_ff: int, num_heads: int, num_layers: int) -> HParams:
    """T5 v1.1's layout: gated-GELU FFN, an output projection of its own, rms_norm names."""
    hp = _t5(d_model, d_ff, num_heads, 64, num_layers)
    hp.override_from_dict(dict(ffn_activation="gated-gelu", tie_embeddings=False, norm_scope="rms_norm"))
    return hp


# T5 v1.1 and FLAN-T5 (T5 v1.1 fine-tuned on instructions) share their shapes; mT5 adds a
# 250,112-row vocabulary, which comes with its checkpoint and SentencePiece model.
_V1_1_SIZES = {
    "small": (512, 1024, 6, 8),
    "base": (768, 2048, 12, 12),
    "large": (1024, 2816, 16, 24),
    "xl": (2048, 5120, 32, 24),
    "xxl": (4096, 10240, 64, 24),
}
for _family, _what in (
    ("t5_v1_1", "T5 v1.1"),
    ("flan_t5", "FLAN-T5 (T5 v1.1 layout)"),
    ("mt5", "mT5 (T5 v1.1 layout, 250,112-row vocabulary)"),
):
    for _size, _dims in _V1_1_SIZES.items():

        def _make(dims: tuple[int, int, int, int] = _dims) -> HParams:
            return _t5_v1_1(*dims)

        _make.__doc__ = (
            f"{_what} {_size}: d_model {_dims[0]}, d_ff {_dims[1]}, {_dims[2]} heads, {_dims[3]} layers a side."
        )
        register_hparams(f"{_family}_{_size}")(_make)


@register_hparams
def mtf_transformer_tiny() -> HParams:
    """Two small layers each side: trains a toy problem in a CPU test."""
    hp = base()
    hp.override_from_dict(
        dict(
            d_model=64,
            d_ff=256,
            num_heads=4,
            d_kv=16,
            num_encoder_layers=2,
            num_decoder_layers=2,
            dropout_rate=0.0,
            inputs_length=32,
            targets_length=32,
            batch_size=32,
            learning_rate=0.03,
            warmup_steps=100,
        )
    )
    return hp


@register_hparams
def mtf_transformer_small() -> HParams:
    """Four layers each side, d_model 256: a small real model for a CPU.

    Its warm-up (warmup_steps=10000) is made for long runs; a run of fewer steps is warned
    at its start, with the --hparams=warmup_steps=N to give it instead.
    """
    hp = base()
    hp.override_from_dict(
        dict(d_model=256, d_ff=1024, num_heads=4, d_kv=64, num_encoder_layers=4, num_decoder_layers=4)
    )
    return hp


@register_hparams
def mtf_transformer_base() -> HParams:
    """Six layers each side, d_model 512 (the defaults of every hparam)."""
    return base()


@register_hparams
def t5_small() -> HParams:
    """T5 (v1.0) small: d_model 512, d_ff 2048, 8 heads, 6 layers a side; T5's fine-tuning recipe."""
    return _t5(512, 2048, 8, 64, 6)


@register_hparams
def t5_base() -> HParams:
    """T5 (v1.0) base: d_model 768, d_ff 3072, 12 heads, 12 layers a side."""
    return _t5(768, 3072, 12, 64, 12)


@register_hparams
def t5_large() -> HParams:
    """T5 (v1.0) large: d_model 1024, d_ff 4096, 16 heads, 24 layers a side."""
    return _t5(1024, 4096, 16, 64, 24)


@register_hparams("t5_3B")
def t5_3b() -> HParams:
    """T5 (v1.0) 3B: d_model 1024, d_ff 16384, 32 heads of 128, 24 layers a side."""
    return _t5(1024, 16384, 32, 128, 24)


@register_hparams("t5_11B")
def t5_11b() -> HParams:
    """T5 (v1.0) 11B: d_model 1024, d_ff 65536, 128 heads of 128, 24 layers a side."""
    return _t5(1024, 65536, 128, 128, 24)


def _tpu_v2_8(hp: HParams, model_parallelism: int, batch_size: int) -> HParams:
    """T5's published v2-8 recipe: 8 cores split into model x batch parallelism."""
    hp.mesh_shape = f"model:{model_parallelism},batch:{8 // model_parallelism}"
    hp.batch_size = batch_size
    return hp


@register_hparams
def t5_small_tpu() -> HParams:
    """t5_small on a TPU v2-8: model parallelism 1, batch 256."""
    return _tpu_v2_8(t5_small(), 1, 256)


@register_hparams
def t5_base_tpu() -> HParams:
    """t5_base on a TPU v2-8: model parallelism 2, batch 128."""
    return _tpu_v2_8(t5_base(), 2, 128)


@register_hparams
def t5_large_tpu() -> HParams:
    """t5_large on a TPU v2-8: model parallelism 8, batch 64."""
    return _tpu_v2_8(t5_large(), 8, 64)


@register_hparams("t5_3B_tpu")
def t5_3b_tpu() -> HParams:
    """t5_3B on a TPU v2-8: model parallelism 8, batch 16."""
    return _tpu_v2_8(t5_3b(), 8, 16)


@register_hparams("t5_11B_tpu")
def t5_11b_tpu() -> HParams:
    """t5_11B on a TPU v2-8: model parallelism 8, batch 16."""
    return _tpu_v2_8(t5_11b(), 8, 16)
