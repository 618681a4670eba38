"""The few-pass Adafactor against mesh-tensorflow's, the reference it must equal."""

from __future__ import annotations

import numpy as np
import pytest
import test_numerics

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.model import mesh as meshlib
from t2tcli.model import optimization
from t2tcli.model.adafactor import FewPassAdafactor

# isort: split
import mesh_tensorflow as mtf

tf1 = tf.compat.v1

# (dimension names, sizes): factored over a leading and a trailing dimension, over two
# trailing ones of three, and not factored (a dimension under 128), twice: variables of one
# shape are what mesh-tensorflow stacks on a mesh of several devices.
SHAPES = [
    (("vocab", "d_model"), (256, 128)),
    (("d_model", "d_ff"), (128, 300)),
    (("kv", "heads", "d_model"), (4, 128, 160)),
    (("heads", "d_kv"), (16, 8)),
    (("heads", "d_kv"), (16, 8)),
]
SPLIT_LAYOUT = "vocab:model;d_ff:model;heads:model"


def _train(optimizer_class, mesh_shape: str, steps: int = 3) -> dict[str, np.ndarray]:
    """Every variable as a checkpoint holds it (slots included) after `steps` updates of
    a toy loss whose gradients vary by row and column; half of w3's gradient is exactly zero."""
    hp = registry.hparams("mtf_transformer_tiny")
    hp.mesh_shape, hp.layout = (mesh_shape, SPLIT_LAYOUT) if mesh_shape else ("", "")
    spec = meshlib.spec_from_hparams(hp)
    rng = np.random.default_rng(0)
    with tf.Graph().as_default():
        global_step = tf1.train.get_or_create_global_step()
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        loss = None
        for i, (names, sizes) in enumerate(SHAPES):
            shape = mtf.Shape([mtf.Dimension(n, k) for n, k in zip(names, sizes, strict=True)])
            start = rng.standard_normal(sizes).astype(np.float32)
            w = mtf.get_variable(mesh, f"w{i}", shape, initializer=tf1.constant_initializer(start))
            target = rng.standard_normal(sizes).astype(np.float32)
            if i == 3:
                target[: sizes[0] // 2] = start[: sizes[0] // 2] ** 2
            term = mtf.reduce_sum(mtf.square(w * w - mtf.import_tf_tensor(mesh, tf.constant(target), shape)))
            loss = term if loss is None else loss + term
        variables = graph.trainable_variables
        grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
        update_ops = optimizer_class(learning_rate=tf.constant(0.01)).apply_grads(grads, variables)
        lowering = mtf.Lowering(graph, {mesh: test_numerics.mesh_impl(spec, [""] * spec.size)})
        update = tf.group([lowering.lowered_operation(op) for op in update_ops])
        with tf.control_dependencies([update]):
            step = tf1.assign_add(global_step, 1)
        saved = {v.op.name: v for v in tf1.global_variables() if v is not global_step}
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            before = sess.run(saved)
            for _ in range(steps):
                sess.run(step)
            sess.run(lowering.copy_slices_to_masters())
            after = sess.run(saved)
    for name in (f"w{i}" for i in range(len(SHAPES))):
        assert np.abs(after[name] - before[name]).max() > 1e-3, f"{name} did not move"
    return after


@pytest.mark.parametrize("mesh_shape", ["", "model:2"], ids=["one_device", "split_over_two"])
def test_few_pass_adafactor_is_mesh_tensorflows_update(mesh_shape):
    reference = _train(mtf.optimize.AdafactorOptimizer, mesh_shape)
    few_pass = _train(FewPassAdafactor, mesh_shape)
    assert sorted(few_pass) == sorted(reference)  # same slots, same names: checkpoints carry over
    assert {"w0_slot_vr", "w0_slot_vc", "w3_slot_v"} <= set(reference)
    for name, value in reference.items():
        np.testing.assert_allclose(few_pass[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_training_updates_every_variable_in_place_by_a_sum_of_squares_scale(monkeypatch, tmp_path):
    from test_numerics import _model_graph_ops

    tiny = registry.hparams("mtf_transformer_tiny")

    def counts() -> tuple[int, int, int]:
        ops = _model_graph_ops(tiny, tf.estimator.ModeKeys.TRAIN, tmp_path)
        in_place = sum(op.type == "ResourceApplyGradientDescent" for op in ops)
        l2 = sum(op.type == "L2Loss" for op in ops)
        trainable = len(ops[0].graph.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES))
        return in_place, l2, trainable

    in_place, l2, trainable = counts()
    # One in-place update per variable; two sums of squares each (the update's RMS, the parameter scale).
    assert in_place == trainable > 0 and l2 == 2 * trainable
    monkeypatch.setattr(optimization, "ADAFACTOR", mtf.optimize.AdafactorOptimizer)
    assert counts()[:2] == (0, 0)


def test_no_variable_is_read_after_its_in_place_update_can_start(tmp_path):
    """Every read of a variable in the training graph is ordered before the variable's
    in-place update: the backward pass reads kernels again (for its inputs' gradients),
    and the learning rate and Adafactor's decay read the global step, which the step
    increments. An update that could run first would make runs with one seed differ."""
    from test_numerics import _model_graph_ops

    ops = _model_graph_ops(registry.hparams("mtf_transformer_tiny"), tf.estimator.ModeKeys.TRAIN, tmp_path)

    def ancestors(*start) -> set:
        seen, todo = set(), list(start)
        while todo:
            current = todo.pop()
            for parent in [t.op for t in current.inputs] + list(current.control_inputs):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen

    writes = ("ResourceApplyGradientDescent", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
    step = [op for op in ops if op.type == "NoOp" and "ResourceApplyGradientDescent" in {a.type for a in ancestors(op)}]
    in_step = ancestors(*step)  # what a training step runs (not, e.g., the saver's or an initializer's ops)
    updates = [op for op in in_step if op.type in writes]
    assert {op.type for op in updates} >= {"ResourceApplyGradientDescent", "AssignAddVariableOp"}
    reads: dict = {}
    for op in ops:
        if op.type == "ReadVariableOp" and op in in_step:
            reads.setdefault(op.inputs[0].op, []).append(op)
    for update in updates:
        before = ancestors(update)
        late = [read.name for read in reads[update.inputs[0].op] if read not in before]
        assert not late, (update.name, late)
