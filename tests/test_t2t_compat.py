"""A tensor2tensor user dir runs here: its imports resolve to t2tcli's layer (never
shadowing a real tensor2tensor), its problems become Problems, its sets and T2T's own
set and hparam names become the mesh-tf Transformer's, and what cannot map is one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, run_binary
from t2t_user_code import CUSTOM_MODEL, VERSE, WEATHER, write_usr_dir
from test_cli import assert_one_line_error

from t2tcli import registry
from t2tcli.data.sources.source_base import ReadOptions
from t2tcli.errors import UserError
from t2tcli.t2t_compat import problem_adapter


@pytest.fixture(scope="module")
def usr_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("t2t_usr")
    verse = write_usr_dir(root, "verse", VERSE)
    weather = write_usr_dir(root, "weather", WEATHER)
    registry.import_usr_dir(str(verse))
    registry.import_usr_dir(str(weather))
    return {"verse": verse, "weather": weather, "root": root}


def _records(problem, split="train"):
    frames = [c.frame for c in problem.source(None)[split].chunks(ReadOptions(chunk_rows=64))]
    return [row for frame in frames for row in frame.to_dict("records")]


def test_a_text2text_problem_keeps_its_splits_shards_and_vocabulary(usr_dirs):
    verse = registry.problem("verse_lines")
    assert isinstance(verse, problem_adapter.T2TProblem)
    assert verse.num_shards == {"train": 9, "dev": 1}
    assert verse.dev_fraction == pytest.approx(0.1), "generated in one go: EVAL's share of the shards"
    assert (verse.vocab.size, verse.vocab.model_type, verse.vocab.name) == (2**13, "unigram", "verse_lines")
    assert set(verse.source(None)) == {"train"}
    records = _records(verse)
    assert len(records) == 399
    assert records[0] == {"inputs": "the sea the", "targets": "sea the sky a"}


def test_the_layer_is_importable_as_tensor2tensor_only_as_the_layer(usr_dirs):
    import tensor2tensor.data_generators.text_problems as t2t_text_problems

    from t2tcli import t2t_imports
    from t2tcli.t2t_compat.tensor2tensor.data_generators import text_problems

    assert t2t_text_problems is text_problems, "one class per name, whichever way it is imported"
    assert not any(isinstance(f, t2t_imports.LayerFinder) for f in sys.meta_path), "installed only while importing"
    assert not t2t_imports.real_tensor2tensor_installed()


def test_a_user_set_is_converted_and_still_callable_as_t2t(usr_dirs):
    hp = registry.hparams("transformer_verse")
    assert (hp.d_model, hp.d_ff, hp.num_heads, hp.d_kv) == (32, 64, 2, 16)
    assert (hp.num_encoder_layers, hp.num_decoder_layers, hp.inputs_length, hp.targets_length) == (1, 1, 16, 16)
    assert (hp.batch_size, hp.batch_size_unit) == (256, "tokens")
    assert (hp.optimizer, hp.learning_rate_schedule, hp.warmup_steps) == ("adam", "rsqrt_decay", 8000)
    assert hp.learning_rate == pytest.approx(2.0 / 8000**0.5 / 32**0.5)
    module = sys.modules[registry.hparams_function("transformer_verse").__module__]
    assert module.transformer_verse().hidden_size == 32, "the user's function returns T2T hparams, as in T2T"
    basic = registry.hparams("basic_weather")
    assert (basic.d_model, basic.d_ff, basic.num_encoder_layers, basic.learning_rate_schedule) == (
        64,
        256,
        2,
        "constant",
    )


def test_t2t_set_names_run_as_transformers_of_the_same_shape():
    shapes = {
        name: (hp.d_model, hp.d_ff, hp.num_heads, hp.num_encoder_layers, hp.batch_size)
        for name in ("transformer_base", "transformer_base_single_gpu", "transformer_tiny", "transformer_small")
        for hp in [registry.hparams(name)]
    }
    assert shapes == {
        "transformer_base": (512, 2048, 8, 6, 4096),
        "transformer_base_single_gpu": (512, 2048, 8, 6, 1024),
        "transformer_tiny": (128, 512, 4, 2, 4096),
        "transformer_small": (256, 1024, 4, 2, 4096),
    }
    heads = registry.hparams("transformer_tiny").parse("num_heads=8")
    assert (heads.d_model, heads.num_heads, heads.d_kv) == (128, 8, 16), "T2T's heads share the width"
    t5 = registry.hparams("t5_small").parse("num_heads=4")
    assert (t5.d_model, t5.num_heads, t5.d_kv) == (512, 4, 64), "a set of this toolkit keeps its d_kv"
    big = registry.hparams("transformer_big")
    assert (big.d_model, big.d_ff, big.num_heads, big.d_kv, big.dropout_rate) == (1024, 4096, 16, 64, 0.3)


def test_t2t_hparam_names_in_overrides():
    hp = registry.hparams("transformer_base").parse(
        "hidden_size=64,num_hidden_layers=2,filter_size=128,batch_size=1024"
    )
    assert (hp.d_model, hp.d_kv, hp.d_ff, hp.num_encoder_layers, hp.num_decoder_layers) == (64, 8, 128, 2, 2)
    assert (hp.batch_size, hp.batch_size_unit) == (1024, "tokens")
    tiny = registry.hparams("mtf_transformer_tiny").parse("layer_prepostprocess_dropout=0.2,max_length=24")
    assert (tiny.dropout_rate, tiny.inputs_length, tiny.targets_length, tiny.batch_size_unit) == (
        0.2,
        24,
        24,
        "sequences",
    )
    with pytest.raises(UserError, match="'attention_dropout' is tensor2tensor's and has no counterpart here"):
        registry.hparams("transformer_base").parse("attention_dropout=0.2")
    with pytest.raises(UserError, match="hidden_size 100 is not a multiple of num_heads 8"):
        registry.hparams("transformer_base").parse("hidden_size=100")


def test_a_class_problem_per_split_with_label_strings(usr_dirs):
    weather = registry.problem("weather_words")
    assert isinstance(weather, problem_adapter.T2TClassProblem)
    assert weather.num_shards == {"train": 2, "dev": 1}
    assert weather.vocab.model_type == "char"
    assert set(weather.source(None)) == {"train", "dev"}
    train, dev = _records(weather, "train"), _records(weather, "dev")
    assert (len(train), len(dev)) == (30, 6)
    assert train[:2] == [
        {"inputs": "sun and still air day 0", "targets": "calm"},
        {"inputs": "wind and rain day 1", "targets": "stormy"},
    ]
    assert sys.modules[type(weather.t2t).__module__].SEEN[-2:] == ["train", "eval"], "T2T's split names reach it"
    with pytest.raises(UserError, match=r"BadLabels.*sample 1's 'label' is 7; expected an int in \[0, 2\)"):
        _records(registry.problem("bad_labels"))


def test_a_text2self_problem_trains_as_a_prefix_lm(usr_dirs):
    song = registry.problem("song_text")
    assert song.objective.name == "prefix_lm"
    assert song.vocab.extra_ids == 100, "the self-supervised pipeline reserves T5's sentinels"
    assert _records(song)[0] == {"targets": "la la song number 0"}
    assert song.preprocess({"targets": "la la"}) == {"inputs": "", "targets": "la la"}


@pytest.mark.parametrize(
    "name, fragments",
    [
        ("tensor_tweaks", ["TensorTweaks overrides preprocess_example", "make the change on the strings"]),
        ("own_encoders", ["OwnEncoders overrides feature_encoders", "SentencePiece model of approx_vocab_size"]),
        ("own_tokens", ["OwnTokens", "vocab_type 'tokens'", "use VocabType.SUBWORD"]),
    ],
)
def test_what_cannot_map_is_one_line_naming_the_class(usr_dirs, name, fragments):
    with pytest.raises(UserError) as caught:
        registry.problem(name)
    message = str(caught.value)
    assert "\n" not in message and f"{usr_dirs['weather'] / 'weather.py'}:" in message
    for fragment in fragments:
        assert fragment in message


def test_an_error_in_generate_samples_names_the_users_line(usr_dirs):
    with pytest.raises(UserError, match=r"error in user code .*weather\.py:\d+: KeyError: 'no such column'"):
        _records(registry.problem("broken"))


def test_a_custom_model_is_refused_at_import(tmp_path):
    folder = write_usr_dir(tmp_path, "model", CUSTOM_MODEL)
    with pytest.raises(UserError) as caught:
        registry.import_usr_dir(str(folder))
    message = str(caught.value)
    assert message.startswith(f"{folder / 'model.py'}:")
    assert "model MyOwnTransformer (a T2TModel subclass) cannot run here" in message
    assert "--model=transformer" in message


def test_a_real_tensor2tensor_is_never_shadowed(tmp_path):
    fake = tmp_path / "site" / "tensor2tensor"
    (fake / "utils").mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    (fake / "utils" / "__init__.py").write_text("")
    (fake / "utils" / "registry.py").write_text("def register_problem(cls):\n    cls.real = True\n    return cls\n")
    folder = write_usr_dir(
        tmp_path,
        "usr",
        "from tensor2tensor.utils import registry\n\n@registry.register_problem\nclass Real:\n    pass\n",
    )
    probe = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "site")!r})
        from t2tcli import registry
        registry.import_usr_dir({str(folder)!r})
        import tensor2tensor
        print(tensor2tensor.__file__, getattr(tensor2tensor, "REAL", False), "real" in registry.list_problems())
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(fake / "__init__.py"), "True", "False"]


def test_datagen_refuses_a_tensor_level_problem_in_one_line(tmp_path):
    folder = write_usr_dir(tmp_path, "weather", WEATHER)
    proc = run_binary(
        "t2t-datagen", f"--t2t_usr_dir={folder}", "--problem=tensor_tweaks", f"--data_dir={tmp_path / 'data'}"
    )
    assert_one_line_error(proc, "TensorTweaks overrides preprocess_example")


@pytest.mark.slow
def test_a_t2t_user_dir_runs_datagen_train_and_decode_unchanged(tmp_path):
    folder = write_usr_dir(tmp_path, "verse", VERSE)
    data, train = tmp_path / "data", tmp_path / "train"
    common = [f"--t2t_usr_dir={folder}", "--problem=verse_lines", f"--data_dir={data}"]
    run_binary("t2t-datagen", *common, f"--tmp_dir={tmp_path / 'tmp'}", check=True)
    assert len(list(data.glob("verse_lines-train-*-of-00009"))) == 9
    run_binary(
        "t2t-trainer",
        *common,
        "--model=transformer",
        "--hparams_set=transformer_verse",
        f"--output_dir={train}",
        "--train_steps=3",
        "--save_checkpoints_steps=3",
        check=True,
    )
    (tmp_path / "in.txt").write_text("the sea the\nbird sings over\n")
    run_binary(
        "t2t-decoder",
        *common,
        "--model=transformer",
        "--hparams_set=transformer_verse",
        f"--output_dir={train}",
        f"--decode_from_file={tmp_path / 'in.txt'}",
        f"--decode_to_file={tmp_path / 'out.txt'}",
        check=True,
    )
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2
