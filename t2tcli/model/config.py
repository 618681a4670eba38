"""The model a run builds, worked out once: hparams, vocabulary size, mesh, activation dtype,
machine and CPU kernel layout.

Every part that builds or runs the model (the graph, the gin bindings, the Estimator and
its model_fn, the decode engines, the export) reads one `ModelConfig` and re-derives none
of it from raw hparams, so each decision is checked, made and logged once per run, and a
reader finds it in one place. `build` is the one function that makes it.

Imports: core and model (activation_dtype, hardware, kernel_layout, mesh, optimization,
weight_names).
"""

from __future__ import annotations

import dataclasses

from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.model import activation_dtype, hardware, kernel_layout, optimization, weight_names
from t2tcli.model import mesh as meshlib


@dataclasses.dataclass(frozen=True, eq=False)
class ModelConfig:
    """A checked model and the machine it runs on; consumers read it and never mutate
    `hparams` (build a new one instead)."""

    hparams: HParams
    vocab_size: int
    mesh: meshlib.MeshSpec
    activation_dtype: str  # 'bfloat16' or 'float32', resolved for `machine`
    machine: hardware.Machine
    kernels: kernel_layout.KernelLayout
    use_tpu: bool = False

    def on_one_device(self) -> ModelConfig:
        """The same model on a single device (e.g. to list its variables)."""
        if self.mesh.size == 1:
            return self
        hp = self.hparams.copy()
        hp.mesh_shape = ""
        return dataclasses.replace(self, hparams=hp, mesh=meshlib.MeshSpec([], self.mesh.layout))


def build(hp: HParams, vocab_size: int, use_tpu: bool = False, machine: hardware.Machine | None = None) -> ModelConfig:
    """Every check building the model would make, as one-line errors (so a binary runs them
    before it writes anything), then the model's config for this machine (`machine`: detected
    when not given)."""
    spec = meshlib.spec_from_hparams(hp)
    meshlib.check_vocab(spec, vocab_size, hp.vocab_divisor)
    optimization.check(hp)
    if hp.ffn_activation.removeprefix("gated-") not in weight_names.ACTIVATIONS:
        known = ", ".join(weight_names.ACTIVATIONS)
        raise UserError(f"hparam ffn_activation={hp.ffn_activation!r}: use one of {known}, or gated-<one of them>")
    weight_names.Architecture.from_hparams(hp, vocab_size)
    machine = machine or hardware.detect(use_tpu)
    return ModelConfig(
        hparams=hp.copy(),
        vocab_size=vocab_size,
        mesh=spec,
        activation_dtype=activation_dtype.resolve(hp.activation_dtype, use_tpu, machine),
        machine=machine,
        kernels=kernel_layout.for_machine(machine, int(hp.d_ff)),
        use_tpu=use_tpu,
    )
