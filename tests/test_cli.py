"""The binaries as a user meets them: shared registry, clean one-line errors."""

import re
import textwrap

import pytest

BINARIES = ["t2t-datagen", "t2t-train", "t2t-eval", "t2t-decode", "t2t-export", "t2t-avg-checkpoints"]

USER_PROBLEM = textwrap.dedent(
    """
    from t2tcli.data.problem import Text2TextProblem
    from t2tcli.registry import register_problem


    @register_problem
    class ShoutBack(Text2TextProblem):
        \"\"\"Targets are the inputs in capitals.\"\"\"

        def source(self, tmp_dir):
            return None

        def preprocess(self, record):
            return {"inputs": record["text"], "targets": record["text"].upper()}
    """
)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 1, (proc.returncode, proc.stdout + proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("name", BINARIES)
def test_registry_help_on_every_binary(binary, name):
    proc = binary(name, "--registry_help", check=True)
    out = proc.stdout
    assert out.index("Problems:") < out.index("Mixtures:") < out.index("HParams sets:")


def test_registry_help_lists_builtins_with_their_first_docstring_line(binary):
    out = binary("t2t-datagen", "--registry_help", check=True).stdout
    for name in ["copy_sequence", "qp_is_duplicate", "translate_en_es", "qp_all", "mtf_transformer_tiny", "t5_small"]:
        assert re.search(rf"^  {name} +\S", out, re.M), out
    assert re.search(r"^  qp_is_duplicate +Are two questions duplicates\?", out, re.M)
    assert re.search(r"^  flan_t5_base +FLAN-T5 \(T5 v1.1 layout\) base: d_model 768", out, re.M)


def test_typo_in_problem(binary, tmp_path):
    proc = binary("t2t-datagen", "--problem=qp_is_duplicat", f"--data_dir={tmp_path}")
    assert_one_line_error(proc, "unknown problem 'qp_is_duplicat'; did you mean 'qp_is_duplicate'?")


def test_an_unknown_problem_suggests_usr_dir_unless_one_was_given(binary, tmp_path):
    proc = binary("t2t-datagen", "--problem=fortune_category", f"--data_dir={tmp_path}")
    assert_one_line_error(proc, "unknown problem 'fortune_category'", "needs --usr_dir=DIR")
    usr_dir = tmp_path / "usr"
    usr_dir.mkdir()
    (usr_dir / "empty.py").write_text("")
    proc = binary("t2t-datagen", f"--usr_dir={usr_dir}", "--problem=fortune_category", f"--data_dir={tmp_path}")
    assert_one_line_error(proc, "unknown problem 'fortune_category'")
    assert "--usr_dir" not in proc.stderr


@pytest.mark.parametrize("name", BINARIES)
def test_help_shows_the_binarys_flags_then_the_shared_ones(binary, name):
    proc = binary(name, "--help", check=True)
    own, shared = proc.stdout.split("\nShared flags:\n")
    assert f"{name} flags:" in own and "--model_dir " in shared and "--usr_dir " in shared
    assert "--tpu_zone" not in shared and "--helpfull" in proc.stdout
    if name == "t2t-train":
        assert re.search(r"^  --train_steps +Train until the global step reaches this", own, re.M)
    if name == "t2t-decode":
        assert "--decode_from_file" in own and "--train_steps" not in own


def test_hparams_help_prints_a_sets_values(binary):
    out = binary(
        "t2t-train", "--hparams_set=t5_v1_1_small", "--hparams=d_model=256", "--hparams_help", check=True
    ).stdout
    assert out.startswith("hparams set t5_v1_1_small: T5 v1.1 small")
    assert re.search(r"^  d_model +=\s+256\s", out, re.M)
    assert re.search(r"^  ffn_activation +=\s+'gated-gelu'\s+relu, gelu, ... or gated-", out, re.M)
    proc = binary("t2t-train", "--hparams_help")
    assert_one_line_error(proc, "--hparams_help needs --hparams_set=NAME")


def test_typo_in_hparams_set(binary, tmp_path):
    proc = binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tinny",
        f"--data_dir={tmp_path}",
        f"--model_dir={tmp_path / 'm'}",
    )
    assert_one_line_error(proc, "unknown hparams set 'mtf_transformer_tinny'; did you mean 'mtf_transformer_tiny'")


def test_typo_in_hparams_key(binary, tmp_path):
    proc = binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        "--hparams=d_modle=64",
        f"--data_dir={tmp_path}",
        f"--model_dir={tmp_path / 'm'}",
    )
    assert_one_line_error(proc, "unknown hparam 'd_modle'; did you mean 'd_model'?")


def test_unknown_flag_is_an_error(binary):
    proc = binary("t2t-datagen", "--problme=x")
    assert_one_line_error(proc, "Unknown command line flag 'problme'")


def test_stray_argument_is_an_error(binary):
    proc = binary("t2t-datagen", "qp_is_duplicate")
    assert_one_line_error(proc, "unexpected argument")


def test_usr_dir_problem_appears_in_registry_help(binary, tmp_path):
    usr = tmp_path / "usr"
    usr.mkdir()
    (usr / "shout.py").write_text(USER_PROBLEM)
    out = binary("t2t-datagen", f"--usr_dir={usr}", "--registry_help", check=True).stdout
    assert re.search(r"^  shout_back +Targets are the inputs in capitals\.$", out, re.M), out


def test_usr_dir_import_error_names_user_file(binary, tmp_path):
    usr = tmp_path / "usr"
    usr.mkdir()
    (usr / "oops.py").write_text("import math\n\nvalue = math.nope\n")
    proc = binary("t2t-datagen", f"--usr_dir={usr}", "--registry_help")
    assert_one_line_error(proc, "oops.py:3", "AttributeError")


def test_tensorflow_startup_noise_is_silenced(binary):
    proc = binary("t2t-datagen", "--registry_help", check=True)
    assert "cuda" not in proc.stderr.lower() and "tensorflow" not in proc.stderr.lower(), proc.stderr
