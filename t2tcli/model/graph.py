"""The Bitransformer's mtf graph: one model_fn call's mesh, model, features and loss.

Everything here is shared by training, evaluation and decoding; it knows nothing of
Estimators or of decode settings. Imports: core and model.
"""

from __future__ import annotations

import re
from typing import Any

from t2tcli.compat import tf
from t2tcli.model import gin_bindings
from t2tcli.model import mesh as meshlib
from t2tcli.model.config import ModelConfig

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer

ModeKeys = tf.estimator.ModeKeys
FEATURE_KEYS = ("inputs", "targets")


def variable_dtype(config: ModelConfig) -> mtf.VariableDType:
    """float32 variables; activations in the dtype resolved for this machine."""
    return mtf.VariableDType(tf.float32, tf.float32, tf.as_dtype(config.activation_dtype))


def build_model(config: ModelConfig) -> transformer.Bitransformer:
    """A Bitransformer for `config` (gin is reset to its bindings first)."""
    gin_bindings.apply(config)
    return transformer.make_bitransformer(input_vocab_size=config.vocab_size, output_vocab_size=config.vocab_size)


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

    def __init__(self, config: ModelConfig, mesh_impl: mtf.MeshImpl, var_placer: Any = None) -> None:
        self.config = config
        self.hp = config.hparams
        self.graph = mtf.Graph()
        self.mesh = mtf.Mesh(self.graph, "mesh", var_placer)
        self.mesh_impl = mesh_impl
        self.model = build_model(config)
        self.dtype = variable_dtype(config)

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


def placement_mesh_impl(config: ModelConfig, devices: list[str] | None = None) -> meshlib.PlacementMeshImpl:
    """The CPU / GPU mesh of `config` on `devices` (default: one per mesh position)."""
    spec = config.mesh
    devices = meshlib.placement_devices(spec) if devices is None else devices
    float32_einsums = config.kernels.float32_einsums and not any("GPU" in d for d in devices)
    return meshlib.PlacementMeshImpl(spec.mtf_shape(), spec.mtf_layout(), devices, float32_einsums)


def mesh_impl(config: ModelConfig, params: dict[str, Any]) -> tuple[mtf.MeshImpl, Any]:
    spec = config.mesh
    if not config.use_tpu or "context" not in params:
        return placement_mesh_impl(config), None
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
    config: ModelConfig, features: dict[str, tf.Tensor], params: dict[str, Any]
) -> tuple[Graph, dict[str, mtf.Tensor]]:
    """A model_fn call's graph on its mesh, with the batch's features imported into it."""
    impl, var_placer = mesh_impl(config, params)
    g = Graph(config, impl, var_placer)
    batch_dim = mtf.Dimension("batch", int(features["inputs"].shape[0]))
    return g, import_features(g.mesh, features, batch_dim)


def variable_names(config: ModelConfig) -> dict[str, list[int]]:
    """Names and shapes of the model's variables (e.g. to compare with a T5 checkpoint)."""
    one_device = config.on_one_device()
    with tf.Graph().as_default():
        g = Graph(one_device, placement_mesh_impl(one_device, [""]))
        batch = mtf.Dimension("batch", 1)
        length = mtf.Dimension("length", 4)
        ids = mtf.zeros(g.mesh, mtf.Shape([batch, length]), tf.int32)
        g.logits({"inputs": ids}, ids, ModeKeys.EVAL, compute_loss=False)
        return {v.name: v.shape.to_integer_list for v in g.graph.all_variables if not re.match(r"^stacked/", v.name)}
