"""The Bitransformer's mtf graph: one model_fn call's mesh, model, features and loss.

Everything here is shared by training, evaluation and decoding; it knows nothing of
Estimators or of decode settings. Imports: core and model.
"""

from __future__ import annotations

import re
from typing import Any

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.model import activation_dtype, gin_bindings, optimization, weight_names
from t2tcli.model import mesh as meshlib

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer

ModeKeys = tf.estimator.ModeKeys
FEATURE_KEYS = ("inputs", "targets")


def variable_dtype(hp: HParams, use_tpu: bool = False) -> mtf.VariableDType:
    """float32 variables; activations in hp.activation_dtype as resolved for this machine."""
    activations = tf.as_dtype(activation_dtype.resolve(hp.activation_dtype, use_tpu))
    return mtf.VariableDType(tf.float32, tf.float32, activations)


def validate(hp: HParams, vocab_size: int, use_tpu: bool = False) -> None:
    """Every check of hparams that building the model would make, as one-line errors, so
    a binary can run them before it writes anything."""
    spec = meshlib.spec_from_hparams(hp)
    meshlib.check_vocab(spec, vocab_size, hp.vocab_divisor)
    optimization.check(hp)
    if hp.ffn_activation.removeprefix("gated-") not in weight_names.ACTIVATIONS:
        known = ", ".join(weight_names.ACTIVATIONS)
        raise UserError(f"hparam ffn_activation={hp.ffn_activation!r}: use one of {known}, or gated-<one of them>")
    weight_names.Architecture.from_hparams(hp, vocab_size)
    variable_dtype(hp, use_tpu)


def build_model(hp: HParams, vocab_size: int, use_tpu: bool = False) -> transformer.Bitransformer:
    """A Bitransformer for `hp` (gin is reset to hp's bindings first)."""
    gin_bindings.apply(hp, use_tpu)
    return transformer.make_bitransformer(input_vocab_size=vocab_size, output_vocab_size=vocab_size)


def import_features(mesh: mtf.Mesh, features: dict[str, tf.Tensor], batch_dim: mtf.Dimension) -> dict[str, mtf.Tensor]:
    out = {}
    for key, value in features.items():
        if key.split("_")[0] not in FEATURE_KEYS:
            continue
        length = value.shape[-1]
        if length is None or value.shape[0] is None:
            raise ValueError(f"feature '{key}' needs a static shape, got {value.shape}")
        shape = mtf.Shape([batch_dim, mtf.Dimension("length", int(length))])
        out[key] = mtf.import_fully_replicated(mesh, tf.cast(value, tf.int32), shape, name=key)
    return out


def token_xent(logits: mtf.Tensor, targets: mtf.Tensor) -> tuple[mtf.Tensor, mtf.Tensor]:
    """Per-token cross-entropy (float32) and the 0/1 weights of non-padding targets."""
    logits = mtf.cast(logits, tf.float32)
    xent = mtf.layers.softmax_cross_entropy_with_logits(logits, targets, logits.shape.dims[-1])
    weights = mtf.cast(mtf.greater(targets, 0), tf.float32)
    return xent * weights, weights


class Graph:
    """One model_fn call's mtf graph, mesh and model."""

    def __init__(
        self, hp: HParams, vocab_size: int, mesh_impl: mtf.MeshImpl, var_placer: Any = None, use_tpu: bool = False
    ) -> None:
        self.hp = hp
        self.graph = mtf.Graph()
        self.mesh = mtf.Mesh(self.graph, "mesh", var_placer)
        self.mesh_impl = mesh_impl
        self.model = build_model(hp, vocab_size, use_tpu)
        self.dtype = variable_dtype(hp, use_tpu)

    def logits(self, f: dict[str, mtf.Tensor], targets: mtf.Tensor, mode: str, compute_loss: bool) -> Any:
        return self.model.call_simple(
            inputs=f["inputs"],
            targets=targets,
            compute_loss=compute_loss,
            mode=mode,
            variable_dtype=self.dtype,
            encoder_sequence_id=f.get("inputs_segmentation"),
            decoder_sequence_id=f.get("targets_segmentation"),
            encoder_position=f.get("inputs_position"),
            decoder_position=f.get("targets_position"),
        )

    def lower(self) -> mtf.Lowering:
        return mtf.Lowering(self.graph, {self.mesh: self.mesh_impl}, autostack=True)


def mesh_impl(spec: meshlib.MeshSpec, params: dict[str, Any], use_tpu: bool) -> tuple[mtf.MeshImpl, Any]:
    if not use_tpu or "context" not in params:
        return meshlib.placement_mesh_impl(spec, meshlib.placement_devices(spec)), None
    ctx = params["context"]
    devices = [ctx.tpu_host_placement_function(host_id=i) for i in range(ctx.num_hosts)]
    var_placer = mtf.utils.BalancedVariablePlacer(devices, [300_000_000 * ctx.num_replicas] + [0] * (ctx.num_hosts - 1))
    physical = [int(i) for i in ctx.device_assignment.topology.mesh_shape]
    if len(physical) == 4 and physical[2] > 1:
        physical = mtf.simd_mesh_impl.physical_shape_3d_from_topology_proto_4d(physical)
    logical_to_physical = mtf.simd_mesh_impl.auto_logical_to_physical_tpu(
        spec.mtf_shape().to_integer_list, physical, device_assignment=ctx.device_assignment
    )
    impl = mtf.simd_mesh_impl.SimdMeshImpl(
        spec.mtf_shape(),
        spec.mtf_layout(),
        [""] * spec.size,
        ctx.device_assignment,
        logical_to_physical=logical_to_physical,
    )
    return impl, var_placer


def for_batch(
    hp: HParams, vocab_size: int, features: dict[str, tf.Tensor], params: dict[str, Any], use_tpu: bool
) -> tuple[Graph, dict[str, mtf.Tensor]]:
    """A model_fn call's graph on its mesh, with the batch's features imported into it."""
    impl, var_placer = mesh_impl(meshlib.spec_from_hparams(hp), params, use_tpu)
    g = Graph(hp, vocab_size, impl, var_placer, use_tpu)
    batch_dim = mtf.Dimension("batch", int(features["inputs"].shape[0]))
    return g, import_features(g.mesh, features, batch_dim)


def variable_names(hparams: HParams, vocab_size: int) -> dict[str, list[int]]:
    """Names and shapes of the model's variables (e.g. to compare with a T5 checkpoint)."""
    hp = hparams.copy()
    hp.mesh_shape = ""
    with tf.Graph().as_default():
        g = Graph(hp, vocab_size, meshlib.placement_mesh_impl(meshlib.spec_from_hparams(hp), [""]))
        batch = mtf.Dimension("batch", 1)
        length = mtf.Dimension("length", 4)
        ids = mtf.zeros(g.mesh, mtf.Shape([batch, length]), tf.int32)
        g.logits({"inputs": ids}, ids, ModeKeys.EVAL, compute_loss=False)
        return {v.name: v.shape.to_integer_list for v in g.graph.all_variables if not re.match(r"^stacked/", v.name)}
