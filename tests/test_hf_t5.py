"""Pretrained T5: Hugging Face directories in and out, T5's released names, older t2tcli runs.

The referee is an independent implementation: small random T5s built with
`transformers` (T5 v1.0: relu, embedding shared with the softmax; v1.1: gated-GELU,
an output projection of its own; mT5) are read by t2t-train, and both decode engines
must score like `transformers` and decode like it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest
from conftest import REPO, require_extra, run_binary
from toy_model import toy_model  # noqa: F401  (session fixture)

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.decode import tf_predict
from t2tcli.errors import UserError
from t2tcli.interop import hf_t5
from t2tcli.model import checkpoints, graph, loading, run_records, weight_names
from t2tcli.model import config as model_config

torch = require_extra("torch")
transformers = require_extra("transformers")
sys.path.insert(0, str(REPO / "examples"))
import random_hf_t5  # noqa: E402

KINDS = ("v1_0", "v1_1", "mt5")
LENGTH = 12
TEXTS = ["what is the lord", "and god said let there be light", "who", "how do i learn to love my neighbour today"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """{kind: (HF directory, model_dir written from it by t2t-train --train_steps=0)}."""
    base = tmp_path_factory.mktemp("hf")
    out = {}
    for kind in KINDS:
        hf_dir, model_dir = base / kind, base / f"{kind}_model"
        random_hf_t5.build(str(hf_dir), kind, pieces=600, d_model=32, layers=2, seed=0)
        proc = run_binary("t2t-train", f"--init_checkpoint={hf_dir}", f"--model_dir={model_dir}", "--train_steps=0")
        assert proc.returncode == 0, proc.stderr
        out[kind] = (str(hf_dir), str(model_dir))
    return out


def _inputs(vocab) -> np.ndarray:
    rows = [vocab.encode(t) + [EOS_ID] for t in TEXTS]
    ids = np.zeros([len(rows), max(map(len, rows))], np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids


def _predict(model_dir: str, ids: np.ndarray, engine: str, targets: np.ndarray | None = None, **decode):
    loaded = loading.load(model_dir)
    hp = loaded.hparams.copy()
    hp.activation_dtype = "float32"
    params = {"decode": {"engine": engine, "max_decode_length": LENGTH, **decode}}
    est = tf_predict.build_estimator(model_dir, model_config.build(hp, loaded.vocab.vocab_size), params["decode"])
    features = {"inputs": ids} if targets is None else {"inputs": ids, "targets": targets}
    preds = list(est.predict(lambda params=None: tf.data.Dataset.from_tensor_slices(features).batch(len(ids), True)))
    return np.stack([p["outputs"] for p in preds]), np.array([p["scores"] for p in preds])


def _hf_decode(hf_model, ids: np.ndarray, beams: int) -> np.ndarray:
    """transformers' decode, cut after the first EOS and 0-padded as t2tcli's contract says."""
    x = torch.tensor(ids, dtype=torch.long)
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=x,
            attention_mask=(x != 0).long(),
            max_new_tokens=LENGTH,
            do_sample=False,
            num_beams=beams,
            length_penalty=0.0,
            early_stopping="never",
        )[:, 1:].numpy()
    return _cut_after_eos(np.pad(out, [[0, 0], [0, LENGTH - out.shape[1]]]))


def _cut_after_eos(rows: np.ndarray) -> np.ndarray:
    out = np.zeros_like(rows)
    for i, row in enumerate(rows):
        end = np.flatnonzero(row == EOS_ID)
        n = end[0] + 1 if end.size else len(row)
        out[i, :n] = row[:n]
    return out


def _hf_scores(hf_model, ids: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Sum of transformers' log-probabilities of the non-padding targets (teacher forcing)."""
    x = torch.tensor(ids, dtype=torch.long)
    labels = torch.tensor(targets, dtype=torch.long)
    decoder_inputs = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], dim=1)
    with torch.no_grad():
        logits = hf_model(input_ids=x, attention_mask=(x != 0).long(), decoder_input_ids=decoder_inputs).logits
    logp = torch.log_softmax(logits.double(), -1).gather(-1, labels[..., None])[..., 0]
    return (logp * (labels > 0)).sum(1).numpy()


@pytest.mark.parametrize("kind", KINDS)
def test_hugging_face_t5_scores_and_decodes_alike_in_both_engines(pretrained, kind):
    hf_dir, model_dir = pretrained[kind]
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    recorded = json.load(open(os.path.join(model_dir, "hparams.json")))
    assert recorded["ffn_activation"] == ("relu" if kind == "v1_0" else "gated-gelu")
    assert recorded["tie_embeddings"] == (kind == "v1_0")
    ids = _inputs(loading.load(model_dir).vocab)
    greedy, beam = _hf_decode(hf_model, ids, 1), _hf_decode(hf_model, ids, 4)
    # Targets: transformers' own greedy outputs, ending in EOS at the last position at the latest.
    targets = greedy.astype(np.int32)
    targets[:, -1] = np.where(targets[:, -1] > 0, EOS_ID, 0)
    hf_scores = _hf_scores(hf_model, ids, targets)
    hf_beam_scores = _hf_scores(hf_model, ids, beam.astype(np.int32))
    for engine in ("fast", "mesh"):
        _, scores = _predict(model_dir, ids, engine, targets=targets)
        np.testing.assert_allclose(scores, hf_scores, rtol=1e-4, atol=1e-4, err_msg=engine)
        ours, _ = _predict(model_dir, ids, engine)
        np.testing.assert_array_equal(ours, greedy, err_msg=engine)
        ours, ours_scores = _predict(model_dir, ids, engine, beam_size=4, alpha=0.0)
        # Beam search is T5's (mesh-tensorflow's): any of the 2k candidates of a step may
        # end a hypothesis. transformers only lets the top k end, so where it differs,
        # it is because it dropped a more probable finished hypothesis than the one it returns.
        differs = ~(ours == beam).all(axis=1)
        assert (ours_scores[differs] > hf_beam_scores[differs] + 1e-4).all(), (engine, ours, beam)
        assert differs.sum() <= 1, (engine, ours, beam)


def test_pretrained_model_dir_decodes_raw_lines_and_needs_a_problem_only_to_evaluate(pretrained, tmp_path):
    _, model_dir = pretrained["v1_1"]
    run = json.load(open(os.path.join(model_dir, "run.json")))
    assert run["problem"] == "" and run["hparams_set"] == "t5_v1_1_small"
    lines = tmp_path / "in.txt"
    lines.write_text("what is the lord\n\nwho\n")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", "--raw_inputs", f"--decode_from_file={lines}")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 3 and proc.stdout.splitlines()[1] == ""
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}")
    assert proc.returncode == 1 and "pass --raw_inputs" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_binary("t2t-eval", f"--model_dir={model_dir}")
    assert proc.returncode == 1 and "pass --problem and --data_dir" in proc.stderr


def test_fine_tune_from_a_hugging_face_directory_needs_its_vocabulary(pretrained, tmp_path):
    hf_dir, _ = pretrained["v1_0"]
    own_vocab = tmp_path / "own"
    assert run_binary("t2t-datagen", "--problem=qp_is_duplicate", f"--data_dir={own_vocab}").returncode == 0
    proc = run_binary(
        "t2t-train",
        "--problem=qp_is_duplicate",
        f"--init_checkpoint={hf_dir}",
        f"--data_dir={own_vocab}",
        f"--model_dir={tmp_path / 'bad'}",
        "--train_steps=2",
    )
    assert proc.returncode == 1 and f"--vocab_from={hf_dir}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "bad").exists()

    data = tmp_path / "t5_data"
    proc = run_binary("t2t-datagen", "--problem=qp_is_duplicate", f"--vocab_from={hf_dir}", f"--data_dir={data}")
    assert proc.returncode == 0, proc.stderr
    model_dir = tmp_path / "tuned"
    proc = run_binary(
        "t2t-train",
        "--problem=qp_is_duplicate",
        f"--init_checkpoint={hf_dir}",
        f"--data_dir={data}",
        f"--model_dir={model_dir}",
        "--hparams=inputs_length=48,targets_length=4,batch_size=8",
        "--train_steps=3",
        "--log_every_steps=1",
    )
    assert proc.returncode == 0, proc.stderr
    start = tf.train.load_checkpoint(str(model_dir / "model.ckpt-0"))
    hf_weights = hf_t5.open_model(hf_dir).tensors()
    np.testing.assert_array_equal(start.get_tensor("shared/embedding"), hf_weights["shared.weight"])
    name = "decoder/block_001/layer_002/DenseReluDense/wo/kernel"
    np.testing.assert_array_equal(
        start.get_tensor(name), hf_weights["decoder.block.1.layer.2.DenseReluDense.wo.weight"].T
    )
    assert not any(p.startswith(".pretrained") for p in os.listdir(model_dir)), "the converted copy is removed"


def test_export_to_hugging_face_scores_the_same_under_transformers(toy_model, tmp_path):  # noqa: F811
    model_dir = toy_model["model_dir"]
    export_dir = tmp_path / "hf"
    proc = run_binary("t2t-export", f"--model_dir={model_dir}", "--export_format=hf", f"--export_dir={export_dir}")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(export_dir)) == [
        "config.json",
        "model.safetensors",
        "spiece.model",
        "tokenizer_config.json",
    ]
    hf_model = transformers.T5ForConditionalGeneration.from_pretrained(str(export_dir)).eval()
    tokenizer = transformers.T5Tokenizer.from_pretrained(str(export_dir))
    vocab = loading.load(model_dir).vocab
    texts = ["a b c", "j i h g f", "d"]
    assert [tokenizer(t).input_ids for t in texts] == [vocab.encode(t) + [EOS_ID] for t in texts]
    ids = np.zeros([4, 8], np.int32)
    for i, t in enumerate(texts + ["e e"]):
        row = vocab.encode(t) + [EOS_ID]
        ids[i, : len(row)] = row
    targets = ids.copy()  # a copy model: its inputs are likely targets
    _, ours = _predict(model_dir, ids, "fast", targets=targets)
    np.testing.assert_allclose(ours, _hf_scores(hf_model, ids, targets), rtol=1e-4, atol=1e-4)
    ours_ids, _ = _predict(model_dir, ids, "fast", beam_size=4, alpha=0.0)
    np.testing.assert_array_equal(ours_ids, _hf_decode(hf_model, ids, 4))
    proc = run_binary("t2t-export", f"--model_dir={model_dir}", "--export_format=hf", f"--export_dir={export_dir}")
    assert proc.returncode == 1 and "exists and is not an empty directory" in proc.stderr

    # CTranslate2's own converter takes the export, and its greedy decodes are ours.
    ctranslate2 = require_extra("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    converted = tmp_path / "ct2"
    TransformersConverter(str(export_dir)).convert(str(converted))
    translator = ctranslate2.Translator(str(converted), device="cpu")
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(t).input_ids) for t in texts]
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=8, return_end_token=True)
    greedy, _ = _predict(model_dir, ids[: len(texts)], "fast")
    for result, row in zip(results, greedy.tolist(), strict=True):
        expected = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
        assert tokenizer.convert_tokens_to_ids(result.hypotheses[0]) == expected, (result.hypotheses[0], row)


@pytest.mark.parametrize("kind", ["v1_1", "mt5"])
def test_a_pretrained_model_exported_again_is_the_same_hugging_face_model(pretrained, tmp_path, kind):
    """Hugging Face -> model_dir -> Hugging Face gives back every tensor, for the gated,
    untied layouts too, and transformers loads the result."""
    from safetensors.numpy import load_file

    hf_dir, model_dir = pretrained[kind]
    export_dir = tmp_path / "again"
    proc = run_binary("t2t-export", f"--model_dir={model_dir}", "--export_format=hf", f"--export_dir={export_dir}")
    assert proc.returncode == 0, proc.stderr
    before = load_file(os.path.join(hf_dir, "model.safetensors"))
    after = load_file(str(export_dir / "model.safetensors"))
    shared = sorted(set(before) & set(after))
    assert set(before) - set(after) <= {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    assert "lm_head.weight" in shared and "decoder.block.0.layer.2.DenseReluDense.wi_1.weight" in shared
    for name in shared:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    transformers.AutoModelForSeq2SeqLM.from_pretrained(str(export_dir))


def _released_t5_names(layers: int) -> list[str]:
    """T5 v1.0's released variable names, spelled out here rather than taken from t2tcli."""
    names = ["shared/embedding", "encoder/final_layer_norm/scale", "decoder/final_layer_norm/scale"]
    for side, parts in (
        ("encoder", ("SelfAttention", "DenseReluDense")),
        ("decoder", ("SelfAttention", "EncDecAttention", "DenseReluDense")),
    ):
        names.append(f"{side}/block_000/layer_000/SelfAttention/relative_attention_bias")
        for block in range(layers):
            for index, part in enumerate(parts):
                scope = f"{side}/block_{block:03d}/layer_{index:03d}"
                names.append(f"{scope}/layer_norm/scale")
                kernels = ("wi/kernel", "wo/kernel") if part == "DenseReluDense" else tuple("qkvo")
                names += [f"{scope}/{part}/{k}" for k in kernels]
    return sorted(names)


@pytest.mark.parametrize(
    "name, layers", [("t5_small", 6), ("t5_base", 12), ("t5_large", 24), ("t5_3B", 24), ("t5_11B", 24)]
)
def test_t5_sets_name_their_weights_as_the_released_checkpoints(name, layers):
    arch = weight_names.Architecture.from_hparams(registry.hparams(name), 32100)
    assert sorted(weight_names.mesh_shapes(arch)) == _released_t5_names(layers)


def test_the_model_builds_the_weights_the_name_map_lists():
    for name in ("t5_small", "t5_v1_1_small"):
        hp = registry.hparams(name)
        arch = weight_names.Architecture.from_hparams(hp, 32100)
        assert graph.variable_names(model_config.build(hp, 32100)) == weight_names.mesh_shapes(arch)
    v1_1 = weight_names.mesh_shapes(weight_names.Architecture.from_hparams(registry.hparams("mt5_small"), 250100))
    assert v1_1["shared/embedding"] == [250112, 512] and v1_1["decoder/logits/kernel"] == [512, 250112]
    assert v1_1["encoder/block_007/layer_001/DenseReluDense/wi_1/kernel"] == [512, 1024]
    assert v1_1["encoder/rms_norm/scale"] == [512]


def _write_named(path: str, hp, vocab_size: int, rename=lambda n: n, slots: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    shapes = weight_names.mesh_shapes(weight_names.Architecture.from_hparams(hp, vocab_size))
    values = {rename(n): rng.standard_normal(s).astype(np.float32) * 0.05 for n, s in shapes.items()}
    if slots:  # Adafactor's second-moment slots, as a released checkpoint holds them
        values.update({f"{n}_slot_v": np.ones_like(v) for n, v in values.items() if v.ndim == 1})
    values["global_step"] = np.int64(1_000_000)
    checkpoints.write_checkpoint(values, path)
    return values


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    data = tmp_path_factory.mktemp("copy_data")
    assert run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data}").returncode == 0
    return str(data)


@pytest.mark.parametrize("norm_scope", ["layer_norm", "rms_norm"])
def test_fine_tune_from_t5_v1_0_released_names_and_from_earlier_t2tcli_names(copy_data, tmp_path, norm_scope):
    """layer_norm: names exactly as T5's released v1.0 checkpoints (with optimizer slots);
    rms_norm: as t2tcli wrote them before, mapped onto the v1.0 names on load."""
    hp = registry.hparams("mtf_transformer_tiny")
    vocab = loading.Vocabulary(os.path.join(copy_data, "vocab.toy.model"))
    arch = weight_names.Architecture.from_hparams(hp, vocab.vocab_size)
    renamed = weight_names.renamed_from_other_norm_scope(arch)
    source = {new: old for old, new in renamed.items()} if norm_scope == "rms_norm" else {}
    values = _write_named(
        str(tmp_path / "released" / "model.ckpt-1000000"), hp, vocab.vocab_size, lambda n: source.get(n, n), slots=True
    )
    with open(tmp_path / "released" / "checkpoint", "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-1000000"\n')
    model_dir = tmp_path / "tuned"
    proc = run_binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--init_checkpoint={tmp_path / 'released'}",
        f"--data_dir={copy_data}",
        f"--model_dir={model_dir}",
        "--train_steps=2",
    )
    assert proc.returncode == 0, proc.stderr
    assert ("mapped" in proc.stderr) == (norm_scope == "rms_norm")
    start = tf.train.load_checkpoint(str(model_dir / "model.ckpt-0"))
    for name in ("encoder/final_layer_norm/scale", "decoder/block_001/layer_001/layer_norm/scale", "shared/embedding"):
        np.testing.assert_array_equal(start.get_tensor(name), values[source.get(name, name)])


def test_a_model_dir_of_an_earlier_t2tcli_still_decodes(copy_data, tmp_path):
    model_dir = tmp_path / "old"
    proc = run_binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        "--hparams=norm_scope=rms_norm",
        f"--data_dir={copy_data}",
        f"--model_dir={model_dir}",
        "--train_steps=2",
    )
    assert proc.returncode == 0, proc.stderr
    recorded = json.load(open(model_dir / "hparams.json"))
    for key in run_records.LEGACY_HPARAMS:  # as versions that did not know these hparams wrote it
        del recorded[key]
    (model_dir / "hparams.json").write_text(json.dumps(recorded))
    lines = tmp_path / "in.txt"
    lines.write_text("a b c\n")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr
    assert "written by an earlier t2tcli" in proc.stderr
    proc = run_binary(
        "t2t-train", "--problem=copy_sequence", f"--data_dir={copy_data}", f"--model_dir={model_dir}", "--train_steps=4"
    )
    assert proc.returncode == 0 and "resuming" in proc.stderr, proc.stderr


def test_bad_checkpoints_and_mismatched_layouts_are_one_line_errors(pretrained, copy_data, tmp_path):
    hf_dir, _ = pretrained["v1_1"]
    (tmp_path / "empty").mkdir()
    cases = [
        ([f"--init_checkpoint={tmp_path / 'empty'}"], "neither a checkpoint"),
        (
            [f"--init_checkpoint={hf_dir}", "--hparams_set=t5_small", "--train_steps=0"],
            "does not fit the hparams (hparams vs model): d_model 512 vs 32",
        ),
    ]
    hp = registry.hparams("t5_v1_1_small")
    hp.override_from_dict(dict(d_model=64, d_ff=96, num_heads=4, d_kv=16, num_encoder_layers=2, num_decoder_layers=2))
    vocab = loading.Vocabulary(os.path.join(copy_data, "vocab.toy.model"))
    _write_named(str(tmp_path / "v1_1" / "model.ckpt-5"), hp, vocab.vocab_size)
    cases.append(
        (
            [
                f"--init_checkpoint={tmp_path / 'v1_1' / 'model.ckpt-5'}",
                "--problem=copy_sequence",
                f"--data_dir={copy_data}",
                "--hparams_set=mtf_transformer_tiny",
            ],
            "it is T5 v1.1-style",
        )
    )
    # Faults only reading the tensors shows: a weights file cut short, a tensor missing.
    from safetensors.numpy import load_file, save_file

    cut, missing = tmp_path / "cut", tmp_path / "missing"
    for damaged in (cut, missing):
        shutil.copytree(hf_dir, damaged)
    weights = cut / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    tensors = load_file(str(missing / "model.safetensors"))
    del tensors["decoder.final_layer_norm.weight"]
    save_file(tensors, str(missing / "model.safetensors"))
    cases += [
        ([f"--init_checkpoint={cut}", "--train_steps=0"], "unreadable safetensors file"),
        ([f"--init_checkpoint={missing}", "--train_steps=0"], "tensor decoder.final_layer_norm.weight is missing"),
    ]
    for args, message in cases:
        model_dir = tmp_path / "out"
        proc = run_binary("t2t-train", f"--model_dir={model_dir}", *args)
        assert proc.returncode == 1 and message in proc.stderr, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert "Traceback" not in proc.stderr and [x for x in lines if "error:" in x] == lines[-1:], proc.stderr
        assert not model_dir.exists(), (args, sorted(p.name for p in model_dir.glob("*")))


def test_hugging_face_directories_that_cannot_be_read_say_why(tmp_path):
    (tmp_path / "bart").mkdir()
    (tmp_path / "bart" / "config.json").write_text('{"model_type": "bart"}')
    with pytest.raises(UserError, match="model_type 'bart' is not a T5"):
        hf_t5.open_model(str(tmp_path / "bart"))
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text('{"model_type": "t5", "feed_forward_proj": "relu"}')
    with pytest.raises(UserError, match="no model.safetensors"):
        hf_t5.open_model(str(tmp_path / "t5"))
    (tmp_path / "t5" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UserError, match="no spiece.model"):
        hf_t5.open_model(str(tmp_path / "t5"))


def test_reading_pytorch_weights_without_torch_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UserError, match=r"needs torch \(pip install torch\)"):
        hf_t5._torch_tensors(str(tmp_path / "pytorch_model.bin"))


def test_bfloat16_safetensors_are_read_as_float32(tmp_path):
    from safetensors.torch import save_file

    weights = torch.randn(3, 4)
    save_file({"w": weights.to(torch.bfloat16)}, str(tmp_path / "model.safetensors"))
    read = hf_t5._safetensors(str(tmp_path / "model.safetensors"))
    np.testing.assert_array_equal(read["w"], weights.to(torch.bfloat16).float().numpy())


def test_init_checkpoint_vocabulary_rows_must_match(pretrained):
    hf_dir, _ = pretrained["v1_0"]
    model = hf_t5.open_model(hf_dir)
    name, hp = hf_t5.hparams_for(model, 700)
    assert name == "t5_small" and hp.vocab_divisor == 128 and hp.d_model == 32
    hf_t5.check_fits(model, hp, 700)
    with pytest.raises(
        UserError, match=r"vocabulary rows 640 \(600 ids padded to a multiple of vocab_divisor=128\) vs 768"
    ):
        hf_t5.check_fits(model, hp, 600)
    with pytest.raises(
        UserError, match=r"its vocabulary has 828 ids \(spiece.model plus 100 sentinels\) but the model only 768 rows"
    ):
        hf_t5.check_fits(model, hp, 828)
