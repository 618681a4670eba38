"""The activation dtype per machine, and the two CPU paths that keep bfloat16 from being a trap.

Machines are described, not detected: no test depends on this machine's CPU.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.decode import tf_predict
from t2tcli.errors import UserError
from t2tcli.model import activation_dtype, graph, hardware, kernel_layout
from t2tcli.model import config as model_config
from t2tcli.model import mesh as meshlib

# isort: split
import mesh_tensorflow as mtf

tf1 = tf.compat.v1
AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}
AVX512_BF16 = AVX512 | {"avx512_bf16"}
AMX = AVX512_BF16 | {"amx_bf16", "amx_tile", "amx_int8"}
ARM = frozenset({"fp", "asimd", "sve"})


def mesh_impl(spec: meshlib.MeshSpec, devices: list[str]) -> meshlib.PlacementMeshImpl:
    """The CPU mesh a model's graph gets on this machine (t2tcli.model.graph.placement_mesh_impl)."""
    emulated = kernel_layout.emulated_einsum(hardware.detect())
    return meshlib.PlacementMeshImpl(spec.mtf_shape(), spec.mtf_layout(), devices, emulated)


def cpu(flags, **kwargs):
    return hardware.Machine("cpu", cpu_flags=frozenset(flags), **kwargs)


@pytest.mark.parametrize(
    "machine, dtype, why",
    [
        (cpu(AMX), "bfloat16", "AMX CPU"),
        (cpu(AVX512_BF16), "bfloat16", "AVX512-BF16 CPU"),
        (cpu(AVX512), "float32", "AVX-512 CPU without AMX or AVX512-BF16"),
        (cpu(AVX2), "float32", "AVX2 CPU without AMX or AVX512-BF16"),
        (cpu(AMX, onednn_max_isa="AVX2"), "float32", "ONEDNN_MAX_CPU_ISA=AVX2"),
        (cpu(AMX, onednn_max_isa="AVX512_CORE_BF16"), "bfloat16", "AMX CPU"),
        (cpu(AMX, onednn_max_isa="AVX512_CORE"), "float32", "below AVX512_CORE_BF16"),
        (cpu(AMX, onednn_max_isa="DEFAULT"), "bfloat16", "AMX CPU"),  # oneDNN's "no limit"
        (cpu(AVX512_BF16, onednn_enabled=False), "float32", "TF_ENABLE_ONEDNN_OPTS=0"),
        (hardware.Machine("gpu", AVX2, gpu_capability=(8, 0)), "bfloat16", "compute capability 8.0"),
        (hardware.Machine("gpu", AMX, gpu_capability=(7, 5)), "float32", "compute capability 7.5"),
        (hardware.Machine("tpu", AVX2), "bfloat16", "TPU"),
    ],
)
def test_auto_picks_bfloat16_only_where_it_is_native(machine, dtype, why):
    choice = activation_dtype.choose("auto", machine)
    assert choice.dtype == dtype
    assert why in choice.reason and choice.warning is None


def test_an_explicit_dtype_wins_and_slow_bfloat16_is_warned_about():
    slow = activation_dtype.choose("bfloat16", cpu(AVX2))
    assert slow.dtype == "bfloat16"
    assert "slower than float32" in slow.warning and "activation_dtype=auto" in slow.warning
    assert activation_dtype.choose("bfloat16", cpu(AMX)).warning is None
    assert activation_dtype.choose("float32", cpu(AMX)) == activation_dtype.Choice(
        "float32", "activation_dtype=float32 (set explicitly)"
    )


@pytest.mark.parametrize("value", ["float16", "fp32", "", "BFLOAT16"])
def test_other_values_are_refused_with_the_accepted_ones(value):
    with pytest.raises(UserError, match="use one of auto, bfloat16, float32"):
        activation_dtype.choose(value, cpu(AVX2))


def test_cpu_kind_names_the_class_a_figure_holds_for():
    assert [cpu(f).cpu_kind() for f in (AMX, AVX512_BF16, AVX512, AVX2, {"sse2"})] == [
        "AMX",
        "AVX512-BF16",
        "AVX-512",
        "AVX2",
        "no AVX2",
    ]


@pytest.mark.parametrize(
    "machine, transposed",
    [
        (cpu(AVX2), True),
        (cpu(AVX2, onednn_max_isa="AVX2"), True),
        (cpu(AVX512), False),
        (cpu(AVX512_BF16), False),
        (cpu(AMX, onednn_max_isa="AVX2"), True),
        (cpu(AVX512_BF16, onednn_max_isa="AVX512_CORE"), False),
        (cpu(AVX512, onednn_max_isa="DEFAULT"), False),
        (cpu(AVX2, onednn_max_isa="SSE41"), False),
        (cpu(AVX2, onednn_enabled=False), False),
        (cpu(ARM), False),
        (hardware.Machine("gpu", AVX2, gpu_capability=(8, 0)), False),
    ],
)
def test_decode_kernels_are_transposed_where_onednn_runs_avx2_class_kernels(machine, transposed):
    assert kernel_layout.transposed_kernels(machine) is transposed


@pytest.mark.parametrize(
    "machine, onednn",
    [
        (cpu(AVX2), False),
        (cpu(AVX512), True),
        (cpu(AVX512_BF16), True),
        (cpu(AMX, onednn_max_isa="AVX512_CORE"), True),
        (cpu(AVX512, onednn_max_isa="DEFAULT"), True),
        (cpu(AMX, onednn_max_isa="AVX2"), False),
        (cpu(AVX512_BF16, onednn_enabled=False), False),
        (hardware.Machine("gpu", AVX512, gpu_capability=(8, 0)), False),
    ],
)
def test_beam_attention_runs_on_onednn_only_where_onednn_runs_avx512(machine, onednn):
    assert kernel_layout.beam_attention_on_onednn(machine) is onednn


@pytest.mark.parametrize(
    "machine, greedy, beam",
    [
        (cpu(AMX), True, True),
        (cpu(AMX, onednn_max_isa="AVX512_CORE_AMX"), True, True),
        (cpu(AMX, onednn_max_isa="DEFAULT"), True, True),
        (cpu(AMX, onednn_max_isa="AVX512_CORE_BF16"), True, False),
        (cpu(AMX, onednn_max_isa="AVX2"), False, False),
        (cpu(AMX, onednn_enabled=False), False, False),
        (cpu(AVX512_BF16), True, False),
        (cpu(AVX512_BF16, onednn_max_isa="AVX512_CORE"), False, False),
        (cpu(AVX512), False, False),
        (cpu(AVX2), False, False),
        (hardware.Machine("gpu", AMX, gpu_capability=(8, 0)), False, False),
    ],
)
def test_decode_kernels_are_laid_out_once_where_onednn_multiplies_bfloat16_natively(machine, greedy, beam):
    """On AMX tiles for every search; on AVX512-BF16 without them for greedy search only."""
    assert kernel_layout.packed_kernels(machine, beam_search=False) is greedy
    assert kernel_layout.packed_kernels(machine, beam_search=True) is beam
    layout = kernel_layout.for_machine(machine, 2048)
    assert (layout.packed_kernels, layout.packed_kernels_in_beam_search) == (greedy, beam)


@pytest.mark.parametrize(
    "machine, softmax",
    [
        (cpu(AMX), True),
        (cpu(AMX, onednn_max_isa="AVX512_CORE_BF16"), False),
        (cpu(AMX, onednn_max_isa="AVX2"), True),
        (cpu(AMX, onednn_enabled=False), False),
        (cpu(AVX512_BF16), False),
        (cpu(AVX512), False),
        (cpu(AVX512, onednn_max_isa="AVX2"), True),
        (cpu(AVX2), True),
        (cpu(AVX2, onednn_max_isa="AVX"), False),
        (cpu(AVX2, onednn_enabled=False), False),
        (cpu(ARM), False),
        (hardware.Machine("gpu", AVX2, gpu_capability=(8, 0)), False),
    ],
)
def test_beam_log_sum_exp_comes_from_a_softmax_where_it_ran_faster(machine, softmax):
    """Where oneDNN multiplies on AMX tiles or runs AVX2-class kernels; its AVX-512 kernels
    without AMX measured level and keep the element-wise ops, as do Eigen, GPUs and CPUs
    held below AVX2."""
    assert kernel_layout.log_sum_exp_by_softmax(machine) is softmax


@pytest.mark.parametrize(
    "machine, d_ff, padding",
    [
        (cpu(AVX2), 2048, kernel_layout.FFN_PADDING),
        (cpu(AVX2), 4096, kernel_layout.FFN_PADDING),
        (cpu(AVX2), 3072, 0),
        (cpu(AVX2, onednn_enabled=False), 2048, kernel_layout.FFN_PADDING),
        (cpu(AVX512), 2048, 0),
        (cpu(AMX, onednn_max_isa="AVX2"), 2048, 0),
        (cpu(ARM), 2048, 0),
        (hardware.Machine("gpu", AVX2, gpu_capability=(8, 0)), 2048, 0),
    ],
)
def test_ffn_is_padded_only_at_widths_that_slow_an_avx2_cpus_gemms(machine, d_ff, padding):
    assert kernel_layout.ffn_padding(machine, d_ff) == padding


def test_flags_are_read_from_cpuinfo_and_onednn_settings_from_the_environment(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: Some CPU\n"
        "flags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
    )
    assert hardware.cpu_flags(str(info)) == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert hardware.cpu_vendor(str(info)) == "AuthenticAMD"
    assert hardware.cpu_flags(str(tmp_path / "missing")) == frozenset()
    assert hardware.cpu_vendor(str(tmp_path / "missing")) == ""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    machine = hardware.detect()
    assert (machine.onednn_max_isa, machine.onednn_enabled) == ("AVX2", False)
    assert hardware.detect(use_tpu=True).device == "tpu"


def test_hparams_sets_default_to_auto_and_keep_it():
    for name in ("mtf_transformer_tiny", "t5_small", "t5_base_tpu"):
        assert registry.hparams(name).activation_dtype == "auto"


def test_emulated_bfloat16_einsum_equals_float32_math_rounded_once():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 16)).astype(np.float32)
    b = rng.standard_normal((16, 7)).astype(np.float32)
    spec = meshlib.spec_from_hparams(registry.hparams("mtf_transformer_tiny"))
    emulated = meshlib.PlacementMeshImpl(spec.mtf_shape(), spec.mtf_layout(), [""], float32_einsums=True)
    native = meshlib.PlacementMeshImpl(spec.mtf_shape(), spec.mtf_layout(), [""], float32_einsums=False)
    bf16 = [tf.cast(x, tf.bfloat16) for x in (a, b)]
    out = emulated.einsum("abc,cd->abd", *bf16)
    assert out.dtype == tf.bfloat16
    exact = np.einsum("abc,cd->abd", *(tf.cast(x, tf.float32).numpy() for x in bf16))
    np.testing.assert_array_equal(out.numpy(), tf.cast(exact, tf.bfloat16).numpy())
    float32 = [tf.constant(a), tf.constant(b)]
    np.testing.assert_array_equal(emulated.einsum("abc,cd->abd", *float32), native.einsum("abc,cd->abd", *float32))
    here = hardware.detect()
    if here.cpu_flags.intersection(hardware.NATIVE_BF16_CPU_FLAGS) and not hardware.native_bfloat16(here)[0]:
        # A bfloat16 CPU held back by ONEDNN_MAX_CPU_ISA: TensorFlow's own bfloat16 Einsum
        # still picks oneDNN's kernel there and crashes the process. The model never runs
        # it there (its einsums are emulated), so neither does this comparison.
        return
    np.testing.assert_allclose(tf.cast(native.einsum("abc,cd->abd", *bf16), tf.float32), exact, rtol=2e-2, atol=0.15)


def _embedding_and_grad(dtype: str, gather: bool, ids: np.ndarray, table: np.ndarray):
    """The model's input embedding of `ids` and d(sum of squares)/d(table), one device."""
    hp = registry.hparams("mtf_transformer_tiny")
    hp.activation_dtype = dtype
    with tf.Graph().as_default():
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        vocab_dim, model_dim = mtf.Dimension("vocab", table.shape[0]), mtf.Dimension("d_model", table.shape[1])
        weights = mtf.import_tf_tensor(mesh, tf.constant(table), mtf.Shape([vocab_dim, model_dim]))
        weights = mtf.cast(weights, tf.as_dtype(dtype))
        shape = mtf.Shape([mtf.Dimension("batch", ids.shape[0]), mtf.Dimension("length", ids.shape[1])])
        mtf_ids = mtf.import_tf_tensor(mesh, tf.constant(ids), shape)
        if gather:
            from t2tcli.model.embedding import gather_rows

            out = gather_rows(weights, mtf_ids, vocab_dim)
        else:
            out = mtf.gather(weights, mtf_ids, vocab_dim)
        loss = mtf.reduce_sum(mtf.square(mtf.cast(out, tf.float32)))
        (grad,) = mtf.gradients([loss], [weights])
        spec = meshlib.spec_from_hparams(hp)
        lowering = mtf.Lowering(graph, {mesh: mesh_impl(spec, [""])})
        with tf1.Session() as sess:
            return sess.run([tf.cast(lowering.export_to_tf_tensor(t), tf.float32) for t in (out, grad)])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_row_lookup_embedding_equals_mesh_tensorflows_one_hot_einsum(dtype):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    ids = rng.integers(0, 50, size=(4, 6)).astype(np.int32)
    ids[0, :3] = 7  # a repeated id: its gradient sums over its positions
    looked_up, lookup_grad = _embedding_and_grad(dtype, True, ids, table)
    one_hot, one_hot_grad = _embedding_and_grad(dtype, False, ids, table)
    np.testing.assert_array_equal(looked_up, one_hot)
    tolerance = 1e-6 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(lookup_grad, one_hot_grad, rtol=tolerance, atol=tolerance)
    assert np.abs(lookup_grad[7]).sum() > 0 and not lookup_grad[[i for i in range(50) if i not in ids]].any()


def test_the_model_gathers_embeddings_off_tpu_unless_the_mesh_splits_them():
    from t2tcli.model import gin_bindings

    tiny = registry.hparams("mtf_transformer_tiny")
    assert gin_bindings.gathers_embeddings(model_config.build(tiny, 40, use_tpu=False))
    assert not gin_bindings.gathers_embeddings(model_config.build(tiny, 40, use_tpu=True))
    split = tiny.copy()
    split.mesh_shape, split.layout = "batch:2", "batch:batch"
    assert not gin_bindings.gathers_embeddings(model_config.build(split, 40, use_tpu=False))
    model_parallel = tiny.copy()
    model_parallel.mesh_shape, model_parallel.layout = "model:2", "d_ff:model;heads:model"
    assert gin_bindings.gathers_embeddings(model_config.build(model_parallel, 40, use_tpu=False))
    assert graph.variable_names(model_config.build(tiny, 40))["shared/embedding"] == [128, 64]


def test_the_model_fuses_its_loss_off_tpu_unless_the_mesh_splits_the_vocabulary():
    from t2tcli.model import gin_bindings

    tiny = registry.hparams("mtf_transformer_tiny")
    assert gin_bindings.fuses_loss(model_config.build(tiny, 40, use_tpu=False))
    assert "decoder/Unitransformer.loss_fn = @t2tcli.fused_loss" in gin_bindings.bindings(model_config.build(tiny, 40))
    assert not gin_bindings.fuses_loss(model_config.build(tiny, 40, use_tpu=True))
    batch_split = tiny.copy()
    batch_split.mesh_shape, batch_split.layout = "batch:2", "batch:batch"
    assert gin_bindings.fuses_loss(model_config.build(batch_split, 40, use_tpu=False))
    vocab_split = tiny.copy()
    vocab_split.mesh_shape, vocab_split.layout = "model:2", "vocab:model;d_ff:model"
    assert not gin_bindings.fuses_loss(model_config.build(vocab_split, 40, use_tpu=False))


def _token_loss_and_grad(fused: bool, logits: np.ndarray, targets: np.ndarray, dtype: str, mesh_shape: str = ""):
    """Training's loss and d(loss)/d(logits) (float32), by t2tcli's fused pass or by
    mesh-tensorflow's `Unitransformer._compute_loss` ops, on a mesh of `mesh_shape`."""
    from types import SimpleNamespace

    from mesh_tensorflow.transformer import transformer

    from t2tcli.model.token_loss import fused_loss

    hp = registry.hparams("mtf_transformer_tiny")
    hp.mesh_shape, hp.layout = (mesh_shape, "batch:batch") if mesh_shape else ("", "")
    spec = meshlib.spec_from_hparams(hp)
    model = SimpleNamespace(
        z_loss=1e-2, label_smoothing=0.1, loss_on_targets_only=False, _loss_fn=None,
        loss_denominator=lambda t, n: float(t.shape.size * n),
    )  # fmt: skip
    context = SimpleNamespace(train=True, num_microbatches=1, activation_dtype=tf.as_dtype(dtype))
    with tf.Graph().as_default():
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        dims = [mtf.Dimension(n, k) for n, k in zip(("batch", "length", "vocab"), logits.shape, strict=True)]
        x = mtf.cast(mtf.import_tf_tensor(mesh, tf.constant(logits), mtf.Shape(dims)), tf.as_dtype(dtype))
        t = mtf.import_tf_tensor(mesh, tf.constant(targets), mtf.Shape(dims[:2]))
        if fused:
            loss = fused_loss(model, context, x, t, dims[2])
        else:
            loss = transformer.Unitransformer._compute_loss(model, context, x, t, dims[2])
        loss = mtf.cast(loss, tf.float32)
        (grad,) = mtf.gradients([loss], [x])
        impl = mesh_impl(spec, [""] * spec.size)
        lowering = mtf.Lowering(graph, {mesh: impl})
        with tf1.Session() as sess:
            return sess.run([tf.cast(lowering.export_to_tf_tensor(v), tf.float32) for v in (loss, grad)])


def _exact_loss(logits: np.ndarray, targets: np.ndarray, z_loss=1e-2, smoothing=0.1) -> float:
    x = logits.astype(np.float64)
    log_z = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    off = smoothing / x.shape[-1]
    soft = np.full(x.shape, off)
    np.put_along_axis(soft, targets[..., None], 1 - smoothing + off, -1)
    per_token = log_z - (soft * x).sum(-1) + z_loss * log_z**2
    return float((per_token * (targets > 0)).sum() / targets.size)


def test_fused_token_loss_is_mesh_tensorflows_loss_with_its_gradient():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((4, 6, 300)) * 4).astype(np.float32)
    targets = rng.integers(1, 300, size=(4, 6)).astype(np.int32)
    targets[1, 3:] = 0  # padding: no loss, no gradient
    fused, fused_grad = _token_loss_and_grad(True, logits, targets, "float32")
    theirs, their_grad = _token_loss_and_grad(False, logits, targets, "float32")
    assert fused == pytest.approx(_exact_loss(logits, targets), rel=1e-6)
    assert theirs == pytest.approx(fused, rel=1e-5)
    np.testing.assert_allclose(fused_grad, their_grad, rtol=1e-4, atol=1e-8)
    assert not fused_grad[1, 3:].any() and np.abs(fused_grad[1, :3]).sum() > 0
    split, split_grad = _token_loss_and_grad(True, logits, targets, "float32", mesh_shape="batch:2")
    assert split == pytest.approx(fused, rel=1e-6)
    np.testing.assert_allclose(split_grad, fused_grad, rtol=1e-6, atol=1e-9)
    # bfloat16 logits: the fused pass sums in float32, so its loss stays the exact one's.
    rounded = tf.cast(tf.cast(logits, tf.bfloat16), tf.float32).numpy()
    fused16, fused16_grad = _token_loss_and_grad(True, logits, targets, "bfloat16")
    assert fused16 == pytest.approx(_exact_loss(rounded, targets), rel=1e-5)
    _, rounded_grad = _token_loss_and_grad(True, rounded, targets, "float32")
    # The gradient is scaled in float32 and rounded to bfloat16 once: within half a unit (2^-8) of the exact one.
    np.testing.assert_allclose(fused16_grad, rounded_grad, rtol=2**-8, atol=1e-9)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_losss_row_maximum_of_16_bit_floats_is_tensorflows_bit_for_bit(dtype):
    """The maximum read from the floats' bits as integers is the float maximum in rows with
    numbers >= 0, rows of negatives only (the integers order them backwards), both at once,
    and at the edges: zeros of either sign, infinities, a single element."""
    from t2tcli.model.token_loss import _top

    rng = np.random.default_rng(5)
    mixed = rng.standard_normal((6, 50)) * 20
    rows = {
        "mixed": mixed,
        "negative": -np.abs(mixed) - 1e-3,
        "both": np.concatenate([mixed[:3], -np.abs(mixed[3:]) - 1e-3]),
        "zeros": np.array([[0.0, -0.0, -1.0], [-0.0, -0.0, -0.0], [-0.0, -2.0, -1.5]]),
        "infinities": np.array([[-np.inf, -3.0, -np.inf], [np.inf, 5.0, -np.inf], [-np.inf, -np.inf, -np.inf]]),
        "single": np.array([[-7.0], [3.0]]),
    }
    for what, values in rows.items():
        x = tf.cast(tf.constant(values, tf.float32), tf.as_dtype(dtype))
        ours = _top(x).numpy()
        theirs = tf.cast(tf.reduce_max(x, axis=-1, keepdims=True), tf.float32).numpy()
        np.testing.assert_array_equal(ours, theirs, err_msg=what)
        assert ours.dtype == np.float32 and ours.shape == (values.shape[0], 1)


def _model_graph_ops(hp, mode, tmp_path, **decode) -> list:
    """The ops of the graph model_fn builds for `mode`."""
    from t2tcli.data.input import inputs

    est = tf_predict.build_estimator(str(tmp_path), model_config.build(hp, 40), decode)
    batch = inputs.batch_size(hp)
    with tf.Graph().as_default() as graph:
        features = {"inputs": tf.zeros([batch, hp.inputs_length], tf.int32)}
        if mode == tf.estimator.ModeKeys.TRAIN:
            features["targets"] = tf.zeros([batch, hp.targets_length], tf.int32)
        est.model_fn(features, None, mode, est.config)
    return graph.get_operations()


def _graph_dtypes(hp, mode, tmp_path, **decode) -> tuple[set[str], set[str]]:
    """(dtypes of every tensor, dtypes of the matrix products) of the graph model_fn builds."""
    ops = _model_graph_ops(hp, mode, tmp_path, **decode)
    every = {t.dtype.base_dtype.name for op in ops for t in op.outputs}
    products = {
        op.outputs[0].dtype.name for op in ops if op.type in ("Einsum", "MatMul", "BatchMatMulV2", "BatchMatMulV3")
    }
    return every, products


@pytest.mark.parametrize(
    "machine, requested, activations, products",
    [
        (cpu(AMX), "auto", "bfloat16", "bfloat16"),  # native: bfloat16 all the way
        (cpu(AVX2), "auto", "float32", "float32"),  # auto picks float32: no bfloat16 anywhere
        (cpu(AVX2), "bfloat16", "bfloat16", "float32"),  # asked for: bfloat16 values, products in float32
    ],
    ids=["amx_auto", "avx2_auto", "avx2_bfloat16"],
)
def test_the_chosen_dtype_is_what_the_graphs_compute_in(
    machine, requested, activations, products, monkeypatch, tmp_path
):
    """The decision table above is only worth something if its answer reaches the model:
    the training graph and the fast engine's decode graph, built for each CPU kind."""
    from t2tcli.decode import fast_kernels

    monkeypatch.setattr(hardware, "detect", lambda use_tpu=False: machine)
    fast_kernels.machine.cache_clear()
    try:
        hp = registry.hparams("mtf_transformer_tiny")
        hp.override_from_dict({"activation_dtype": requested, "inputs_length": 8, "targets_length": 8, "batch_size": 4})
        for mode, decode in ((tf.estimator.ModeKeys.TRAIN, {}), (tf.estimator.ModeKeys.PREDICT, {"engine": "fast"})):
            every, made = _graph_dtypes(hp, mode, tmp_path, **decode)
            assert ("bfloat16" in every) == (activations == "bfloat16"), (mode, every)
            assert made and ("bfloat16" in made) == (products == "bfloat16"), (mode, made)
    finally:
        fast_kernels.machine.cache_clear()


def _attention_and_grads(
    head_major: bool,
    arrays: dict[str, np.ndarray],
    dtype: str,
    one_query: bool = False,
    train: bool = False,
    rounded_logits_product: bool = False,
):
    """Attention's output (in q's order) and d(sum of its squares)/d(q, k, v, bias), in float32,
    the equations (and result dtypes) of the einsums the lowered graph runs, and the dtypes of its
    Softmax kernels."""
    from types import SimpleNamespace

    from mesh_tensorflow.transformer import attention as mtf_attention

    from t2tcli.model.attention import head_major_attention

    sizes = {"batch": 3, "length": 5, "memory_length": 6, "heads": 2, "d_kv": 4}
    batch, length, memory, heads, d_kv = (mtf.Dimension(n, k) for n, k in sizes.items())
    shapes = {
        "q": [batch, heads, d_kv] if one_query else [batch, length, heads, d_kv],
        "k": [batch, memory, heads, d_kv],
        "v": [batch, memory, heads, d_kv],
        "bias": [heads, memory] if one_query else [heads, length, memory],
    }
    with tf.Graph().as_default() as tf_graph:
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        x = {}
        for name, dims in shapes.items():
            value = tf.constant(arrays[name][:, 0] if one_query and name in ("q", "bias") else arrays[name])
            x[name] = mtf.cast(mtf.import_tf_tensor(mesh, value, mtf.Shape(dims)), tf.as_dtype(dtype))
        attend = mtf_attention.attention
        if head_major:
            attend = functools.partial(head_major_attention, rounded_logits_product=rounded_logits_product)
        context = SimpleNamespace(train=train, model=SimpleNamespace(layout="", mesh_shape=""))
        out = attend(x["q"], x["k"], x["v"], memory, d_kv, d_kv, x["bias"], context=context)
        out = mtf.transpose(mtf.cast(out, tf.float32), mtf.Shape(shapes["q"]))
        grads = mtf.gradients([mtf.reduce_sum(mtf.square(out))], list(x.values()))
        spec = meshlib.spec_from_hparams(registry.hparams("mtf_transformer_tiny"))
        lowering = mtf.Lowering(graph, {mesh: mesh_impl(spec, [""])})
        values = [tf.cast(lowering.export_to_tf_tensor(t), tf.float32) for t in (out, *grads)]
        with tf1.Session() as sess:
            values = sess.run(values)
        einsums = [op for op in tf_graph.get_operations() if op.type == "Einsum"]
        equations = [f"{op.get_attr('equation').decode()} {op.outputs[0].dtype.name}" for op in einsums]
        softmax_kernels = [op.outputs[0].dtype.name for op in tf_graph.get_operations() if op.type == "Softmax"]
    return values, equations, softmax_kernels


def _is_batched_matmul(equation: str) -> bool:
    """Whether both operands and the result of a two-operand einsum lead with the same batch
    letters and differ only in their last two: the layout batched matmul kernels run directly."""
    operands, result = equation.split("->")
    if "," not in operands:
        return True  # a transpose
    a, b = operands.split(",")
    result = result.split()[0]  # without the dtype _attention_and_grads adds
    return len(a) == len(b) == len(result) and a[:-2] == b[:-2] == result[:-2]


def _attention_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    arrays = {
        "q": rng.standard_normal((3, 5, 2, 4)),
        "k": rng.standard_normal((3, 6, 2, 4)),
        "v": rng.standard_normal((3, 6, 2, 4)),
        "bias": rng.standard_normal((2, 5, 6)),
    }
    return {name: value.astype(np.float32) for name, value in arrays.items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_head_major_attention_is_mesh_tensorflows_attention_in_another_order(dtype):
    arrays = _attention_arrays()
    ours, our_equations, our_softmaxes = _attention_and_grads(True, arrays, dtype)
    theirs, their_equations, their_softmaxes = _attention_and_grads(False, arrays, dtype)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for mine, other in zip(ours, theirs, strict=True):
        assert np.abs(mine).sum() > 0
        np.testing.assert_allclose(mine, other, rtol=tolerance, atol=tolerance)
    # Same values, other layout: every attention einsum (logits, weights times values and
    # their gradients) is a plain batched matmul, which mesh-tensorflow's order is not.
    attention_products = [e for e in our_equations if "," in e]
    assert len(attention_products) == 6 and all(_is_batched_matmul(e) for e in attention_products)
    assert not all(_is_batched_matmul(e) for e in their_equations)
    # The memory length is the logits' last dimension: the softmax is TensorFlow's one kernel.
    assert (len(our_softmaxes), len(their_softmaxes)) == (1, 0)
    # One query position (incremental decoding): mesh-tensorflow's order, nothing transposed.
    one, one_equations, _ = _attention_and_grads(True, arrays, dtype, one_query=True)
    other, other_equations, _ = _attention_and_grads(False, arrays, dtype, one_query=True)
    assert one_equations == other_equations
    for mine, theirs_ in zip(one, other, strict=True):
        np.testing.assert_array_equal(mine, theirs_)


def test_training_in_bfloat16_can_take_the_logits_from_a_bfloat16_product(monkeypatch):
    """With rounded_logits_product, training's logits and their gradients are bfloat16
    products (the logits rounded once, then float32 for the bias and softmax): values
    within bfloat16's rounding of the float32 product's; evaluation keeps the float32 product.
    The mesh is the one a CPU with native bfloat16 gets, the only kind that rounds, whatever
    CPU runs the test: on others the mesh computes every bfloat16 product in float32."""
    monkeypatch.setattr(hardware, "detect", lambda use_tpu=False: cpu(AVX512_BF16))
    arrays = _attention_arrays()
    exact, exact_equations, _ = _attention_and_grads(True, arrays, "bfloat16", train=True)
    rounded, rounded_equations, softmaxes = _attention_and_grads(
        True, arrays, "bfloat16", train=True, rounded_logits_product=True
    )
    products = [e for e in exact_equations if "," in e]
    # The float32 product: the logits, and their gradients to q and k.
    assert sorted(e.split()[1] for e in products) == ["bfloat16"] * 3 + ["float32"] * 3
    assert [e.split()[0] for e in rounded_equations] == [e.split()[0] for e in exact_equations]
    assert all(e.endswith(" bfloat16") for e in rounded_equations if "," in e)
    assert softmaxes == ["float32"]  # the bias and softmax stay float32
    differs = False
    for mine, other in zip(rounded, exact, strict=True):
        assert np.abs(mine).sum() > 0
        # Within bfloat16's rounding at each array's scale: a gradient that is a small
        # difference of large terms keeps their absolute error.
        np.testing.assert_allclose(mine, other, rtol=2e-2, atol=2e-2 * np.abs(other).max())
        differs = differs or not np.array_equal(mine, other)
    assert differs, "the logits were not rounded"
    # Evaluation (and float32 activations) keep the float32 product, exactly.
    for dtype, train in (("bfloat16", False), ("float32", True)):
        kept, kept_equations, _ = _attention_and_grads(True, arrays, dtype, train=train, rounded_logits_product=True)
        plain, plain_equations, _ = _attention_and_grads(True, arrays, dtype, train=train)
        assert kept_equations == plain_equations
        for mine, other in zip(kept, plain, strict=True):
            np.testing.assert_array_equal(mine, other)


@pytest.mark.parametrize(
    "machine, requested, rounds",
    [
        (cpu(AMX), "auto", True),
        (cpu(AVX512_BF16), "auto", True),
        (cpu(AVX512_BF16), "float32", False),
        (cpu(AVX2), "auto", False),
        (cpu(AVX2), "bfloat16", False),  # emulated: its products are float32 anyway
    ],
    ids=["amx_auto", "avx512_bf16_auto", "avx512_bf16_float32", "avx2_auto", "avx2_bfloat16"],
)
def test_training_rounds_the_logits_product_only_where_bfloat16_products_are_native(
    machine, requested, rounds, monkeypatch, tmp_path
):
    from t2tcli.model import gin_bindings

    monkeypatch.setattr(hardware, "detect", lambda use_tpu=False: machine)
    tiny = registry.hparams("mtf_transformer_tiny")
    tiny.override_from_dict({"activation_dtype": requested, "inputs_length": 8, "targets_length": 8, "batch_size": 4})
    config = model_config.build(tiny, 40)
    assert gin_bindings.rounds_attention_logits(config) is rounds
    assert not gin_bindings.rounds_attention_logits(model_config.build(tiny, 40, use_tpu=True))
    assert ("t2tcli.HeadMajorSelfAttention.rounded_logits_product = True" in gin_bindings.bindings(config)) is rounds
    if not rounds:
        return
    layers = tiny.num_encoder_layers + 2 * tiny.num_decoder_layers

    def float32_attention_products() -> int:
        """The training graph's attention products (two [batch, heads, ...] operands) made in float32."""
        ops = _model_graph_ops(tiny, tf.estimator.ModeKeys.TRAIN, tmp_path)
        attention = [
            op.outputs[0].dtype.name
            for op in ops
            if op.type == "Einsum" and len(op.inputs) == 2 and all(t.shape.rank == 4 for t in op.inputs)
        ]
        assert len(attention) == 6 * layers
        return attention.count("float32")

    assert float32_attention_products() == 0
    monkeypatch.setattr(gin_bindings, "rounds_attention_logits", lambda config: False)
    assert float32_attention_products() == 3 * layers  # the logits and their two gradients


def test_the_model_runs_attention_head_major_off_tpu_with_mesh_tensorflows_variables(monkeypatch, tmp_path):
    from t2tcli.model import gin_bindings

    tiny = registry.hparams("mtf_transformer_tiny")
    assert "t2tcli.HeadMajorSelfAttention" in " ".join(gin_bindings.bindings(model_config.build(tiny, 40)))
    assert "t2tcli.HeadMajorEncDecAttention" in " ".join(gin_bindings.bindings(model_config.build(tiny, 40)))
    on_tpu = " ".join(gin_bindings.bindings(model_config.build(tiny, 40, use_tpu=True)))
    assert "HeadMajor" not in on_tpu and "transformer_layers.EncDecAttention" in on_tpu
    head_major_names = graph.variable_names(model_config.build(tiny, 40))

    def attention_products() -> tuple[list[str], int]:
        """The training graph's einsums of two [batch, ..., heads, ...] operands, and its
        number of Softmax kernels."""
        ops = _model_graph_ops(tiny, tf.estimator.ModeKeys.TRAIN, tmp_path)
        products = [
            op.get_attr("equation").decode()
            for op in ops
            if op.type == "Einsum" and len(op.inputs) == 2 and all(t.shape.rank == 4 for t in op.inputs)
        ]
        return products, sum(op.type == "Softmax" for op in ops)

    # Six einsums per attention layer: an encoder layer has one, a decoder layer two.
    layers = tiny.num_encoder_layers + 2 * tiny.num_decoder_layers
    products, softmaxes = attention_products()
    assert len(products) == 6 * layers and all(_is_batched_matmul(e) for e in products)
    assert softmaxes == layers
    monkeypatch.setattr(gin_bindings, "head_major", lambda use_tpu: False)
    assert graph.variable_names(model_config.build(tiny, 40)) == head_major_names
    products, softmaxes = attention_products()
    assert not all(_is_batched_matmul(e) for e in products) and softmaxes == 0


def test_the_training_graph_projects_q_k_and_v_from_joined_kernels(monkeypatch, tmp_path):
    """Each self-attention layer's input is multiplied once by its joined [d_model, 3 x
    inner] kernel, and each encoder-decoder layer's memory by a [d_model, 2 x inner] one,
    forward and for the input's gradient (t2tcli.model.projections)."""
    from t2tcli.model import gin_bindings

    tiny = registry.hparams("mtf_transformer_tiny")
    inner = tiny.num_heads * tiny.d_kv

    def kernel_widths() -> list[int]:
        ops = _model_graph_ops(tiny, tf.estimator.ModeKeys.TRAIN, tmp_path)
        return [op.inputs[1].shape[-1] for op in ops if op.type == "Einsum" and op.inputs[1].shape[0] == tiny.d_model]

    widths = kernel_widths()
    self_attention_layers = tiny.num_encoder_layers + tiny.num_decoder_layers
    assert widths.count(3 * inner) == 2 * self_attention_layers
    assert widths.count(2 * inner) == 2 * tiny.num_decoder_layers
    monkeypatch.setattr(gin_bindings, "joins_projections", lambda config: False)
    widths = kernel_widths()
    assert 3 * inner not in widths and 2 * inner not in widths


def _rms_norm_and_grads(
    fused: bool, x: np.ndarray, scale: np.ndarray, weights: np.ndarray, dtype: str, mesh_shape: str = ""
):
    """(y, dL/dx, dL/dscale) of an RMS norm over the last axis, as float32, for the loss
    sum(y * weights); by t2tcli's fused passes or mesh-tensorflow's ops."""
    from types import SimpleNamespace

    from mesh_tensorflow.transformer import transformer

    from t2tcli.model.rms_norm import fused_rms_norm

    hp = registry.hparams("mtf_transformer_tiny")
    hp.mesh_shape, hp.layout = (mesh_shape, "batch:batch") if mesh_shape else ("", "")
    spec = meshlib.spec_from_hparams(hp)
    with tf.Graph().as_default():
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        dims = [mtf.Dimension(n, k) for n, k in zip(("batch", "length", "d_model"), x.shape, strict=True)]
        model = SimpleNamespace(model_dim=dims[-1], ensemble_dims=[])
        variable_dtype = mtf.VariableDType(tf.float32, tf.float32, tf.as_dtype(dtype))
        context = SimpleNamespace(model=model, mesh=mesh, variable_dtype=variable_dtype, train=True)
        xs = mtf.cast(mtf.import_tf_tensor(mesh, tf.constant(x), mtf.Shape(dims)), tf.as_dtype(dtype))
        norm = fused_rms_norm if fused else transformer.sublayer_rms_norm
        with tf1.variable_scope("norm"):
            y = norm(xs, None, context)
        w = mtf.import_tf_tensor(mesh, tf.constant(weights), mtf.Shape(dims))
        loss = mtf.reduce_sum(mtf.cast(y, tf.float32) * w)
        (variable,) = graph.trainable_variables
        dx, dscale = mtf.gradients([loss], [xs, variable.outputs[0]])
        impl = mesh_impl(spec, [""] * spec.size)
        lowering = mtf.Lowering(graph, {mesh: impl})
        outputs = [tf.cast(lowering.export_to_tf_tensor(v), tf.float32) for v in (y, dx, dscale)]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(variable.get_master().assign(scale))
            sess.run(lowering.copy_masters_to_slices())
            return sess.run(outputs)


def _exact_rms_norm(x: np.ndarray, scale: np.ndarray, dy: np.ndarray, epsilon: float = 1e-6) -> list[np.ndarray]:
    x, scale, dy = (v.astype(np.float64) for v in (x, scale, dy))
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + epsilon)
    g = dy * scale
    dx = r * g - x * r**3 * (g * x).mean(-1, keepdims=True)
    return [x * r * scale, dx, (dy * x * r).sum((0, 1))]


def test_fused_rms_norm_is_mesh_tensorflows_with_its_gradients():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 6, 32)) * 3).astype(np.float32)
    x[2, 1] *= 1e-3  # a near-zero row, where epsilon matters
    scale = (1 + 0.5 * rng.standard_normal(32)).astype(np.float32)
    w = rng.standard_normal(x.shape).astype(np.float32)
    ours = _rms_norm_and_grads(True, x, scale, w, "float32")
    theirs = _rms_norm_and_grads(False, x, scale, w, "float32")
    for a, b, c, what in zip(ours, theirs, _exact_rms_norm(x, scale, w), ("y", "dx", "dscale"), strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-4, err_msg=what)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4, err_msg=what)
    # Split along the batch, the scale's gradient is summed across the slices.
    split = _rms_norm_and_grads(True, x, scale, w, "float32", mesh_shape="batch:2")
    for a, b, what in zip(split, ours, ("y", "dx", "dscale"), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=what)
    # bfloat16: x, the scale and the incoming gradient are bfloat16, but the norm is
    # computed in float32 and each output rounded once: within one bfloat16 rounding
    # (2^-8) of the exact values for those rounded inputs.
    x16, scale16, w16 = (tf.cast(tf.cast(v, tf.bfloat16), tf.float32).numpy() for v in (x, scale, w))
    exact16 = _exact_rms_norm(x16, scale16, w16)
    y16, dx16, _ = _rms_norm_and_grads(True, x, scale, w, "bfloat16")
    np.testing.assert_allclose(y16, exact16[0], rtol=2**-8, atol=1e-6)
    np.testing.assert_allclose(dx16, exact16[1], rtol=2**-8, atol=1e-6 * np.abs(exact16[1]).max())


def _norm_and_layer(how: str, x: np.ndarray, sequence_id: np.ndarray, dtype: str, train: bool = True):
    """(y, dL/dx, dL/dscale, dL/dkernel) as float32 for the loss sum(y * y) of a norm and a
    layer (a dense layer, in the sublayers' scopes) with the padding of `sequence_id`
    zeroed, and the variables' names: t2tcli's one sublayer ("one"), t2tcli's fused norm
    and mesh-tensorflow's layer call ("two"), or mesh-tensorflow's two ("mtf")."""
    from types import SimpleNamespace

    from mesh_tensorflow.transformer import transformer

    from t2tcli.model.rms_norm import fused_rms_norm, fused_rms_norm_and_layer

    class Dense:
        def call(self, context, x):
            return mtf.layers.dense(x, x.shape.dims[-1:], use_bias=False, variable_dtype=context.variable_dtype)

    spec = meshlib.spec_from_hparams(registry.hparams("mtf_transformer_tiny"))
    with tf.Graph().as_default():
        tf1.set_random_seed(2)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        dims = [mtf.Dimension(n, k) for n, k in zip(("batch", "length", "d_model"), x.shape, strict=True)]
        activation_dtype = tf.as_dtype(dtype)
        context = SimpleNamespace(
            model=SimpleNamespace(model_dim=dims[-1], ensemble_dims=[]),
            mesh=mesh,
            variable_dtype=mtf.VariableDType(tf.float32, tf.float32, activation_dtype),
            activation_dtype=activation_dtype,
            train=train,
            sequence_id=mtf.import_tf_tensor(mesh, tf.constant(sequence_id), mtf.Shape(dims[:2])),
            current_layer=Dense(),
        )
        xs = mtf.cast(mtf.import_tf_tensor(mesh, tf.constant(x), mtf.Shape(dims)), activation_dtype)
        with tf1.variable_scope("layer"):
            if how == "one":
                y = fused_rms_norm_and_layer(xs, None, context)
            else:
                norm = fused_rms_norm if how == "two" else transformer.sublayer_rms_norm
                y = transformer.sublayer_call_layer(norm(xs, None, context), None, context)
        y32 = mtf.cast(y, tf.float32)
        scale, kernel = graph.trainable_variables
        grads = mtf.gradients([mtf.reduce_sum(y32 * y32)], [xs, scale.outputs[0], kernel.outputs[0]])
        lowering = mtf.Lowering(graph, {mesh: mesh_impl(spec, [""])})
        outputs = [tf.cast(lowering.export_to_tf_tensor(v), tf.float32) for v in (y, *grads)]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            return sess.run(outputs), [v.name for v in graph.trainable_variables]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_fused_norm_zeroes_padding_as_the_layer_call_did(dtype):
    """The norm and the layer as one sublayer: the same variables and, padding zeroed in
    the fused pass rather than by a product of its own, the same values as the fused norm
    followed by mesh-tensorflow's layer call; evaluation graphs run the two sublayers."""

    rng = np.random.default_rng(9)
    x = (rng.standard_normal((3, 5, 16)) * 2).astype(np.float32)
    sequence_id = np.array([[1, 1, 1, 0, 0], [1, 1, 2, 2, 2], [1, 0, 0, 0, 0]], np.int32)
    (ours, names), (separate, separate_names), (theirs, their_names) = (
        _norm_and_layer(how, x, sequence_id, dtype) for how in ("one", "two", "mtf")
    )
    assert names == separate_names == their_names == ["layer/rms_norm/scale", "layer/Dense/dense/kernel"]
    padding = sequence_id == 0
    assert not ours[0][padding].any() and ours[0][~padding].all() and not ours[1][padding].any()
    # Against the fused norm and the layer call one after the other: equal, not merely close.
    for a, b, what in zip(ours, separate, ("y", "dx", "dscale", "dkernel"), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=what)
    tolerance = 1e-5 if dtype == "float32" else 2e-2  # mesh-tensorflow's norm: the same function
    for a, b, what in zip(ours, theirs, ("y", "dx", "dscale", "dkernel"), strict=True):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max(), err_msg=what)
    # Graphs that do not train: mesh-tensorflow's two sublayers, the same ops.
    evaluation = [_norm_and_layer(how, x, sequence_id, dtype, train=False)[0] for how in ("one", "mtf")]
    for a, b in zip(*evaluation, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_model_fuses_its_norms_off_tpu_unless_the_mesh_splits_a_row():
    from t2tcli.model import gin_bindings

    tiny = registry.hparams("mtf_transformer_tiny")
    assert gin_bindings.fuses_norm(model_config.build(tiny, 40, use_tpu=False))
    assert "@t2tcli.fused_" in " ".join(gin_bindings.bindings(model_config.build(tiny, 40)))
    assert not gin_bindings.fuses_norm(model_config.build(tiny, 40, use_tpu=True))
    assert "@t2tcli.fused_" not in " ".join(gin_bindings.bindings(model_config.build(tiny, 40, use_tpu=True)))
    for layout in ("d_model:model", "length:model"):
        split = registry.hparams("mtf_transformer_tiny")
        split.mesh_shape, split.layout = "model:2", layout
        assert not gin_bindings.fuses_norm(model_config.build(split, 40, use_tpu=False)), layout
    batch_split = registry.hparams("mtf_transformer_tiny")
    batch_split.mesh_shape, batch_split.layout = "batch:2", "batch:batch"
    assert gin_bindings.fuses_norm(model_config.build(batch_split, 40, use_tpu=False))


def test_the_fused_norm_is_for_training_graphs_only():
    from types import SimpleNamespace

    from t2tcli.model.rms_norm import fused_rms_norm

    def slicewise_ops(train: bool) -> int:
        with tf.Graph().as_default():
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            dims = [mtf.Dimension("batch", 2), mtf.Dimension("length", 3), mtf.Dimension("d_model", 8)]
            model = SimpleNamespace(model_dim=dims[-1], ensemble_dims=[])
            variable_dtype = mtf.VariableDType(tf.float32, tf.float32, tf.float32)
            context = SimpleNamespace(model=model, mesh=mesh, variable_dtype=variable_dtype, train=train)
            x = mtf.import_tf_tensor(mesh, tf.ones([2, 3, 8]), mtf.Shape(dims))
            fused_rms_norm(x, None, context, name="layer_norm")
            assert [v.name for v in graph.trainable_variables] == ["layer_norm/scale"]
            return sum(isinstance(op, mtf.SlicewiseOperation) and "rms_norm" in op.name for op in graph.operations)

    # Evaluation, decoding and exported models run mesh-tensorflow's plain ops, with no XLA.
    assert slicewise_ops(train=True) == 1
    assert slicewise_ops(train=False) == 0
