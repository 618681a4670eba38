"""The model: hparams sets, T5 compatibility, schedules, and the EVAL / PREDICT contract."""

from __future__ import annotations

import math

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.decode import tf_predict
from t2tcli.errors import UserError
from t2tcli.model import config as model_config
from t2tcli.model import gin_bindings, graph, optimization
from t2tcli.train import estimator, model_fn

VOCAB = 40
T5_DIMS = {  # d_model, d_ff, heads, d_kv, layers (T5 v1.0)
    "t5_small": (512, 2048, 8, 64, 6),
    "t5_base": (768, 3072, 12, 64, 12),
    "t5_large": (1024, 4096, 16, 64, 24),
    "t5_3B": (1024, 16384, 32, 128, 24),
    "t5_11B": (1024, 65536, 128, 128, 24),
}
T5_V2_8 = {"t5_small": (1, 256), "t5_base": (2, 128), "t5_large": (8, 64), "t5_3B": (8, 16), "t5_11B": (8, 16)}


def tiny(**overrides):
    hp = registry.hparams("mtf_transformer_tiny")
    hp.override_from_dict(overrides)
    return hp


@pytest.mark.parametrize("name", sorted(T5_DIMS))
def test_t5_sets_have_t5_dimensions_and_v2_8_presets(name):
    hp = registry.hparams(name)
    d_model, d_ff, heads, d_kv, layers = T5_DIMS[name]
    assert (hp.d_model, hp.d_ff, hp.num_heads, hp.d_kv) == (d_model, d_ff, heads, d_kv)
    assert hp.num_encoder_layers == hp.num_decoder_layers == layers
    assert (hp.ffn_activation, hp.dropout_rate, hp.vocab_divisor) == ("relu", 0.1, 128)
    tpu = registry.hparams(name + "_tpu")
    model_parallelism, batch = T5_V2_8[name]
    assert tpu.mesh_shape == f"model:{model_parallelism},batch:{8 // model_parallelism}"
    assert tpu.batch_size == batch


def test_t5_small_variables_are_named_and_shaped_like_the_released_checkpoint():
    names = graph.variable_names(model_config.build(registry.hparams("t5_small"), 32100))
    assert names["shared/embedding"] == [32128, 512]
    assert names["encoder/block_000/layer_000/SelfAttention/q"] == [512, 512]
    assert names["encoder/block_000/layer_000/SelfAttention/relative_attention_bias"] == [8, 32]
    assert names["encoder/block_005/layer_001/DenseReluDense/wi/kernel"] == [512, 2048]
    assert names["decoder/block_005/layer_001/EncDecAttention/o"] == [512, 512]
    assert names["decoder/block_000/layer_002/DenseReluDense/wo/kernel"] == [2048, 512]
    assert names["decoder/final_layer_norm/scale"] == [512]
    assert names["encoder/block_002/layer_001/layer_norm/scale"] == [512]
    assert sum(math.prod(s) for s in names.values()) == 60_506_624  # T5-small's published size


def test_gin_bindings_follow_hparams():
    text = "\n".join(gin_bindings.bindings(model_config.build(tiny(d_ff=96, dropout_rate=0.25), 40)))
    assert "DenseReluDense.hidden_size = 96" in text and "SelfAttention.dropout_rate = 0.25" in text


def test_learning_rate_schedules():
    def lr(step, **kw):
        hp = tiny(learning_rate=0.01, warmup_steps=100, **kw)
        return float(optimization.learning_rate(hp, tf.constant(step), train_steps=1000))

    assert lr(49, learning_rate_schedule="constant") == pytest.approx(0.005)
    assert lr(999, learning_rate_schedule="constant") == pytest.approx(0.01)
    assert lr(399, learning_rate_schedule="rsqrt_decay") == pytest.approx(0.005)
    assert lr(499, learning_rate_schedule="linear_decay") == pytest.approx(0.005)
    with pytest.raises(UserError, match="optimizer='sgd'"):
        optimization.check(tiny(optimizer="sgd"))
    with pytest.raises(UserError, match="activation_dtype"):
        model_config.build(tiny(activation_dtype="float16"), VOCAB)


def _dataset(ids, with_targets, batch):
    feats = {"inputs": ids}
    if with_targets:
        feats["targets"] = ids
    return lambda params=None: tf.data.Dataset.from_tensor_slices(feats).batch(batch, drop_remainder=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained a few steps on copying (enough to exercise every mode)."""
    model_dir = str(tmp_path_factory.mktemp("model"))
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCAB, size=(64, 8)).astype(np.int32)
    ids[:, 6] = 1
    ids[:, 7] = 0
    hp = tiny(activation_dtype="float32", inputs_length=8, targets_length=8, batch_size=8)
    est = estimator.build_estimator(model_dir, model_config.build(hp, VOCAB), model_fn.TrainSettings(log_every_steps=5))
    est.train(lambda params=None: _dataset(ids, True, 8)().repeat(), max_steps=10)
    return model_dir, hp, ids


def test_eval_reports_loss_token_accuracy_and_perplexity(trained):
    model_dir, hp, ids = trained
    metrics = estimator.build_estimator(model_dir, model_config.build(hp, VOCAB)).evaluate(
        _dataset(ids, True, 8), steps=2
    )
    assert metrics["global_step"] == 10
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["xent"]), rel=1e-4)
    # The same cross-entropy from the other graph: teacher-forced log-likelihoods of PREDICT,
    # summed over the 16 rows' non-padding tokens (7 each: 6 ids and EOS) by hand.
    est = tf_predict.build_estimator(model_dir, model_config.build(hp, VOCAB))
    scores = [p["scores"] for p in est.predict(_dataset(ids[:16], True, 8))]
    assert metrics["xent"] == pytest.approx(-sum(scores) / (16 * 7), rel=1e-4)


def test_eval_metrics_of_a_batch_known_by_hand():
    """Per-token cross-entropy, weights (padding 0), argmax predictions and targets, as the
    EVAL graph hands them to its metrics: the values are worked out here by hand."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        xent = tf.constant([[1.0, 2.0, 0.0], [3.0, 0.5, 0.0]])
        weights = tf.constant([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
        predictions = tf.constant([[5, 6, 9], [7, 4, 9]])
        targets = tf.constant([[5, 8, 0], [7, 4, 0]])
        ops = model_fn._metric_fn(xent, weights, predictions, targets)
        session.run(tf.compat.v1.local_variables_initializer())
        session.run({name: update for name, (_, update) in ops.items()})
        values = session.run({name: value for name, (value, _) in ops.items()})
    assert values["token_accuracy"] == pytest.approx(3 / 4)  # 5, 7, 4 right; 6 for 8 wrong; padding ignored
    assert values["xent"] == pytest.approx((1.0 + 2.0 + 3.0 + 0.5) / 4)
    assert values["perplexity"] == pytest.approx(math.exp(6.5 / 4), rel=1e-5)


@pytest.mark.parametrize("decode", [{}, {"beam_size": 2}, {"temperature": 1.0, "top_k": 5}])
def test_predict_decodes_and_scores(trained, decode):
    model_dir, hp, ids = trained
    decode = dict(decode, max_decode_length=6)
    est = tf_predict.build_estimator(model_dir, model_config.build(hp, VOCAB), decode)
    preds = list(est.predict(_dataset(ids[:8], False, 8)))
    assert len(preds) == 8
    for p in preds:
        assert p["outputs"].dtype == np.int32 and p["outputs"].shape == (6,)
        assert p["scores"].dtype == np.float32 and p["scores"] <= 0
        eos = np.flatnonzero(p["outputs"] == 1)
        if eos.size:
            assert not p["outputs"][eos[0] + 1 :].any(), "0-padded after EOS"
    # Scoring the decoded outputs gives back the scores reported with them.
    outputs = np.stack([p["outputs"] for p in preds])
    scored = list(
        est.predict(
            lambda params=None: tf.data.Dataset.from_tensor_slices({"inputs": ids[:8], "targets": outputs}).batch(
                8, True
            )
        )
    )
    np.testing.assert_allclose([p["scores"] for p in scored], [p["scores"] for p in preds], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.stack([p["outputs"] for p in scored]), outputs)


def test_tpu_estimator_is_configured_from_flags(tmp_path):
    """Builds (does not run) the TPUEstimator that --tpu selects: no TPU is needed for this."""
    from tensorflow_estimator.python.estimator.tpu import tpu_config, tpu_estimator

    hp = registry.hparams("t5_base_tpu")
    settings = estimator.TPUSettings(tpu="grpc://127.0.0.1:8470", tpu_topology="2x2", iterations_per_loop=50)
    est = estimator.build_estimator(str(tmp_path), model_config.build(hp, 32100, use_tpu=True), tpu=settings)
    assert isinstance(est, tpu_estimator.TPUEstimator)
    assert est.config.tpu_config.iterations_per_loop == 50 and est.config.tpu_config.num_shards == 8
    assert est.config.tpu_config.per_host_input_for_training == tpu_config.InputPipelineConfig.BROADCAST
    assert est._ctx._train_batch_size == 128
    with pytest.raises(UserError, match="has 32 cores"):
        estimator.build_estimator(
            str(tmp_path),
            model_config.build(hp, 32100, use_tpu=True),
            tpu=estimator.TPUSettings(tpu="grpc://127.0.0.1:8470", tpu_topology="4x4"),
        )


def test_a_stack_builds_its_self_attention_bias_once_with_the_same_loss(trained, monkeypatch, tmp_path):
    """Every self-attention layer of a stack adds the same bias (masks and the shared
    relative-position table): t2tcli builds it once per stack, mesh-tensorflow once per
    layer, and the loss is the same either way."""
    from mesh_tensorflow.transformer import transformer_layers

    from t2tcli.model import attention

    model_dir, hp, ids = trained

    def table_lookups() -> int:
        """Forward einsums that read a [heads, buckets] relative-position table."""
        est = estimator.build_estimator(str(tmp_path), model_config.build(hp, VOCAB))
        with tf.Graph().as_default() as g:
            features = {k: tf.zeros([8, 8], tf.int32) for k in ("inputs", "targets")}
            est.model_fn(features, None, tf.estimator.ModeKeys.TRAIN, est.config)
        table = [hp.num_heads, hp.relative_attention_num_buckets]
        return sum(
            op.type == "Einsum" and "gradients" not in op.name and any(t.shape.as_list() == table for t in op.inputs)
            for op in g.get_operations()
        )

    def dev_xent() -> float:
        return estimator.build_estimator(model_dir, model_config.build(hp, VOCAB)).evaluate(
            _dataset(ids, True, 8), steps=2
        )["xent"]

    shared_lookups, shared_xent = table_lookups(), dev_xent()
    assert shared_lookups == 2  # the encoder's and the decoder's
    monkeypatch.setattr(attention.SelfAttention, "compute_bias", transformer_layers.SelfAttention.compute_bias)
    assert table_lookups() == hp.num_encoder_layers + hp.num_decoder_layers
    assert dev_xent() == pytest.approx(shared_xent, rel=1e-6)
