"""t2tcli.decode.fast computes what mesh-tensorflow's decode and scoring compute.

Both engines run on the same trained toy checkpoint through the same Estimator
contract; in float32 they must agree on teacher-forced scores, greedy and beam decodes.
"""

from __future__ import annotations

import numpy as np
import pytest
from toy_model import SAVE_EVERY, toy_model  # noqa: F401  (session fixture)

from t2tcli.compat import tf
from t2tcli.data.vocabulary.vocab import EOS_ID, Vocabulary
from t2tcli.decode import fast, fast_kernels, fast_step, fast_top_k, fast_weights, search, tf_predict
from t2tcli.decode.settings import DecodeSettings
from t2tcli.errors import UserError
from t2tcli.model import config as model_config
from t2tcli.model import hardware, kernel_layout, run_records, weight_names

BATCH = 8
TEXTS = ["d", "a b c", "e e a a b a", "j d g j g i g h d", "c", "f g c g h d e j", "b b b b", "i h g f e"]


@pytest.fixture(scope="module")
def toy(toy_model):  # noqa: F811
    _, hp, _ = run_records.load(toy_model["model_dir"])
    vocab = Vocabulary(f"{toy_model['model_dir']}/vocab.model")
    ids = np.zeros([BATCH, hp.inputs_length], np.int32)
    for row, text in enumerate(TEXTS):
        x = vocab.encode(text) + [EOS_ID]
        ids[row, : len(x)] = x
    return toy_model["model_dir"], hp, vocab.vocab_size, ids


def _predict(
    toy, engine: str, dtype: str = "float32", targets: np.ndarray | None = None, checkpoint: str | None = None, **decode
):
    model_dir, hp, vocab_size, ids = toy
    hp = hp.copy()
    hp.activation_dtype = dtype
    decode = {"engine": engine, "max_decode_length": 16, **decode}
    est = tf_predict.build_estimator(model_dir, model_config.build(hp, vocab_size), decode)
    features = {"inputs": ids} if targets is None else {"inputs": ids, "targets": targets}
    preds = list(
        est.predict(
            lambda params=None: tf.data.Dataset.from_tensor_slices(features).batch(BATCH, True),
            checkpoint_path=checkpoint,
        )
    )
    return np.stack([p["outputs"] for p in preds]), np.array([p["scores"] for p in preds])


def test_teacher_forced_scores_match_mesh_tensorflow(toy):
    ids = toy[3]
    # The inputs themselves (the model's copy: likely) and a corrupted copy (unlikely).
    targets = np.concatenate([ids[:4], np.where(ids[4:] > 1, 5, ids[4:])])
    _, fast_scores = _predict(toy, "fast", targets=targets)
    _, mesh = _predict(toy, "mesh", targets=targets)
    np.testing.assert_allclose(fast_scores, mesh, rtol=1e-4, atol=1e-4)
    assert fast_scores[:4].mean() > fast_scores[4:].mean()


@pytest.mark.parametrize(
    "transposed, ffn_padding, beam_onednn, packed, softmax_lse",
    [
        (False, 0, False, False, False),
        (True, 0, False, False, False),
        (False, 16, False, False, False),
        (False, 0, True, False, False),
        (True, 0, False, True, True),
    ],
    ids=["kernels_in_out", "kernels_out_in", "ffn_padded", "beam_attention_onednn", "kernels_packed"],
)
@pytest.mark.parametrize("decode", [{"beam_size": 1}, {"beam_size": 4, "alpha": 0.0}])
def test_decodes_match_mesh_tensorflow(
    toy, decode, transposed, ffn_padding, beam_onednn, packed, softmax_lse, monkeypatch
):
    """Every layout of the fast engine's kernels and every kernel choice
    (kernel_layout.transposed_kernels, ffn_padding, packed_kernels, log_sum_exp_by_softmax
    and beam_attention_on_onednn pick one per CPU) decodes as mesh-tensorflow does."""
    monkeypatch.setattr(kernel_layout, "transposed_kernels", lambda machine: transposed)
    monkeypatch.setattr(kernel_layout, "ffn_padding", lambda machine, d_ff: ffn_padding)
    monkeypatch.setattr(kernel_layout, "packed_kernels", lambda machine, beam_search: packed)
    monkeypatch.setattr(fast_kernels, "beam_attention_on_onednn", lambda: beam_onednn)
    monkeypatch.setattr(fast_kernels, "log_sum_exp_by_softmax", lambda: softmax_lse)
    fast_ids, fast_scores = _predict(toy, "fast", **decode)
    mesh_ids, mesh_scores = _predict(toy, "mesh", **decode)
    np.testing.assert_array_equal(fast_ids, mesh_ids)
    np.testing.assert_allclose(fast_scores, mesh_scores, rtol=1e-4, atol=1e-4)
    assert (fast_ids == EOS_ID).any(axis=1).all(), "every row of a trained copy model ends"


@pytest.mark.slow
def test_beam_length_penalty_matches_mesh_tensorflow_where_it_picks_the_winner(toy):
    """alpha > 0 (0.6 is the default) against mesh-tensorflow's own beam search, on the
    half-trained checkpoint, whose hypotheses are close enough that a strong penalty
    (score / ((5 + length) / 6) ** alpha favours longer ones) changes which one wins."""
    half_trained = f"{toy[0]}/model.ckpt-{SAVE_EVERY}"
    unpenalized, _ = _predict(toy, "fast", checkpoint=half_trained, beam_size=4, alpha=0.0)
    for alpha in (0.6, 5.0):
        fast_ids, fast_scores = _predict(toy, "fast", checkpoint=half_trained, beam_size=4, alpha=alpha)
        mesh_ids, mesh_scores = _predict(toy, "mesh", checkpoint=half_trained, beam_size=4, alpha=alpha)
        np.testing.assert_array_equal(fast_ids, mesh_ids)
        np.testing.assert_allclose(fast_scores, mesh_scores, rtol=1e-4, atol=1e-4)
    changed = ~(fast_ids == unpenalized).all(axis=1)
    assert changed.any(), "at alpha 5 the penalty picks another hypothesis for some line"


def test_a_strong_length_penalty_picks_another_beam_winner(toy):
    """The fast engine's beam search ranks finished hypotheses by score / ((5 + length) / 6)
    ** alpha: on the half-trained checkpoint, whose hypotheses are close, alpha 5 picks
    longer ones than alpha 0 for some line (the slow test above checks it against
    mesh-tensorflow; this is its fast guard, one graph and one restore)."""
    model_dir, hp, vocab_size, ids = toy
    hp = hp.copy()
    hp.activation_dtype = "float32"
    with tf.Graph().as_default():
        w = fast_weights.Weights(model_config.build(hp, vocab_size))
        decoded = {
            alpha: search.decode(w, tf.constant(ids), DecodeSettings.of({"beam_size": 4, "alpha": alpha}, hp), 16).ids
            for alpha in (0.0, 5.0)
        }
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, f"{model_dir}/model.ckpt-{SAVE_EVERY}")
            plain, penalized = session.run([decoded[0.0], decoded[5.0]])
    changed = [i for i in range(BATCH) if not (plain[i] == penalized[i]).all()]
    assert changed, "at alpha 5 the penalty picks another hypothesis for some line"

    def length(row: np.ndarray) -> int:
        ends = np.flatnonzero(row == EOS_ID)
        return int(ends[0]) if ends.size else len(row)

    assert all(length(penalized[i]) >= length(plain[i]) for i in changed), "the penalty favours longer hypotheses"


def test_packed_products_equal_matmuls_and_keep_the_kernel_they_first_saw():
    """oneDNN's product with its kernel laid out once (kernel_layout.packed_kernels) gives
    MatMul's values for 2-D and 3-D inputs, a kernel held either way round, with its ReLU
    or an addend inside it, and any number of rows in one session; and it keeps
    multiplying by the kernel of its first call, which is why only weights that a session
    never changes (held ones) may take it."""
    if not fast_kernels.machine().onednn_enabled:
        pytest.skip("oneDNN is off in this process (TF_ENABLE_ONEDNN_OPTS=0)")
    tf1 = tf.compat.v1
    rng = np.random.default_rng(0)
    with tf.Graph().as_default() as graph:
        kernel = tf1.Variable(rng.standard_normal((48, 40)).astype(np.float32))
        x = tf1.placeholder(tf.float32, [None, 48])
        addend = tf1.placeholder(tf.float32, [None, 40])
        x3, addend3 = tf.reshape(x, [-1, 2, 48]), tf.reshape(addend, [-1, 2, 40])
        read = tf.convert_to_tensor(kernel)
        cases = [
            (x, read, False, False, None),
            (x, tf.transpose(read), True, False, None),
            (x3, read, False, False, None),
            (x, read, False, True, None),
            (x3, tf.transpose(read), True, False, addend3),
        ]
        packed, plain = (
            [fast_kernels.dense(a, k, t, on, relu, plus) for a, k, t, relu, plus in cases] for on in (True, False)
        )
        assert sum(op.type == "_MklNativeFusedMatMul" for op in graph.get_operations()) == len(cases)
        change = kernel.assign(kernel * 2.0 + 1.0)
        with tf1.Session() as session:
            session.run(kernel.initializer)
            first = {}
            for rows in (64, 6, 64):
                feed = {x: rng.standard_normal((rows, 48)).astype(np.float32)}
                feed[addend] = rng.standard_normal((rows, 40)).astype(np.float32)
                got, want = session.run([packed, plain], feed)
                for a, b in zip(got, want, strict=True):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
                first[rows] = feed, want
            session.run(change)
            feed, before = first[64]
            got, now = session.run([packed, plain], feed)
            for kept, old, new in zip(got, before, now, strict=True):
                np.testing.assert_allclose(kept, old, rtol=1e-5, atol=1e-4)
                assert np.abs(new - old).max() > 1.0, "MatMul reads the changed kernel"


def test_only_held_weights_are_packed_as_their_search_asks(toy, monkeypatch):
    """A session's held weights may be laid out once, for greedy or beam search as the
    machine's policy says for each; weights read per batch (an exported SavedModel's,
    whose variables may be restored again) never are."""
    _, hp, vocab_size, _ = toy
    monkeypatch.setattr(kernel_layout, "packed_kernels", lambda machine, beam_search: not beam_search)
    with tf.Graph().as_default():
        config = model_config.build(hp, vocab_size)
        assert config.kernels.packed_kernels and not config.kernels.packed_kernels_in_beam_search
        assert fast_weights.Weights(config, held=True).packed
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
            assert not fast_weights.Weights(config, held=True, beam_search=True).packed
            assert not fast_weights.Weights(config).packed


def test_only_the_engines_own_graph_uses_onednn_internal_ops_and_16_bit_integer_tricks(toy, monkeypatch):
    """A decode graph on held weights (the engine's own session) may lay kernels out once and
    read bfloat16 as int16; one on weights read per batch (an exported SavedModel's) keeps
    plain ops, so it runs wherever TensorFlow does."""
    if not fast_kernels.machine().onednn_cpu():
        pytest.skip("the engine uses oneDNN's ops on CPUs with oneDNN on only")
    _, hp, vocab_size, _ = toy
    hp = hp.copy()
    hp.activation_dtype, hp.ffn_activation = "bfloat16", "relu"
    monkeypatch.setattr(kernel_layout, "packed_kernels", lambda machine, beam_search: True)
    # Built, never run: the graph of a CPU that multiplies bfloat16 natively, on any CPU.
    monkeypatch.setattr(fast_kernels, "bfloat16_in_float32", lambda: False)
    decode = DecodeSettings.of({"beam_size": 1, "compute_scores": False}, hp)
    for held in (True, False):
        with tf.Graph().as_default() as graph:
            w = fast_weights.Weights(model_config.build(hp, vocab_size), held=held)
            search.decode(w, tf.compat.v1.placeholder(tf.int32, [None, 8]), decode, 4)
            functions = graph.as_graph_def().library.function
            ops = {op.type for op in graph.get_operations()} | {n.op for f in functions for n in f.node_def}
        assert ({"_MklNativeFusedMatMul", "Bitcast"} <= ops) == held
        assert not ({"_MklNativeFusedMatMul", "Bitcast"} & ops) or held


def test_the_engines_predict_graph_lays_kernels_out_once_for_the_search_the_policy_names(toy, monkeypatch):
    """t2t-decode's graph asks kernel_layout.packed_kernels for its own search: with a
    policy of greedy only, a greedy decode multiplies on oneDNN's laid-out kernels and a
    beam search on MatMul."""
    if not fast_kernels.machine().onednn_cpu():
        pytest.skip("the engine lays kernels out on CPUs with oneDNN on only")
    _, hp, vocab_size, _ = toy
    hp = hp.copy()
    hp.activation_dtype = "bfloat16"
    monkeypatch.setattr(kernel_layout, "packed_kernels", lambda machine, beam_search: not beam_search)
    monkeypatch.setattr(fast_kernels, "bfloat16_in_float32", lambda: False)  # as in the test above
    for beam_size, packed in ((1, True), (4, False)):
        decode = DecodeSettings.of({"beam_size": beam_size, "compute_scores": False}, hp)
        with tf.Graph().as_default() as graph:
            inputs = tf.compat.v1.placeholder(tf.int32, [None, 8])
            tf_predict._fast_predict_spec(model_config.build(hp, vocab_size), {"inputs": inputs}, decode)
            functions = graph.as_graph_def().library.function
            ops = {op.type for op in graph.get_operations()} | {n.op for f in functions for n in f.node_def}
        assert ("_MklNativeFusedMatMul" in ops) is packed, f"beam {beam_size}"


def test_held_weights_are_prepared_once_a_session_and_decode_as_read_ones(toy, monkeypatch):
    """Held, the kernels in their prepared dtype and layout are computed by the local init
    op (after the restore), not again for each batch: the decode is the one of weights
    prepared per batch, and a checkpoint variable changed after the init op leaves it so
    until the op runs again."""
    model_dir, hp, vocab_size, ids = toy
    hp = hp.copy()
    hp.activation_dtype = "bfloat16"  # every kernel is cast, so every one is held
    # Both on MatMul, so both round their sums alike (kernels laid out once round otherwise).
    monkeypatch.setattr(kernel_layout, "packed_kernels", lambda machine, beam_search: False)
    tf1 = tf.compat.v1
    settings = DecodeSettings.of({"beam_size": 1}, hp)
    with tf.Graph().as_default():
        config = model_config.build(hp, vocab_size)
        held = search.decode(fast_weights.Weights(config, held=True), tf.constant(ids), settings, 16).ids
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
            per_batch = search.decode(fast_weights.Weights(config), tf.constant(ids), settings, 16).ids
        prepare = tf1.local_variables_initializer()
        (embedding,) = [v for v in tf1.global_variables() if v.op.name == weight_names.EMBEDDING]
        scramble = embedding.assign(tf.reverse(embedding, axis=[0]))
        saver = tf1.train.Saver()
        assert all(v.op.name.startswith("held_weights/") for v in tf1.local_variables())
        with tf1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(model_dir))
            session.run(prepare)
            before, expected = session.run([held, per_batch])
            np.testing.assert_array_equal(before, expected)
            session.run(scramble)
            kept, changed = session.run([held, per_batch])
            np.testing.assert_array_equal(kept, before)
            assert (changed != before).any(), "the scrambled embedding changes a decode that reads it"
            session.run(prepare)
            np.testing.assert_array_equal(session.run(held), changed)


class _Reached(Exception):
    """Raised by a spy in place of the beam search it stands for."""


@pytest.mark.parametrize("engine", ["fast", "mesh"])
def test_the_model_fn_hands_each_engines_beam_search_its_alpha(engine, monkeypatch, tmp_path):
    """The decode settings' alpha reaches the beam search of either engine the model_fn
    runs: t2tcli.decode.search's, or mesh-tensorflow's Bitransformer.decode."""
    from mesh_tensorflow.transformer import transformer

    from t2tcli import registry

    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs, positional=args)
        raise _Reached

    if engine == "fast":
        monkeypatch.setattr(search, "beam_search", lambda w, inputs, length, beam_size, alpha, *_: spy(alpha=alpha))
    else:
        monkeypatch.setattr(transformer.Bitransformer, "decode", lambda self, *args, **kwargs: spy(**kwargs))
    hp = registry.hparams("mtf_transformer_tiny")
    hp.activation_dtype = "float32"
    decode = {"engine": engine, "beam_size": 4, "alpha": 0.7, "max_decode_length": 8}
    est = tf_predict.build_estimator(str(tmp_path), model_config.build(hp, 40), decode)
    with tf.Graph().as_default(), pytest.raises(_Reached):
        features = {"inputs": tf.zeros([2, hp.inputs_length], tf.int32)}
        est.model_fn(features, None, tf.estimator.ModeKeys.PREDICT, est.config)
    assert seen["alpha"] == pytest.approx(0.7)


def _search(toy, decode: dict) -> dict:
    """search.decode of the toy's rows in a graph of its own: the loop's own outputs."""
    model_dir, hp, vocab_size, ids = toy
    hp = hp.copy()
    hp.activation_dtype = "float32"
    settings = DecodeSettings(**{"beam_size": 1, "alpha": 0.0, "temperature": 0.0, "top_k": 0, **decode})
    with tf.Graph().as_default():
        decoded = search.decode(
            fast_weights.Weights(model_config.build(hp, vocab_size)), tf.constant(ids), settings, 16
        )
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(model_dir))
            return session.run(vars(decoded))


@pytest.mark.parametrize("decode", [{"beam_size": 1}, {"beam_size": 4, "alpha": 0.6}], ids=["greedy", "beam4"])
def test_finished_inputs_leave_the_loop_without_changing_its_answers(toy, decode, monkeypatch):
    """The toy's lines end at different steps: once a share of them has, they stop being
    computed (fewer row steps than rows x steps), and every answer and score is the one
    a loop that keeps them all computes."""
    rows = BATCH * decode["beam_size"]
    leaving = _search(toy, decode)
    monkeypatch.setattr(search, "COMPACT_SHARE", 2.0)  # more than all: nothing leaves
    staying = _search(toy, decode)
    assert staying["row_steps"] == rows * staying["steps"]
    assert leaving["row_steps"] < rows * leaving["steps"]
    assert leaving["steps"] == staying["steps"]
    np.testing.assert_array_equal(leaving["ids"], staying["ids"])
    np.testing.assert_allclose(leaving["scores"], staying["scores"], rtol=1e-5, atol=1e-5)
    ends = [np.flatnonzero(row == EOS_ID)[0] for row in staying["ids"]]
    assert len(set(ends)) > 1, "the toy's lines end at different steps"


@pytest.mark.parametrize("recent_steps, beam_onednn", [(1, False), (3, True)], ids=["eigen", "onednn"])
def test_beam_caches_moved_into_their_older_part_change_no_answer(toy, recent_steps, beam_onednn, monkeypatch):
    """Beam search's caches move their recent positions into the part kept by input every
    few steps, after which each row reads the older part through its beam mask (on either
    kernel an input's beams attend with): the answers and scores are those of caches
    never moved (16 steps: the toy's whole decode), also as inputs leave the loop."""
    decode = {"beam_size": 4, "alpha": 0.6}
    monkeypatch.setattr(fast_kernels, "beam_attention_on_onednn", lambda: beam_onednn)
    monkeypatch.setattr(fast_step, "RECENT_STEPS", 16)
    one_piece = _search(toy, decode)
    monkeypatch.setattr(fast_step, "RECENT_STEPS", recent_steps)
    moved = _search(toy, decode)
    assert moved["steps"] == one_piece["steps"] > recent_steps + 1
    assert moved["row_steps"] < BATCH * 4 * moved["steps"], "inputs left the loop"
    np.testing.assert_array_equal(moved["ids"], one_piece["ids"])
    np.testing.assert_allclose(moved["scores"], one_piece["scores"], rtol=1e-5, atol=1e-5)


def test_bfloat16_decodes_like_float32(toy):
    ids32, scores32 = _predict(toy, "fast")
    ids16, scores16 = _predict(toy, "fast", dtype="bfloat16")
    assert (ids16 == ids32).all(axis=1).mean() >= 0.75
    same = (ids16 == ids32).all(axis=1)
    np.testing.assert_allclose(scores16[same], scores32[same], atol=0.1)


def test_beam_with_length_penalty_and_sampling_keep_the_contract(toy):
    for decode in ({"beam_size": 3, "alpha": 0.6}, {"temperature": 1.0, "top_k": 3}):
        ids, scores = _predict(toy, "fast", **decode)
        assert ids.shape == (BATCH, 16) and (scores <= 0).all()
        for row in ids:
            eos = np.flatnonzero(row == EOS_ID)
            assert eos.size and not row[eos[0] + 1 :].any(), "ends with EOS, 0-padded after it"


def test_an_unknown_ffn_activation_is_refused_before_a_graph_is_built(toy):
    model_dir, hp, vocab_size, ids = toy
    hp = hp.copy()
    hp.ffn_activation = "elu"
    with pytest.raises(UserError, match="ffn_activation='elu': use one of relu, gelu"):
        tf_predict.build_estimator(model_dir, model_config.build(hp, vocab_size), {"engine": "fast"})


@pytest.mark.parametrize("n", [4096, 4000, 1000, 256])
def test_top_k_by_chunks_is_top_k_with_ties_to_the_lower_position(n):
    """The two-stage top-k (chunk maxima, then the best chunks) keeps tf.math.top_k's
    answer exactly, ties included: logits drawn from five values tie everywhere."""
    rng = np.random.default_rng(1)
    logits = np.concatenate([rng.integers(0, 5, size=[32, n]), rng.normal(size=[32, n])], axis=0).astype(np.float32)
    k = 8
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        top, at, peak = session.run(fast_top_k.top_k_by_chunks(tf.constant(logits), k))
    expected = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(at, expected)
    np.testing.assert_array_equal(top, np.take_along_axis(logits, expected, axis=1))
    np.testing.assert_array_equal(peak[:, 0], logits.max(axis=1))


@pytest.mark.parametrize("n", [32128, 4000, 1000, 256])
def test_best_tokens_is_argmax_with_ties_to_the_lower_position(n):
    """The best token by chunk maxima is tf.argmax's, ties included (logits drawn from five
    values tie within and across chunks), for widths split in chunks of 128 and 32 and one
    (1,000) that falls back to tf.argmax; and for a batch of no rows."""
    rng = np.random.default_rng(2)
    logits = np.concatenate([rng.integers(0, 5, size=[32, n]), rng.normal(size=[32, n])], axis=0).astype(np.float32)
    logits[0] = -1e9  # a row that is all one value
    logits[1] = 0.0
    logits[1, [n // 2 + 3, n // 2 + 5, n - 1]] = 7.0  # its maximum first past the first chunks
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        best = session.run(fast_top_k.best_tokens(tf.constant(logits)))
        none = session.run(fast_top_k.best_tokens(tf.zeros([0, n])))
    assert best.dtype == np.int32 and none.shape == (0,)
    np.testing.assert_array_equal(best, np.argmax(logits, axis=1))
    assert best[1] == n // 2 + 3


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("n", [32128, 256])
def test_best_tokens_of_16_bit_logits_are_argmax_of_their_values(n, dtype, device, monkeypatch):
    """16-bit logits' best tokens, reduced as integers where every row's maximum is
    positive, are np.argmax's of the same values as float32, ties included; a batch with a
    row of negatives or a row whose maximum is zero (-0 first) is reduced as float32, and
    so is every batch where the engine runs on a GPU (no int16 in its graph)."""
    if device == "gpu":
        monkeypatch.setattr(fast_kernels, "machine", lambda: hardware.Machine("gpu", gpu_capability=(8, 0)))
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.integers(-2, 3, size=[16, n]), rng.normal(size=[16, n])], axis=0)
    values[0] = 1.0  # all one value
    values[1, [5, n // 2, n - 1]] = 9.0  # the maximum in a middle chunk, then tied later
    odd = values.copy()
    odd[20] = -np.abs(odd[20]) - 1  # no number >= 0
    odd[21] = -np.abs(odd[21]) - 1
    odd[21, 7], odd[21, n - 3] = -0.0, 0.0  # the maximum 0, first as -0
    with tf.Graph().as_default() as graph, tf.compat.v1.Session() as session:
        for case in (values, odd):
            logits = tf.cast(tf.constant(case, tf.float32), dtype)
            best, rounded = session.run([fast_top_k.best_tokens(logits), tf.cast(logits, tf.float32)])
            np.testing.assert_array_equal(best, np.argmax(rounded, axis=1))
        bitcasts = [op for op in graph.get_operations() if op.type == "Bitcast"]
    assert best[21] == 7
    assert bool(bitcasts) == (device == "cpu")


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_relu_of_16_bit_floats_by_their_bits_is_tensorflows(dtype, device, monkeypatch):
    """The engine's ReLU gives TensorFlow's values: negatives, -0, +-inf, tiny values (its -0
    is +0, an equal value); on a GPU it is tf.nn.relu."""
    if device == "gpu":
        monkeypatch.setattr(fast_kernels, "machine", lambda: hardware.Machine("gpu", gpu_capability=(8, 0)))
    values = np.concatenate([np.random.default_rng(4).normal(size=1000), [-0.0, 0.0, np.inf, -np.inf, 1e-30, -1e-30]])
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        x = tf.cast(tf.constant(values, tf.float32), dtype)
        ours, theirs = session.run([fast_kernels.relu(x), tf.nn.relu(x)])
        relus = sum(op.type == "Relu" for op in tf.compat.v1.get_default_graph().get_operations())
    assert relus == (2 if device == "gpu" or dtype == "float32" else 1)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours.astype(np.float32), theirs.astype(np.float32))


def test_trim_padding_cuts_columns_no_row_uses():
    ids = np.array([[5, 6, 1, 0, 0, 0], [7, 1, 0, 0, 0, 0]], np.int32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        trimmed = session.run(fast.trim_padding(tf.constant(ids)))
        empty = session.run(fast.trim_padding(tf.zeros([2, 4], tf.int32)))
    np.testing.assert_array_equal(trimmed, ids[:, :3])
    assert empty.shape == (2, 1), "a batch of padding keeps one column"


def test_padding_length_does_not_change_decodes_or_scores(toy):
    """Batches are padded to one length per file; the decode of each row must not
    depend on how long that is."""
    model_dir, hp, vocab_size, ids = toy
    longest = int((ids > 0).sum(axis=1).max())
    short = (model_dir, hp, vocab_size, ids[:, :longest])
    long = (model_dir, hp, vocab_size, np.pad(ids, [[0, 0], [0, 64]]))
    for decode in ({"beam_size": 1}, {"beam_size": 4, "alpha": 0.6}):
        short_ids, short_scores = _predict(short, "fast", **decode)
        long_ids, long_scores = _predict(long, "fast", **decode)
        np.testing.assert_array_equal(short_ids, long_ids)
        np.testing.assert_allclose(short_scores, long_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("softmax_lse", [False, True], ids=["lse_by_exp_and_sum", "lse_by_softmax"])
def test_top_log_probs_by_blocks_are_the_log_softmax_top_k(softmax_lse, monkeypatch):
    """Beam search reduces each step's logits block by block (fast_top_k.logits_blocks):
    the k best tokens and their log-probabilities are those of the whole row, with either
    way of taking a block's log-sum-exp (kernel_layout.log_sum_exp_by_softmax)."""
    import types

    monkeypatch.setattr(fast_kernels, "log_sum_exp_by_softmax", lambda: softmax_lse)
    rng = np.random.default_rng(0)
    rows, d_model, vocab, k = 256, 16, 4000, 8
    # Rows from flat (every token nearly as likely) to peaked (all but a few underflow).
    scale = np.geomspace(1e-3, 30.0, rows)[:, None]
    x = (rng.normal(size=[rows, d_model]) * scale).astype(np.float32)
    kernel = rng.normal(size=[d_model, vocab]).astype(np.float32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        w = types.SimpleNamespace(
            decoder_final_norm=tf.ones([d_model]),
            logits_scale=1.0,
            logits_kernel=tf.constant(kernel),
            cast=lambda t: t,
            packed=False,
        )
        blocks = fast_top_k.logits_blocks(w, rows)
        assert len(blocks) == 1, "a row count whose logits fit one block"
        fast_top_k.LOGITS_BLOCK_BYTES, saved = 512 << 10, fast_top_k.LOGITS_BLOCK_BYTES
        try:
            blocks = fast_top_k.logits_blocks(w, rows)
        finally:
            fast_top_k.LOGITS_BLOCK_BYTES = saved
        # Eight blocks of whole chunks, each reduced through its chunk maxima.
        assert len(blocks) == 8 and blocks[-1][0] < vocab
        assert all(int(kernel.shape[1]) % fast_top_k.TOP_K_CHUNK == 0 for _, kernel in blocks)
        logp, ids = session.run(fast_top_k.top_log_probs(w, tf.constant(x), k, blocks))
        logits = session.run(tf.nn.log_softmax(fast.output_logits(w, tf.constant(x))))
    expected = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(logp, np.take_along_axis(logits, expected, axis=1), rtol=1e-5, atol=1e-5)
