"""Einsum operands in the order TensorFlow's kernel returns the result in
(t2tcli.model.einsum_order): the same products, and the model's gradients run that way."""

from __future__ import annotations

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.model import einsum_order
from t2tcli.model import mesh as meshlib

# isort: split
import mesh_tensorflow as mtf

tf1 = tf.compat.v1

# (equation as mesh-tensorflow writes it, what TensorFlow is given instead, or None)
EQUATIONS = [
    ("abc,abd->dc", "abd,abc->dc"),  # a kernel's gradient: [d_model, d_ff] from x and d(y)
    ("abcd,abce->abed", "abce,abcd->abed"),  # attention keys' gradient, head-major
    ("ab,bc->ca", "bc,ab->ca"),
    ("abc,cd->abd", None),  # forward products come out as written
    ("abc,dc->abd", None),
    ("abc,abd->cd", None),
    ("abcd,abed->abce", None),
    ("abcd,abce->abde", None),
    ("abc,dc->bad", None),  # no order gives it: left for TensorFlow to transpose
    ("abc->ab", None),
    ("ab,bc,cd->ad", None),
    ("...c,cd->...d", None),
    ("aab,bc->ac", None),
]


@pytest.mark.parametrize(("equation", "given"), EQUATIONS)
def test_operands_are_swapped_only_where_that_removes_the_transpose(equation, given):
    assert einsum_order.swapped(equation) == given


def _operands(equation: str, rng: np.random.Generator) -> list[np.ndarray]:
    sizes = dict(zip("abcde", (3, 4, 5, 6, 7), strict=True))
    inputs = equation.split("->")[0].split(",")
    return [rng.standard_normal([sizes[c] for c in labels]).astype(np.float32) for labels in inputs]


@pytest.mark.parametrize("equation", [e for e, _ in EQUATIONS[:9]])
def test_a_swapped_product_is_the_written_one(equation):
    left, right = _operands(equation, np.random.default_rng(0))
    expected = np.einsum(equation, left, right)
    np.testing.assert_allclose(einsum_order.einsum(equation, left, right), expected, rtol=1e-5, atol=1e-5)
    bf16 = [tf.cast(x, tf.bfloat16) for x in (left, right)]
    ours = tf.cast(einsum_order.einsum(equation, *bf16), tf.float32).numpy()
    exact = np.einsum(equation, *(tf.cast(x, tf.float32).numpy() for x in bf16))
    np.testing.assert_allclose(ours, exact, rtol=2e-2, atol=0.1)


@pytest.mark.parametrize("float32_einsums", [False, True], ids=["native", "emulated_bfloat16"])
def test_the_meshs_gradients_reach_tensorflow_in_their_results_order(float32_einsums):
    """A layer's forward product and both gradients, lowered by the model's CPU mesh (in
    bfloat16 computed in float32 where the CPU lacks it): the kernel's gradient reaches
    TensorFlow's Einsum swapped, and every value is numpy's."""
    dtype = tf.bfloat16 if float32_einsums else tf.float32
    tolerance = {"rtol": 3e-2, "atol": 0.3} if float32_einsums else {"rtol": 1e-5, "atol": 1e-4}
    rng = np.random.default_rng(1)
    x_value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w_value = rng.standard_normal((4, 5)).astype(np.float32)
    batch, length, d_model, d_ff = (
        mtf.Dimension(n, k) for n, k in (("batch", 2), ("length", 3), ("d_model", 4), ("d_ff", 5))
    )
    with tf.Graph().as_default() as tf_graph:
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        x = mtf.import_tf_tensor(mesh, tf.constant(x_value, dtype), mtf.Shape([batch, length, d_model]))
        w = mtf.import_tf_tensor(mesh, tf.constant(w_value, dtype), mtf.Shape([d_model, d_ff]))
        y = mtf.einsum([x, w], mtf.Shape([batch, length, d_ff]))
        loss = mtf.reduce_sum(mtf.square(y))
        dx, dw = mtf.gradients([loss], [x, w])
        spec = meshlib.spec_from_hparams(registry.hparams("mtf_transformer_tiny"))
        impl = meshlib.PlacementMeshImpl(spec.mtf_shape(), spec.mtf_layout(), [""], float32_einsums=float32_einsums)
        lowering = mtf.Lowering(graph, {mesh: impl})
        fetched = [tf.cast(lowering.export_to_tf_tensor(t), tf.float32) for t in (y, dx, dw)]
        with tf1.Session() as sess:
            y_out, dx_out, dw_out = sess.run(fetched)
        equations = sorted(op.get_attr("equation").decode() for op in tf_graph.get_operations() if op.type == "Einsum")
    # Forward and d(x) as mesh-tensorflow writes them; d(w), written 'abc,abd->dc' with
    # d(y) first, given as 'abd,abc->dc'.
    assert equations == ["abc,cd->abd", "abc,dc->abd", "abd,abc->dc"]
    y_np = np.einsum("blm,mf->blf", x_value, w_value)
    np.testing.assert_allclose(y_out, y_np, **tolerance)
    np.testing.assert_allclose(dx_out, np.einsum("blf,mf->blm", 2 * y_np, w_value), **tolerance)
    np.testing.assert_allclose(dw_out, np.einsum("blm,blf->mf", x_value, 2 * y_np), **tolerance)


def test_other_operand_counts_pass_through_as_written():
    rng = np.random.default_rng(2)
    operands = _operands("ab,bc,cd->ad", rng)
    np.testing.assert_allclose(
        einsum_order.einsum("ab,bc,cd->ad", *operands), np.einsum("ab,bc,cd->ad", *operands), rtol=1e-5, atol=1e-5
    )
    (single,) = _operands("abc->ab", rng)
    np.testing.assert_allclose(einsum_order.einsum("abc->ab", single), single.sum(-1), rtol=1e-5, atol=1e-5)
