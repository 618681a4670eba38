"""The feed-forward layer with its ReLU and dropout fused (t2tcli.model.ffn_dropout)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.model import config as model_config
from t2tcli.model import gin_bindings, hardware
from t2tcli.model import mesh as meshlib

# isort: split
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import transformer_layers
from test_numerics import AMX, AVX2, AVX512_BF16, _model_graph_ops, cpu, mesh_impl

from t2tcli.model.ffn_dropout import DenseReluDense as FusedDenseReluDense

tf1 = tf.compat.v1


def _ffn_and_grads(
    fused: bool, x: np.ndarray, weights: np.ndarray, dtype: str, train: bool = True, mesh_shape: str = ""
) -> list[np.ndarray]:
    """(y, dL/dx, dL/dwi, dL/dwo) of a ReLU FFN with dropout 0.3, as float32, for the loss
    sum(y * weights), in a graph seeded alike every call: t2tcli's fused layer or
    mesh-tensorflow's DenseReluDense."""
    hp = registry.hparams("mtf_transformer_tiny")
    hp.mesh_shape, hp.layout = (mesh_shape, "batch:batch") if mesh_shape else ("", "")
    spec = meshlib.spec_from_hparams(hp)
    with tf.Graph().as_default():
        tf1.set_random_seed(11)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        dims = [mtf.Dimension(n, k) for n, k in zip(("batch", "length", "d_model"), x.shape, strict=True)]
        variable_dtype = mtf.VariableDType(tf.float32, tf.float32, tf.as_dtype(dtype))
        model = SimpleNamespace(ensemble_dims=[])
        context = SimpleNamespace(model=model, variable_dtype=variable_dtype, train=train, length_dim=dims[1])
        xs = mtf.cast(mtf.import_tf_tensor(mesh, tf.constant(x), mtf.Shape(dims)), tf.as_dtype(dtype))
        layer_class = FusedDenseReluDense if fused else transformer_layers.DenseReluDense
        layer = layer_class(hidden_size=24, dropout_rate=0.3, activation="relu")
        with tf1.variable_scope("ffn"):
            y = layer.call(context, xs)
        w = mtf.import_tf_tensor(mesh, tf.constant(weights), mtf.Shape(dims))
        loss = mtf.reduce_sum(mtf.cast(y, tf.float32) * w)
        wi, wo = graph.trainable_variables
        assert [wi.name, wo.name] == ["ffn/wi/kernel", "ffn/wo/kernel"]
        grads = mtf.gradients([loss], [xs, wi.outputs[0], wo.outputs[0]])
        lowering = mtf.Lowering(graph, {mesh: mesh_impl(spec, [""] * spec.size)})
        outputs = [tf.cast(lowering.export_to_tf_tensor(v), tf.float32) for v in (y, *grads)]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            return sess.run(outputs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_fused_layer_computes_mesh_tensorflows_values_and_gradients(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 16)).astype(np.float32)
    w = rng.standard_normal(x.shape).astype(np.float32)
    ours = _ffn_and_grads(True, x, w, dtype)
    theirs = _ffn_and_grads(False, x, w, dtype)
    for a, b, what in zip(ours, theirs, ("y", "dx", "dwi", "dwo"), strict=True):
        # The same mask, the same roundings: equal, not merely close.
        np.testing.assert_array_equal(a, b, err_msg=what)
    # Dropout did drop: without it (evaluation) the outputs differ.
    assert not np.array_equal(ours[0], _ffn_and_grads(True, x, w, dtype, train=False)[0])
    # Split along the batch, each slice broadcasts its own slice of the mask.
    split = _ffn_and_grads(True, x, w, dtype, mesh_shape="batch:2")
    for a, b, what in zip(split, _ffn_and_grads(False, x, w, dtype, mesh_shape="batch:2"), ("y", "dx"), strict=False):
        np.testing.assert_array_equal(a, b, err_msg=what)


def test_the_fused_passes_are_for_training_graphs_only():
    def relu_dropout_ops(train: bool) -> int:
        with tf.Graph().as_default():
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            dims = [mtf.Dimension("batch", 2), mtf.Dimension("length", 3), mtf.Dimension("d_model", 8)]
            variable_dtype = mtf.VariableDType(tf.float32, tf.float32, tf.float32)
            context = SimpleNamespace(
                model=SimpleNamespace(ensemble_dims=[]), variable_dtype=variable_dtype, train=train, length_dim=dims[1]
            )
            x = mtf.import_tf_tensor(mesh, tf.ones([2, 3, 8]), mtf.Shape(dims))
            FusedDenseReluDense(hidden_size=4, dropout_rate=0.1, activation="relu").call(context, x)
            assert [v.name for v in graph.trainable_variables] == ["wi/kernel", "wo/kernel"]
            return sum(isinstance(op, mtf.SlicewiseOperation) and "relu_dropout" in op.name for op in graph.operations)

    # Evaluation, decoding and exported models run mesh-tensorflow's plain ops, with no XLA.
    assert relu_dropout_ops(train=True) == 1
    assert relu_dropout_ops(train=False) == 0


@pytest.mark.parametrize(
    "machine, requested, activation, fused",
    [
        (cpu(AMX), "auto", "relu", True),
        (cpu(AVX512_BF16), "auto", "relu", True),
        (cpu(AMX), "float32", "relu", False),
        (cpu(AVX2), "auto", "relu", False),
        (cpu(AVX2), "bfloat16", "relu", False),  # emulated: its products are float32
        (cpu(AMX), "auto", "gated-gelu", False),
    ],
    ids=["amx", "avx512_bf16", "amx_float32", "avx2", "avx2_bfloat16", "gated_gelu"],
)
def test_training_fuses_the_ffn_where_bfloat16_is_native_and_the_activation_a_relu(
    machine, requested, activation, fused, monkeypatch
):
    monkeypatch.setattr(hardware, "detect", lambda use_tpu=False: machine)
    tiny = registry.hparams("mtf_transformer_tiny")
    tiny.override_from_dict({"activation_dtype": requested, "ffn_activation": activation})
    config = model_config.build(tiny, 40)
    assert gin_bindings.fuses_ffn_dropout(config) is fused
    assert ("@t2tcli.FusedDenseReluDense" in " ".join(gin_bindings.bindings(config))) is fused
    assert not gin_bindings.fuses_ffn_dropout(model_config.build(tiny, 40, use_tpu=True))
    for layout, split_fused in (("length:model", False), ("d_ff:model", fused), ("batch:model", fused)):
        split = registry.hparams("mtf_transformer_tiny")
        split.override_from_dict({"activation_dtype": requested, "ffn_activation": activation})
        split.mesh_shape, split.layout = "model:2", layout
        assert gin_bindings.fuses_ffn_dropout(model_config.build(split, 40)) is split_fused, layout


def test_the_training_graph_keeps_mesh_tensorflows_variable_names(monkeypatch, tmp_path):
    """Checkpoints are the same with the fused layer: a layer stack scopes each layer's
    variables by its class's name."""
    monkeypatch.setattr(hardware, "detect", lambda use_tpu=False: cpu(AMX))
    tiny = registry.hparams("mtf_transformer_tiny")
    tiny.override_from_dict({"activation_dtype": "auto", "dropout_rate": 0.1})
    assert gin_bindings.fuses_ffn_dropout(model_config.build(tiny, 40))

    def variables_and_fused_ops() -> tuple[list[str], int]:
        ops = _model_graph_ops(tiny, tf.estimator.ModeKeys.TRAIN, tmp_path)
        names = sorted(op.name for op in ops if op.type == "VarHandleOp" and "slot" not in op.name)
        return names, sum("relu_dropout" in op.name for op in ops)

    fused_names, fused_ops = variables_and_fused_ops()
    monkeypatch.setattr(gin_bindings, "fuses_ffn_dropout", lambda config: False)
    names, ops = variables_and_fused_ops()
    assert fused_ops > 0 and ops == 0
    assert fused_names == names and any("DenseReluDense/wi/kernel" in n for n in names)
