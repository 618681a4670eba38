"""Attention's q, k and v from joined kernels (t2tcli.model.projections): the same values
and gradients as mesh-tensorflow's three products, from fewer, larger matmuls."""

from __future__ import annotations

import numpy as np
import pytest
import test_numerics

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.model import config as model_config
from t2tcli.model import gin_bindings, projections
from t2tcli.model import mesh as meshlib

# isort: split
import mesh_tensorflow as mtf
from mesh_tensorflow.transformer import attention as mtf_attention

tf1 = tf.compat.v1
SIZES = {"batch": 3, "length": 5, "memory_length": 5, "d_model": 6, "heads": 2, "d_kv": 4}


def _projected(joined: bool, with_query: bool, x_value: np.ndarray, **params_kwargs):
    """q, k and v (each as [batch, length, heads, d_kv]), d(loss)/d(x, wq, wk, wv), the
    kernels' values, and the matrix products the lowered graph runs as
    (equation, kernel shape)."""
    batch, length, memory, d_model, heads, d_kv = (mtf.Dimension(n, k) for n, k in SIZES.items())
    with tf.Graph().as_default() as tf_graph:
        tf1.set_random_seed(3)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        x = mtf.import_tf_tensor(mesh, tf.constant(x_value), mtf.Shape([batch, length, d_model]))
        params = mtf_attention.AttentionParams(
            mesh,
            query_input_dim=d_model,
            memory_input_dim=d_model,
            output_dim=d_model,
            key_dim=d_kv,
            value_dim=d_kv,
            query_heads_dims=[heads],
            memory_heads_dims=[heads],
            variable_dtype=mtf.VariableDType(tf.float32, tf.float32, tf.float32),
            **params_kwargs,
        )
        if joined:
            params = projections.joined(params, with_query)
        # As mesh-tensorflow's self-attention asks: q of x, then k and v of x with its
        # length renamed to memory_length.
        m = mtf.replace_dimensions(x, length, memory)
        q, k, v = params.compute_q(x), params.compute_k(m), params.compute_v(m)
        k, v = (mtf.replace_dimensions(t, memory, length) for t in (k, v))
        order = mtf.Shape([batch, length, heads, d_kv])
        outputs = [mtf.transpose(t, order) for t in (q, k, v)]
        # Weights make each output's gradient differ, so a swapped k and v would show.
        loss = mtf.reduce_sum(mtf.square(outputs[0]) + 2.0 * outputs[1] * outputs[1] + 3.0 * mtf.sin(outputs[2]))
        kernels = [params.wq, params.wk, params.wv]
        grads = mtf.gradients([loss], [x, *kernels])
        spec = meshlib.spec_from_hparams(registry.hparams("mtf_transformer_tiny"))
        lowering = mtf.Lowering(graph, {mesh: test_numerics.mesh_impl(spec, [""])})
        fetched = [lowering.export_to_tf_tensor(t) for t in (*outputs, *grads, *kernels)]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            values = sess.run(fetched)
        products = [
            (op.get_attr("equation").decode(), op.inputs[1].shape.as_list())
            for op in tf_graph.get_operations()
            if op.type == "Einsum"
        ]
    return values[:3], values[3:7], values[7:], products


@pytest.mark.parametrize("with_query", [True, False], ids=["self_attention_qkv", "enc_dec_kv"])
def test_joined_projections_are_mesh_tensorflows_products_with_their_gradients(with_query):
    x = np.random.default_rng(7).standard_normal((3, 5, 6)).astype(np.float32)
    (q, k, v), grads, kernels, products = _projected(True, with_query, x)
    (their_q, their_k, their_v), their_grads, their_kernels, their_products = _projected(False, with_query, x)
    for ours, theirs in zip(kernels, their_kernels, strict=True):
        np.testing.assert_array_equal(ours, theirs)  # one seed: the same variables
    # The products themselves, from the kernels' values.
    wq, wk, wv = (w.reshape(6, 2, 4) for w in kernels)
    for ours, theirs, kernel in ((q, their_q, wq), (k, their_k, wk), (v, their_v, wv)):
        np.testing.assert_allclose(ours, np.einsum("blm,mhk->blhk", x, kernel), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(grads, their_grads, strict=True):
        assert np.abs(ours).sum() > 0
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # Three products (forward, d(x), d(kernel)) for the joined kernel, [d_model, 3 or 2 x
    # heads x d_kv], and three more for a q of its own, where mesh-tensorflow runs three
    # per kernel. The joined kernel is an operand of two of them (forward and d(x)).
    joined_width = (3 if with_query else 2) * 8
    assert sum(shape == [6, joined_width] for _, shape in products) == 2
    assert len(products) == (3 if with_query else 6)
    assert len(their_products) == 9


def test_layers_that_do_not_fit_keep_mesh_tensorflows_products():
    x = np.random.default_rng(8).standard_normal((3, 5, 6)).astype(np.float32)
    (q, k, v), grads, _, products = _projected(True, True, x, fold_scaling_into_initializer=False)
    (their_q, their_k, their_v), their_grads, _, their_products = _projected(
        False, True, x, fold_scaling_into_initializer=False
    )
    assert products == their_products
    for ours, theirs in zip((q, k, v, *grads), (their_q, their_k, their_v, *their_grads), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_the_model_joins_projections_off_tpu_unless_the_mesh_splits_the_heads():
    tiny = registry.hparams("mtf_transformer_tiny")
    assert gin_bindings.joins_projections(model_config.build(tiny, 40, use_tpu=False))
    assert "t2tcli.HeadMajorSelfAttention.joined_projections = True" in gin_bindings.bindings(
        model_config.build(tiny, 40)
    )
    assert not gin_bindings.joins_projections(model_config.build(tiny, 40, use_tpu=True))
    assert not any("joined_projections" in b for b in gin_bindings.bindings(model_config.build(tiny, 40, use_tpu=True)))
    tiny.override_from_dict({"mesh_shape": "model:2", "layout": "heads:model"})
    assert not gin_bindings.joins_projections(model_config.build(tiny, 40, use_tpu=False))
    tiny.override_from_dict({"layout": "d_ff:model"})
    assert gin_bindings.joins_projections(model_config.build(tiny, 40, use_tpu=False))
    # Up to t5_small's width; t5_base's kernels run near the peak one by one.
    assert gin_bindings.joins_projections(model_config.build(registry.hparams("t5_small"), 40, use_tpu=False))
    assert not gin_bindings.joins_projections(model_config.build(registry.hparams("t5_base"), 40, use_tpu=False))
