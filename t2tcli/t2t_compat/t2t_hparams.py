"""tensor2tensor-style hparams objects and T2T's Transformer sets, by T2T's own names.

A T2T user's set starts from `transformer.transformer_base()` or
`common_hparams.basic_params1()`, assigns T2T names and adds its own with `add_hparam`;
this object lets that code run unchanged. `t2tcli.t2t_compat.hparams_convert` turns the
result into the mesh-tf Transformer's hparams. The values follow T2T's published sets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class T2THParams:
    """Attribute-style settings that, like T2T's, accept new names through `add_hparam`.

    Names assigned after a set function returned are remembered (`user_set`), so the
    conversion can say which of a user's settings the model here does not read.
    """

    def __init__(self, **values: Any) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_user_set", set())

    def add_hparam(self, name: str, value: Any) -> None:
        if name in self._values:
            raise ValueError(f"hparam {name} already exists")
        self._values[name] = value
        self._user_set.add(name)

    def set_hparam(self, name: str, value: Any) -> None:
        self._values[name] = value
        self._user_set.add(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self.set_hparam(name, value)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no hparam '{name}'") from None

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def values(self) -> dict[str, Any]:
        return dict(self._values)

    def override_from_dict(self, values: dict[str, Any]) -> T2THParams:
        for name, value in values.items():
            self.set_hparam(name, value)
        return self

    def del_hparam(self, name: str) -> None:
        self._values.pop(name, None)

    def user_set(self) -> set[str]:
        """The names assigned since the last set function of this layer returned."""
        return set(self._user_set)

    def sealed(self) -> T2THParams:
        """Marks every current value as the set's own (called as a set function returns)."""
        self._user_set.clear()
        return self


def basic_params1() -> T2THParams:
    """T2T's common starting point: the settings every model reads."""
    return T2THParams(
        batch_size=4096,
        use_fixed_batch_size=False,
        num_hidden_layers=4,
        kernel_height=3,
        kernel_width=1,
        hidden_size=64,
        compress_steps=0,
        dropout=0.2,
        clip_grad_norm=2.0,
        grad_noise_scale=0.0,
        summarize_grads=False,
        initializer="orthogonal",
        initializer_gain=1.5,
        label_smoothing=0.1,
        optimizer="adam",
        optimizer_adam_epsilon=1e-6,
        optimizer_adam_beta1=0.85,
        optimizer_adam_beta2=0.997,
        optimizer_momentum_momentum=0.9,
        weight_decay=1e-6,
        weight_noise=0.0,
        learning_rate_schedule="legacy",
        learning_rate_constant=1.0,
        learning_rate_decay_scheme="none",
        learning_rate_decay_steps=5000,
        learning_rate_warmup_steps=100,
        learning_rate=0.1,
        sampling_method="argmax",
        sampling_temp=1.0,
        layer_preprocess_sequence="none",
        layer_postprocess_sequence="dan",
        layer_prepostprocess_dropout=0.1,
        norm_type="layer",
        norm_epsilon=1e-6,
        symbol_modality_num_shards=1,
        min_length=0,
        max_length=0,
        min_length_bucket=8,
        length_bucket_step=1.1,
        eval_drop_long_sequences=False,
        shared_embedding_and_softmax_weights=False,
        max_input_seq_length=0,
        max_target_seq_length=0,
        split_to_length=0,
        prepend_mode="none",
        scheduled_sampling_prob=0.0,
        daisy_chain_variables=True,
        force_full_predict=False,
        no_data_parallelism=False,
        activation_dtype="float32",
        weight_dtype="float32",
    ).sealed()


def transformer_base_v1() -> T2THParams:
    """The Transformer of "Attention Is All You Need" as T2T first shipped it."""
    hp = basic_params1()
    hp.override_from_dict(
        dict(
            norm_type="layer",
            hidden_size=512,
            batch_size=4096,
            max_length=256,
            clip_grad_norm=0.0,
            optimizer_adam_epsilon=1e-9,
            learning_rate_schedule="legacy",
            learning_rate_decay_scheme="noam",
            learning_rate=0.1,
            learning_rate_warmup_steps=4000,
            initializer_gain=1.0,
            num_hidden_layers=6,
            initializer="uniform_unit_scaling",
            weight_decay=0.0,
            optimizer_adam_beta1=0.9,
            optimizer_adam_beta2=0.98,
            label_smoothing=0.1,
            shared_embedding_and_softmax_weights=True,
            symbol_modality_num_shards=16,
        )
    )
    for name, value in dict(
        filter_size=2048,
        num_encoder_layers=0,
        num_decoder_layers=0,
        num_heads=8,
        attention_key_channels=0,
        attention_value_channels=0,
        ffn_layer="dense_relu_dense",
        attention_dropout=0.0,
        relu_dropout=0.0,
        pos="timing",
        proximity_bias=False,
        causal_decoder_self_attention=True,
        use_pad_remover=True,
        self_attention_type="dot_product",
        use_target_space_embedding=True,
        unidirectional_encoder=False,
    ).items():
        hp.add_hparam(name, value)
    return hp.sealed()


def transformer_base_v2() -> T2THParams:
    """v1 with pre-norm sublayers and dropout everywhere."""
    hp = transformer_base_v1()
    hp.override_from_dict(
        dict(
            layer_preprocess_sequence="n",
            layer_postprocess_sequence="da",
            layer_prepostprocess_dropout=0.1,
            attention_dropout=0.1,
            relu_dropout=0.1,
            learning_rate_warmup_steps=8000,
            learning_rate=0.2,
        )
    )
    return hp.sealed()


def transformer_base_v3() -> T2THParams:
    """v2 with the learning rate written as a product of factors."""
    hp = transformer_base_v2()
    hp.optimizer_adam_beta2 = 0.997
    hp.learning_rate_schedule = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"
    hp.learning_rate_constant = 2.0
    return hp.sealed()


def transformer_base() -> T2THParams:
    """T2T's Transformer base: 6 layers a side, width 512, 8 heads."""
    return transformer_base_v3()


def _resized(hp: T2THParams, **values: Any) -> T2THParams:
    hp.override_from_dict(values)
    return hp.sealed()


def transformer_big() -> T2THParams:
    """T2T's Transformer big: width 1024, d_ff 4096, 16 heads."""
    return _resized(
        transformer_base(),
        hidden_size=1024,
        filter_size=4096,
        batch_size=2048,
        num_heads=16,
        layer_prepostprocess_dropout=0.3,
    )


def transformer_big_single_gpu() -> T2THParams:
    """transformer_big with less dropout and a longer warmup, for one GPU."""
    return _resized(transformer_big(), layer_prepostprocess_dropout=0.1, learning_rate_warmup_steps=16000)


def transformer_base_single_gpu() -> T2THParams:
    """transformer_base with 1024-token batches and a longer warmup, for one GPU."""
    return _resized(
        transformer_base(),
        batch_size=1024,
        learning_rate_schedule="constant*linear_warmup*rsqrt_decay",
        learning_rate_constant=0.1,
        learning_rate_warmup_steps=16000,
    )


def transformer_small() -> T2THParams:
    """T2T's Transformer small: 2 layers a side, width 256, 4 heads."""
    return _resized(transformer_base(), num_hidden_layers=2, hidden_size=256, filter_size=1024, num_heads=4)


def transformer_tiny() -> T2THParams:
    """T2T's Transformer tiny: 2 layers a side, width 128, 4 heads."""
    return _resized(transformer_base(), num_hidden_layers=2, hidden_size=128, filter_size=512, num_heads=4)


# The sets t2tcli offers under T2T's names (`--hparams_set=transformer_base`...).
TRANSFORMER_SETS = {
    f.__name__: f
    for f in (
        transformer_base_v1,
        transformer_base_v2,
        transformer_base_v3,
        transformer_base,
        transformer_base_single_gpu,
        transformer_big,
        transformer_big_single_gpu,
        transformer_small,
        transformer_tiny,
    )
}
