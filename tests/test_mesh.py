"""Mesh shapes and layouts: validation before any graph, and numerical equivalence.

The equivalence test is the guarantee behind model and data parallelism: splitting
d_ff / heads / vocab over `model:2`, or the batch over `batch:2`, must compute the same
loss and gradients as one device.
"""

from __future__ import annotations

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.model import config as model_config
from t2tcli.model import graph
from t2tcli.model import mesh as meshlib
from t2tcli.train import estimator

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf

tf1 = tf.compat.v1
VOCAB = 40


def tiny(**overrides):
    hp = registry.hparams("mtf_transformer_tiny")
    hp.override_from_dict(overrides)
    return hp


def test_parse_mesh_shape_and_layout():
    assert meshlib.parse_mesh_shape("model:2,batch:4") == [("model", 2), ("batch", 4)]
    assert meshlib.parse_mesh_shape("") == []
    assert meshlib.parse_layout("batch:batch;d_ff:model") == [("batch", "batch"), ("d_ff", "model")]
    spec = meshlib.spec_from_hparams(tiny(mesh_shape="model:2,batch:2"))
    assert spec.size == 4
    assert spec.split_of("d_ff") == 2 and spec.split_of("batch") == 2 and spec.split_of("d_model") == 1


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mesh_shape": "model=2"}, "mesh_shape: 'model=2'"),
        ({"mesh_shape": "model:2,model:2"}, "appears twice"),
        ({"layout": "dff:model"}, "unknown tensor dimension 'dff'; did you mean 'd_ff'"),
        ({"mesh_shape": "rows:2", "layout": "d_ff:cols"}, "names mesh dimension 'cols'"),
        ({"mesh_shape": "model:3", "layout": "d_ff:model"}, "splits d_ff=256 3 ways"),
    ],
)
def test_bad_mesh_or_layout_is_a_clear_error(overrides, message):
    with pytest.raises(UserError, match=message):
        meshlib.spec_from_hparams(tiny(**overrides))


def test_mesh_must_fit_devices_and_batch():
    spec = meshlib.spec_from_hparams(tiny(mesh_shape="batch:3", layout="batch:batch"))
    with pytest.raises(UserError, match="does not split 3 ways"):
        meshlib.check_batch(spec, 32)
    with pytest.raises(UserError, match="at most 64 logical CPU devices"):
        meshlib.placement_devices(meshlib.spec_from_hparams(tiny(mesh_shape="batch:128", layout="batch:batch")))
    with pytest.raises(UserError, match="has 8 cores"):
        meshlib.check_tpu(meshlib.spec_from_hparams(tiny(mesh_shape="model:2,batch:2")), "2x2")
    meshlib.check_tpu(meshlib.spec_from_hparams(tiny(mesh_shape="model:2,batch:4")), "v2-8")


def test_the_config_rejects_a_bad_mesh_before_a_graph_is_built():
    with pytest.raises(UserError, match="layout"):
        model_config.build(tiny(layout="heads:nowhere", mesh_shape="model:2"), VOCAB)


def _loss_and_grads(hp, features, init=None):
    """Loss, gradients by variable name and the initial master values, on hp's mesh."""
    with tf.Graph().as_default():
        tf1.set_random_seed(1)
        config = model_config.build(hp, VOCAB)
        g = graph.Graph(config, graph.placement_mesh_impl(config))
        batch = mtf.Dimension("batch", features["inputs"].shape[0])
        f = graph.import_features(g.mesh, {k: tf.constant(v) for k, v in features.items()}, batch)
        _, loss = g.logits(f, f["targets"], tf.estimator.ModeKeys.TRAIN, compute_loss=True)
        variables = g.graph.trainable_variables
        grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
        lowering = g.lower()
        tf_loss = lowering.export_to_tf_tensor(loss)
        tf_grads = {v.name: lowering.export_to_tf_tensor(gr) for v, gr in zip(variables, grads, strict=True)}
        masters = {v.op.name: v for v in tf1.global_variables() if v.op.name in tf_grads}
        with tf1.Session(config=estimator.session_config(config)) as sess:
            sess.run(tf1.global_variables_initializer())
            if init is not None:
                for name, var in masters.items():
                    var.load(init[name], sess)
            sess.run(lowering.copy_masters_to_slices())
            values = sess.run({n: v for n, v in masters.items()})
            out_loss, out_grads = sess.run([tf_loss, tf_grads])
        return out_loss, out_grads, values


def test_model_and_data_parallel_meshes_match_one_device():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCAB, size=(4, 8)).astype(np.int32)
    ids[:, -2:] = 0
    ids[:, -3] = 1
    features = {"inputs": ids, "targets": ids[:, ::-1].copy()}
    base = dict(activation_dtype="float32", dropout_rate=0.0)
    loss1, grads1, init = _loss_and_grads(tiny(**base), features)
    assert len(grads1) > 10
    for mesh_shape, layout in [
        ("model:2", "d_ff:model;heads:model;vocab:model"),
        ("batch:2", "batch:batch"),
    ]:
        loss, grads, _ = _loss_and_grads(tiny(mesh_shape=mesh_shape, layout=layout, **base), features, init)
        np.testing.assert_allclose(loss, loss1, rtol=1e-5, err_msg=mesh_shape)
        assert grads.keys() == grads1.keys()
        for name in grads1:
            np.testing.assert_allclose(grads[name], grads1[name], rtol=1e-3, atol=1e-6, err_msg=f"{mesh_shape} {name}")


def _dropout_masks(seed: int, mesh_shape: str, layout: str) -> list[np.ndarray]:
    """Each mesh position's slice of one dropout mask, in a fresh graph seeded with `seed`."""
    with tf.Graph().as_default():
        tf1.set_random_seed(seed)
        spec = meshlib.spec_from_hparams(tiny(mesh_shape=mesh_shape, layout=layout))
        impl = meshlib.PlacementMeshImpl(spec.mtf_shape(), spec.mtf_layout(), [""] * spec.size, False)
        mesh = mtf.Mesh(mtf.Graph(), "mesh")
        ones = mtf.ones(mesh, mtf.Shape([mtf.Dimension("batch", 8), mtf.Dimension("d_model", 32)]))
        masked = mtf.dropout(ones, is_training=True, keep_prob=0.5)
        lowering = mtf.Lowering(mesh.graph, {mesh: impl})
        with tf1.Session() as sess:
            return sess.run(lowering.tensors[masked].to_laid_out_tensor().all_slices)


def test_dropout_follows_the_graph_seed_and_replicated_slices_agree():
    first, again, other = (_dropout_masks(seed, "batch:2", "batch:batch") for seed in (5, 5, 6))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True)), "same seed, same masks"
    assert not np.array_equal(first[0], other[0]), "another seed, other masks"
    assert not np.array_equal(first[0], first[1]), "the batch's two halves are masked apart"
    replicated = _dropout_masks(5, "model:2", "d_ff:model")  # [batch, d_model] is whole on both
    assert np.array_equal(replicated[0], replicated[1])
