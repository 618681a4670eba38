"""CTranslate2 as a decode engine: same answers as the TF engines, and all of t2t-decode around it."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import test_numerics
from conftest import require_extra, run_binary
from toy_model import toy_model  # noqa: F401  (session fixture)

from t2tcli.compat import X86
from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.decode import batching, ct2, ct2_cpu, engines, settings, side_by_side
from t2tcli.errors import UserError
from t2tcli.model import checkpoints, hardware, loading
from t2tcli.model import config as model_config

require_extra("ctranslate2")

LINES = ["a b c", "j i h g f", "d", "e e a a b a", "c a", "b b b b b b", "i h", "a j"]


def _predict(model, engine: str, rows, length: int = 16, **decode):
    settings = {"engine": engine, "beam_size": 1, "alpha": 0.0, "temperature": 0.0, "top_k": 0}
    settings.update(max_decode_length=length, **decode)
    checkpoint = checkpoints.resolve(model.model_dir, None)[1]
    predict = engines.predictor(model, settings, checkpoint, scoring=rows[0].targets is not None)
    inputs_length = max(16, *(len(r.inputs) for r in rows))
    results = batching.predict_rows(rows, predict, 4, inputs_length, length if rows[0].targets is not None else None)
    return [[int(i) for i in r["outputs"]] for r in results], [float(r["scores"]) for r in results]


def copy_model(toy_model: dict[str, str], model_dir) -> None:  # noqa: F811
    """The toy model's run and checkpoints copied to model_dir, without the conversions an
    earlier test may have cached in the shared model_dir: every test here starts without one."""
    import shutil

    shutil.copytree(toy_model["model_dir"], model_dir, ignore=shutil.ignore_patterns(ct2.CACHE_DIR))


@pytest.fixture(autouse=True)
def _ctranslate2_variables_left_as_found():
    """CTranslate2 reads its variables once a process and every decode subprocess inherits
    them, so a test that leaves one set (a described CPU's instruction set, say) breaks
    tests far from it; this names the test instead. The engine's own setting for the real
    CPU is allowed to stay, as it stays in a user's decode."""
    real_isa = ct2_cpu.fastest_isa_here()
    names = (ct2_cpu.ISA_VARIABLE, ct2_cpu.MKL_VARIABLE)
    before = {name: os.environ.get(name) for name in names}
    yield
    after = {name: os.environ.get(name) for name in names}
    if before[ct2_cpu.ISA_VARIABLE] is None and after[ct2_cpu.ISA_VARIABLE] == real_isa:
        after[ct2_cpu.ISA_VARIABLE] = None
    assert after == before, f"the test left CTranslate2's variables at {after}, found at {before}"


@pytest.fixture(scope="module")
def toy(toy_model, tmp_path_factory):  # noqa: F811
    """The toy model, copied: the CTranslate2 conversion is cached inside a model_dir."""
    model_dir = tmp_path_factory.mktemp("ct2") / "model"
    copy_model(toy_model, model_dir)
    model = loading.load(str(model_dir), hparams="activation_dtype=float32")
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 16)[0]) for i, x in enumerate(LINES)]
    return model, rows


@pytest.mark.parametrize("decode", [{}, {"beam_size": 4}])
def test_float32_decodes_and_scores_equal_the_fast_engines(toy, decode):
    model, rows = toy
    fast_ids, fast_scores = _predict(model, "fast", rows, **decode)
    ct2_ids, ct2_scores = _predict(model, "ctranslate2", rows, **decode)
    ended = [i for i, ids in enumerate(fast_ids) if EOS_ID in ids]
    assert len(ended) >= 6, f"the trained copy model ends most lines, not only {ended}"
    # A line no hypothesis finishes within max_decode_length is where the engines' beam
    # searches legitimately differ (why engine=auto keeps beam search on fast).
    compared = ended if decode.get("beam_size", 1) > 1 else list(range(len(rows)))
    fast_ids, fast_scores = [fast_ids[i] for i in compared], [fast_scores[i] for i in compared]
    ct2_ids, ct2_scores = [ct2_ids[i] for i in compared], [ct2_scores[i] for i in compared]
    assert ct2_ids == fast_ids
    np.testing.assert_allclose(ct2_scores, fast_scores, rtol=1e-4, atol=1e-4)
    rows = [rows[i] for i in compared]
    scored = [batching.Row(r.index, r.inputs, [i for i in ids if i]) for r, ids in zip(rows, fast_ids, strict=True)]
    _, fast_scored = _predict(model, "fast", scored)
    _, ct2_scored = _predict(model, "ctranslate2", scored)
    np.testing.assert_allclose(ct2_scored, fast_scored, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ct2_scored, fast_scores, rtol=1e-4, atol=1e-4)


def test_batches_run_a_batch_on_each_core_and_come_back_in_order(toy):
    """The Translator computes a batch on each core, and the Predictor reads batches ahead
    to keep them busy, within its bound; rows come back in the order the batches went in."""
    model, rows = toy
    settings = {"engine": "ctranslate2", "beam_size": 1, "alpha": 0.0, "max_decode_length": 16}
    predict = engines.predictor(model, settings, checkpoints.resolve(model.model_dir, None)[1])
    assert predict.translator.num_translators == side_by_side.workers()
    pulled = []

    def batches():
        for i, row in enumerate(rows):
            pulled.append(i)
            yield {"inputs": np.array([row.inputs + [0] * (16 - len(row.inputs))], np.int32)}

    results = predict(batches, {"inputs": (1, 16)})
    first = next(results)
    # workers + 1 in the engine, and one more read ahead to know whether a batch is the input's last.
    assert len(pulled) == min(len(rows), side_by_side.workers() + 2)
    one_by_one = [[int(i) for i in r["outputs"]] for r in [first, *results]]
    assert one_by_one == _predict(model, "ctranslate2", rows)[0]


class _PartsSeen:
    """A Translator that notes the part size each batch was handed over in."""

    def __init__(self, translator):
        self.translator = translator
        self.parts: list[int] = []

    def translate_batch(self, sources, **options):
        self.parts.append(options["max_batch_size"])
        return self.translator.translate_batch(sources, **options)


@pytest.mark.parametrize(
    ("read_ahead", "lines", "parts"), [(True, 8, [0] * 4), (True, 6, [0, 0, 1]), (False, 8, [1] * 4)]
)
def test_a_batch_no_other_batch_runs_beside_is_split_across_the_cores(toy, monkeypatch, read_ahead, lines, parts):
    """On 2 workers, the input's last batch runs as a part per worker where it would run
    alone (an odd number of batches), and whole beside the one before it; with no
    read-ahead (interactive decode) every batch runs alone, so every batch is split."""
    model, rows = toy
    monkeypatch.setattr(side_by_side, "workers", lambda: 2)
    settings = {"engine": "ctranslate2", "beam_size": 1, "alpha": 0.0, "max_decode_length": 16}
    checkpoint = checkpoints.resolve(model.model_dir, None)[1]
    predict = engines.predictor(model, settings, checkpoint, read_ahead=read_ahead)
    predict.translator = seen = _PartsSeen(predict.translator)
    rows = rows[:lines]
    pairs = [rows[i : i + 2] for i in range(0, len(rows), 2)]

    def batches():
        for pair in pairs:
            yield {"inputs": np.array([r.inputs + [0] * (16 - len(r.inputs)) for r in pair], np.int32)}

    outputs = [[int(i) for i in r["outputs"]] for r in predict(batches, {"inputs": (2, 16)})]
    assert seen.parts == parts  # CTranslate2's max_batch_size: 0 runs the batch whole
    assert outputs == _predict(model, "ctranslate2", rows)[0]


def test_asked_for_with_t5_s_length_penalty_runs_its_own_and_says_so_once(toy, caplog):
    """engine=ctranslate2 with alpha != 0 beam search runs CTranslate2's penalty, warned once
    per engine built for decoding (the memory bound asking how many batches it holds says
    nothing, nor does scoring)."""
    model, _ = toy
    decode = settings.DecodeSettings.of({"engine": "ctranslate2", "beam_size": 4, "alpha": 0.6}, model.hparams)
    caplog.set_level("WARNING")
    assert engines.batches_in_flight(model, decode) == ct2.batches_in_flight()
    engines.predictor(model, decode, checkpoints.resolve(model.model_dir, None)[1])
    warned = [r.getMessage() for r in caplog.records if "its penalty" in r.getMessage()]
    assert warned == [f"engine=ctranslate2: {ct2.PENALTY_DIFFERS}; its penalty (score / length ** alpha) is used"]
    # Scoring (t2t-eval's second pass, --score_file) applies no length penalty: nothing to say.
    caplog.clear()
    engines.predictor(model, decode, checkpoints.resolve(model.model_dir, None)[1], scoring=True)
    assert not [r for r in caplog.records if "its penalty" in r.getMessage()]


def test_int8_runs_int8_weights(toy):
    """quantization=int8 converts to int8 weights and runs them: the converted model is
    smaller than float32's, the Translator computes in int8, and its scores move off
    float32's by quantization error (not by a different model)."""
    model, rows = toy
    ids32, scores32 = _predict(model, "ctranslate2", rows)
    checkpoint = checkpoints.resolve(model.model_dir, None)[1]
    predict = engines.predictor(model, {"engine": "ctranslate2", "quantization": "int8"}, checkpoint)
    assert predict.translator.compute_type.startswith("int8")  # int8_float32 where the rest runs float32
    ids8, scores8 = _predict(model, "ctranslate2", rows, quantization="int8")
    assert not np.allclose(scores8, scores32, rtol=0, atol=1e-5), "int8 scores are not float32's"
    np.testing.assert_allclose(scores8, scores32, atol=0.5)
    assert sum(a == b for a, b in zip(ids8, ids32, strict=True)) >= len(rows) - 2
    converted = (Path(model.model_dir) / ct2.CACHE_DIR).iterdir()
    cache = {entry.name.removesuffix("-narrow").rsplit("-", 1)[-1]: entry for entry in converted}
    sizes = {q: (cache[q] / "model.bin").stat().st_size for q in ("float32", "int8")}
    assert sizes["int8"] < 0.6 * sizes["float32"], sizes


def test_long_lines_decode_and_score_as_on_the_fast_engine(toy):
    """Past T5's exact relative positions: inputs of 20-30 tokens (the encoder's buckets are
    exact below 8 apart) and targets of 41 (the decoder's, below 16): a wrong bucket mapping
    or maximum distance in the converted model shows here, not on the short lines above."""
    model, _ = toy
    rng = np.random.default_rng(0)
    letters = "a b c d e f g h i j".split()
    texts = [" ".join(rng.choice(letters, n)) for n in (20, 24, 26, 30)]
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 32)[0]) for i, x in enumerate(texts)]
    assert min(len(r.inputs) for r in rows) > 16
    fast_ids, fast_scores = _predict(model, "fast", rows, length=48)
    ct2_ids, ct2_scores = _predict(model, "ctranslate2", rows, length=48)
    assert ct2_ids == fast_ids
    np.testing.assert_allclose(ct2_scores, fast_scores, rtol=1e-4, atol=1e-4)
    scored = [batching.Row(r.index, r.inputs, (r.inputs[:-1] * 2)[:40] + [EOS_ID]) for r in rows]
    _, fast_scored = _predict(model, "fast", scored, length=48)
    _, ct2_scored = _predict(model, "ctranslate2", scored, length=48)
    np.testing.assert_allclose(ct2_scored, fast_scored, rtol=1e-4, atol=1e-4)


def test_t2t_decode_with_ctranslate2_writes_what_the_fast_engine_writes(toy_model, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    copy_model(toy_model, model_dir)
    lines = tmp_path / "in.txt"
    lines.write_text("a b c\n\nj i h g\nd e f\n")
    outputs, steps = {}, {}
    for engine in ("fast", "ctranslate2", "ctranslate2"):
        proc = run_binary(
            "t2t-decode",
            f"--model_dir={model_dir}",
            f"--decode_from_file={lines}",
            f"--decode_hparams=engine={engine},batch_size=2",
            "--hparams=activation_dtype=float32",
        )
        assert proc.returncode == 0, proc.stderr
        if engine in outputs:
            assert "converted" not in proc.stderr, "the cached conversion is reused"
        else:
            assert f"decode engine: {engine} (asked for)" in proc.stderr
        outputs[engine] = proc.stdout
        steps[engine] = re.search(r"(\d+) decode steps", proc.stderr).group(1)
        # Only CTranslate2 says how long it kept t2t-decode waiting.
        waited = re.search(r"[\d.]+ s of the [\d.]+ s waiting on the engine", proc.stderr)
        assert bool(waited) == (engine == "ctranslate2")
    assert outputs["ctranslate2"] == outputs["fast"] and outputs["fast"].splitlines()[1] == ""
    assert steps["ctranslate2"] == steps["fast"], "both engines say how many steps their searches took"
    assert len(list((model_dir / "ctranslate2").iterdir())) == 1
    proc = run_binary(
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={lines}",
        "--decode_hparams=quantization=int8,engine=ctranslate2",
    )
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 4, proc.stderr
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b c\ta b c\nd\tj\n")
    scores = {}
    for engine in ("fast", "ctranslate2"):
        proc = run_binary(
            "t2t-decode",
            f"--model_dir={model_dir}",
            f"--score_file={pairs}",
            f"--decode_hparams=engine={engine}",
            "--hparams=activation_dtype=float32",
        )
        assert proc.returncode == 0, proc.stderr
        scores[engine] = [float(x) for x in proc.stdout.split()]
    np.testing.assert_allclose(scores["ctranslate2"], scores["fast"], rtol=1e-4, atol=1e-4)
    assert scores["fast"][0] > scores["fast"][1]


def test_auto_takes_ctranslate2_where_it_decodes_alike(toy):
    model, _ = toy
    assert settings.choose(model, {"engine": "auto", "beam_size": 1})[0] == "ctranslate2"
    engine, why = settings.choose(model, {"engine": "auto", "beam_size": 4, "alpha": 0.6})
    assert engine == "fast" and "beam search" in why
    # A mapping's missing keys are the model's own (alpha 0.6 here): beam search as CTranslate2 runs it is alpha 0.
    assert settings.choose(model, {"engine": "auto", "beam_size": 4, "alpha": 0.0}, scoring=True)[0] == "ctranslate2"
    assert settings.choose(model, {"engine": "fast"})[0] == "fast"


@pytest.mark.parametrize("flags, engine", [(test_numerics.AVX2, "ctranslate2"), (test_numerics.AMX, "fast")])
def test_auto_keeps_the_tf_engine_where_bfloat16_is_native(toy, monkeypatch, flags, engine):
    """With activation_dtype=auto, a CPU that runs bfloat16 natively decodes on the TF engine."""
    model, _ = toy
    monkeypatch.setattr(hardware, "detect", lambda use_tpu=False: test_numerics.cpu(flags))
    hp = model.hparams.copy()
    hp.activation_dtype = "auto"
    auto = dataclasses.replace(model, config=model_config.build(hp, model.vocab.vocab_size))
    chosen, why = settings.choose(auto, {"engine": "auto", "beam_size": 1})
    assert chosen == engine and (engine == "ctranslate2" or "bfloat16 runs natively" in why)
    assert settings.choose(auto, {"engine": "ctranslate2", "beam_size": 1})[0] == "ctranslate2"
    # bfloat16 asked for where it is emulated: the TF engine, which gives its answers, for that reason.
    hp.activation_dtype = "bfloat16"
    asked = dataclasses.replace(model, config=model_config.build(hp, model.vocab.vocab_size))
    chosen, why = settings.choose(asked, {"engine": "auto", "beam_size": 1})
    assert chosen == "fast" and ("natively" in why) == (engine == "fast"), why


def _unset_isa_variable(monkeypatch) -> None:
    """Unset the variable for this test alone: set first, so that monkeypatch also undoes
    what the code under test writes into os.environ (it would reach every later subprocess)."""
    monkeypatch.setenv(ct2_cpu.ISA_VARIABLE, "")
    monkeypatch.delenv(ct2_cpu.ISA_VARIABLE)


@pytest.mark.parametrize(
    "flags, isa",
    [
        (test_numerics.AMX, "AVX512"),
        (test_numerics.AVX512_BF16, "AVX512"),
        (test_numerics.AVX512, None),
        (test_numerics.AVX2, None),
    ],
)
def test_ctranslate2_runs_avx512_kernels_on_bfloat16_cpus_unless_the_user_says_otherwise(monkeypatch, flags, isa):
    # Described CPUs only: CTranslate2 itself never loads here under an instruction set that
    # this CPU may lack (the engine's own call is the test below).
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo="": flags)
    _unset_isa_variable(monkeypatch)
    ct2_cpu.use_fastest_isa()
    assert os.environ.get(ct2_cpu.ISA_VARIABLE) == isa
    monkeypatch.setenv(ct2_cpu.ISA_VARIABLE, "AVX2")
    ct2_cpu.use_fastest_isa()
    assert os.environ[ct2_cpu.ISA_VARIABLE] == "AVX2"


def test_the_ctranslate2_engine_sets_this_cpus_instruction_set_before_its_model_loads(toy, monkeypatch):
    model, _ = toy
    _unset_isa_variable(monkeypatch)
    # GENERIC, which every CPU runs, stands for this CPU's choice (on most CPUs None, which an
    # engine that set nothing would also show). CTranslate2 reads the variable once a process,
    # at its first model: one loads before, so no later test runs GENERIC kernels. Where that
    # load set this CPU's choice (AVX512 on bfloat16-native CPUs), the engine would now take
    # the variable for the user's, so it is unset again.
    _predict(model, "ctranslate2", [batching.Row(0, [5, EOS_ID])], length=4)
    monkeypatch.delenv(ct2_cpu.ISA_VARIABLE, raising=False)
    monkeypatch.setattr(ct2_cpu, "fastest_isa_here", lambda: "GENERIC")
    seen = []
    translator = ct2.module().Translator

    def loading(*args, **kwargs):
        seen.append(os.environ.get(ct2_cpu.ISA_VARIABLE))
        return translator(*args, **kwargs)

    monkeypatch.setattr(ct2.module(), "Translator", loading)
    assert _predict(model, "ctranslate2", [batching.Row(0, [5, EOS_ID])], length=4)[0]
    assert seen == ["GENERIC"]


ZEN4 = test_numerics.AVX512_BF16 | {"avx512_vnni"}


@pytest.mark.parametrize(
    "flags, vendor, use_mkl, onednn_max_isa, saturate",
    [
        (test_numerics.AVX2, "AuthenticAMD", None, "", True),  # oneDNN, no VNNI
        (test_numerics.AVX2, "AuthenticAMD", "1", "", False),  # MKL asked for
        (test_numerics.AVX2, "AuthenticAMD", "TRUE", "", False),
        (test_numerics.AVX2, "AuthenticAMD", "yes", "", True),  # not a value CTranslate2 reads as true
        (test_numerics.AVX2, "GenuineIntel", None, "", False),  # MKL by default
        (test_numerics.AVX2, "GenuineIntel", "0", "", True),
        (test_numerics.AVX2 | {"avx_vnni"}, "GenuineIntel", "0", "", False),
        (ZEN4, "AuthenticAMD", None, "", False),
        (ZEN4, "AuthenticAMD", None, "DEFAULT", False),
        (ZEN4, "AuthenticAMD", None, "AVX512_CORE_VNNI", False),
        (ZEN4, "AuthenticAMD", None, "AVX512_CORE", True),  # oneDNN held below its VNNI
        (ZEN4, "AuthenticAMD", None, "AVX2", True),
        (test_numerics.AMX, "GenuineIntel", "0", "", False),  # amx_int8
        (test_numerics.AMX, "GenuineIntel", "0", "AVX2", True),
        (frozenset(), "", None, "", False),  # no /proc/cpuinfo: nothing known
    ],
)
def test_int8_sums_saturate_where_onednn_multiplies_without_vnni(flags, vendor, use_mkl, onednn_max_isa, saturate):
    assert ct2_cpu.int8_sums_saturate(flags, vendor, use_mkl, onednn_max_isa) is saturate


def _describe_cpu(monkeypatch, flags: frozenset[str], vendor: str) -> None:
    """A described CPU, no limit on oneDNN's ISA and no CT2_USE_MKL: CTranslate2 reads the
    latter once a process, at its first model, so a test that loads a model never sets it."""
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo="": flags)
    monkeypatch.setattr(hardware, "cpu_vendor", lambda cpuinfo="": vendor)
    monkeypatch.setenv(ct2_cpu.MKL_VARIABLE, "")
    monkeypatch.delenv(ct2_cpu.MKL_VARIABLE)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


def test_narrow_int8_weights_are_7_bits_whose_pair_sums_fit_in_16_bits():
    # oneDNN without VNNI: an unsigned activation (at most 255) times a weight, two products to an int16.
    limit, int16 = ct2_cpu.NARROW_INT8_WEIGHT_LIMIT, np.iinfo(np.int16)
    assert limit == 2**6 - 1
    assert int16.min <= 2 * 255 * -limit and 2 * 255 * limit <= int16.max
    assert 2 * 255 * ct2_cpu.INT8_WEIGHT_LIMIT > int16.max  # CTranslate2's own 8-bit weights can saturate


@pytest.mark.skipif(not X86, reason="CTranslate2 multiplies with oneDNN or MKL on x86 CPUs only")
@pytest.mark.parametrize(
    "flags, vendor, use_mkl, limit",
    [
        (test_numerics.AVX2, "AuthenticAMD", None, ct2_cpu.NARROW_INT8_WEIGHT_LIMIT),
        (test_numerics.AVX2, "AuthenticAMD", "1", ct2_cpu.INT8_WEIGHT_LIMIT),
        (test_numerics.AVX2 | {"avx_vnni"}, "AuthenticAMD", None, ct2_cpu.INT8_WEIGHT_LIMIT),
        (test_numerics.AVX2, "GenuineIntel", None, ct2_cpu.INT8_WEIGHT_LIMIT),
    ],
)
def test_int8_weights_are_narrow_where_the_sums_would_saturate(monkeypatch, flags, vendor, use_mkl, limit):
    _describe_cpu(monkeypatch, flags, vendor)
    if use_mkl:
        monkeypatch.setenv(ct2_cpu.MKL_VARIABLE, use_mkl)
    assert ct2_cpu.int8_weight_limit("int8") == limit
    assert ct2_cpu.int8_weight_limit("int8_float32") == limit
    assert ct2_cpu.int8_weight_limit("float32") is None
    assert ct2_cpu.narrow(ct2_cpu.int8_weight_limit("int8")) == (limit == ct2_cpu.NARROW_INT8_WEIGHT_LIMIT)
    assert not ct2_cpu.narrow(ct2_cpu.int8_weight_limit("float32"))


def _spec(model):
    from t2tcli.interop import hf_t5

    checkpoint = checkpoints.resolve(model.model_dir, None)[1]
    values = hf_t5.mesh_values_from_checkpoint(checkpoint, model.hparams, model.vocab.vocab_size)
    return ct2.validated_spec(values, model.hparams, model.vocab)  # as ct2.converted builds it


def _variables(spec) -> dict:
    from ctranslate2.specs import model_spec

    found = {}
    model_spec.visit_spec(spec, lambda layer, name, value: found.__setitem__(name, value))
    return found


def test_narrow_quantization_fills_each_row_to_its_limit_from_the_float_weights(toy):
    model, _ = toy
    floats = {name: v.numpy().copy() for name, v in _variables(_spec(model)).items() if hasattr(v, "numpy")}
    wide, narrow = _spec(model), _spec(model)
    ct2_cpu.quantize(wide, "int8", ct2_cpu.INT8_WEIGHT_LIMIT)
    ct2_cpu.quantize(narrow, "int8", ct2_cpu.NARROW_INT8_WEIGHT_LIMIT)
    wide, narrow = _variables(wide), _variables(narrow)
    assert wide.keys() == narrow.keys()

    def int8_weights(variables: dict) -> list[str]:  # not the flags CTranslate2 stores as int8 scalars
        return [name for name, v in variables.items() if getattr(v, "dtype", None) == "int8" and not v.is_scalar()]

    quantized = int8_weights(narrow)
    assert quantized == int8_weights(wide)
    assert len(quantized) >= 8, "the model's products and embeddings are stored in int8"
    for name, value in narrow.items():
        if name not in quantized:  # scales, aliases, norms: as CTranslate2 stores them
            if name.removesuffix("_scale") not in quantized:
                assert type(value) is type(wide[name]), name
                assert isinstance(value, str) or np.array_equal(value.numpy(), wide[name].numpy()), name
            continue
        ints, scale = value.numpy(), narrow[f"{name}_scale"].numpy()
        rows = floats[name].reshape(len(floats[name]), -1)
        largest = np.abs(ints.reshape(len(ints), -1)).max(axis=1)
        assert largest.max() == ct2_cpu.NARROW_INT8_WEIGHT_LIMIT, name
        assert np.all(largest[np.abs(rows).max(axis=1) > 0] == ct2_cpu.NARROW_INT8_WEIGHT_LIMIT), name
        error = np.abs(ints.reshape(rows.shape) / scale[:, None] - rows)
        assert np.all(error <= 0.5 / scale[:, None] * (1 + 1e-5)), name
        # CTranslate2's own int8 fills each weight's rows to 127.
        assert np.abs(wide[name].numpy()).max() == ct2_cpu.INT8_WEIGHT_LIMIT, name


def test_int8_rows_scale_each_row_to_the_limit_and_keep_zero_and_tiny_rows_finite():
    weight = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [1e-39, 0.0, -1e-39]], np.float32)
    ints, scale = ct2_cpu.int8_rows(weight, ct2_cpu.NARROW_INT8_WEIGHT_LIMIT)
    assert ints.dtype == np.int8 and scale.dtype == np.float32 and np.all(np.isfinite(scale))
    assert ints[0].tolist() == [32, -63, 16] and scale[0] == 63.0
    assert ints[1].tolist() == [0, 0, 0] and scale[1] == 1.0
    assert np.abs(ints[2]).max() <= 63
    assert ct2_cpu.int8_rows(weight.reshape(3, 3, 1), 63)[0].shape == (3, 3, 1)


@pytest.mark.skipif(not X86, reason="CTranslate2 multiplies with oneDNN or MKL on x86 CPUs only")
def test_a_cpu_whose_int8_sums_would_saturate_gets_its_own_narrow_conversion(toy_model, tmp_path, monkeypatch):  # noqa: F811
    model_dir = tmp_path / "model"
    copy_model(toy_model, model_dir)
    model = loading.load(str(model_dir), hparams="activation_dtype=float32")
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 16)[0]) for i, x in enumerate(LINES)]
    _unset_isa_variable(monkeypatch)
    conversions = model_dir / ct2.CACHE_DIR
    # VNNI without AVX-512: a CPU described with AVX-512 would load CTranslate2 under it here.
    _describe_cpu(monkeypatch, test_numerics.AVX2 | {"avx_vnni"}, "AuthenticAMD")
    wide, wide_scores = _predict(model, "ctranslate2", rows, quantization="int8")
    assert [p.name.endswith("-int8") for p in conversions.iterdir()] == [True]
    _describe_cpu(monkeypatch, test_numerics.AVX2, "AuthenticAMD")
    narrow, narrow_scores = _predict(model, "ctranslate2", rows, quantization="int8")
    names = sorted(p.name for p in conversions.iterdir())
    assert len(names) == 2 and names[0].endswith("-int8") and names[1] == f"{names[0]}-narrow"
    assert not np.allclose(narrow_scores, wide_scores, rtol=0, atol=1e-6), "the narrow conversion holds other weights"
    float32, _ = _predict(model, "ctranslate2", rows)
    for ints in (wide, narrow):  # as test_int8_runs_int8_weights allows
        assert sum(a == b for a, b in zip(ints, float32, strict=True)) >= len(rows) - 2


def test_without_ctranslate2_the_engine_names_the_install(toy, monkeypatch):
    model, _ = toy
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(
        UserError, match="engine=ctranslate2 needs the ctranslate2 package: scripts/install ctranslate2"
    ):
        settings.choose(model, {"engine": "ctranslate2"})
    engine, why = settings.choose(model, {"engine": "auto", "beam_size": 1})
    assert engine == "fast" and "CTranslate2 is not installed" in why


def test_an_unsupported_quantization_is_one_line_and_leaves_no_cache(toy_model, tmp_path):  # noqa: F811
    import ctranslate2

    model_dir = tmp_path / "model"
    copy_model(toy_model, model_dir)
    lines = tmp_path / "in.txt"
    lines.write_text("a b\n")
    supported = ctranslate2.get_supported_compute_types("cpu")
    wanted = next((q for q in ("bfloat16", "float16", "int8_float16") if q not in supported), None)
    if wanted is None:
        pytest.skip("this CPU runs every quantization")
    args = [
        f"--model_dir={model_dir}",
        f"--decode_from_file={lines}",
        f"--decode_hparams=engine=ctranslate2,quantization={wanted}",
    ]
    before = sorted(p.name for p in model_dir.iterdir())
    proc = run_binary("t2t-decode", *args)
    assert proc.returncode == 1 and f"quantization={wanted} is not supported by CTranslate2 on this CPU" in proc.stderr
    assert "Traceback" not in proc.stderr and not (model_dir / ct2.CACHE_DIR).exists()
    assert sorted(p.name for p in model_dir.iterdir()) == before
    proc = run_binary(
        "t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}", "--decode_hparams=quantization=int3"
    )
    assert proc.returncode == 1 and "quantization='int3': use one of float32, int8" in proc.stderr
