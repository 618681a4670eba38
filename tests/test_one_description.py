"""One description of a problem: t2t-decode formats a raw record as datagen did.

For every built-in problem and for user problems, t2t-decode is given the dev split's raw
records (their decode fields, tab-separated, as a user would type them) and must
write exactly what t2t-eval decoded from the shards datagen wrote for the same checkpoint.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import run_binary

from t2tcli import datagen, preprocessing, registry
from t2tcli.vocab import Vocabulary

USER_PROBLEMS = '''
from t2tcli.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import CsvSource


@register_problem("quote_category")
class QuoteCategory(Text2TextProblem):
    """Category of a quotation; quotations span lines and keep their layout."""

    vocab = VocabSpec(name="quotes", size=300, keep_whitespace=True)
    metrics = ("accuracy",)

    def source(self, tmp_dir):
        return CsvSource(f"{tmp_dir}/quotes.csv", columns=("text", "category"))

    def preprocess(self, record):
        return {"inputs": "category: " + record["text"], "targets": record["category"]}
'''
QUOTES = [
    ("Fair is foul,\n  and foul is fair:\n\tHover through the fog.", "verse"),
    ("Measure twice, cut once.", "proverb"),
    ("A stitch\nin time\n    saves nine.", "proverb"),
    ("+---+\n| o |\n+---+", "ascii-art"),
]


def _quotes(tmp_dir: Path) -> None:
    tmp_dir.mkdir(parents=True, exist_ok=True)
    with open(tmp_dir / "quotes.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "category"])
        for i in range(400):
            text, category = QUOTES[i % len(QUOTES)]
            writer.writerow([f"{text} ({i})", category])


def _model(tmp: Path, problem: str, data: Path, *extra: str) -> Path:
    model_dir = tmp / f"model_{problem}"
    proc = run_binary(
        "t2t-train",
        *extra,
        f"--problem={problem}",
        "--hparams_set=mtf_transformer_tiny",
        "--hparams=activation_dtype=float32,inputs_length=48,targets_length=16",
        f"--data_dir={data}",
        f"--model_dir={model_dir}",
        "--train_steps=0",
    )
    assert proc.returncode == 0, proc.stderr
    return model_dir


def _decode_equals_eval(tmp: Path, model_dir: Path, task: str, data: Path, tmp_dir: str | None, *extra: str) -> int:
    proc = run_binary("t2t-eval", *extra, f"--model_dir={model_dir}", "--split=dev", "--decode_hparams=batch_size=16")
    assert proc.returncode == 0, proc.stderr
    predictions = (model_dir / "eval_dev" / f"{task}-0.predictions.txt").read_text(encoding="utf-8").splitlines()
    problem = registry.problem(task)
    fields = preprocessing.decode_fields(problem)
    options = datagen.Options(data_dir=str(data), tmp_dir=tmp_dir)
    lines = [preprocessing.line_of(fields, r) for r in datagen.split_records(problem, options, "dev")]
    assert len(lines) == len(predictions) > 0
    source = tmp / f"{task}.dev.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    proc = run_binary(
        "t2t-decode",
        *extra,
        f"--model_dir={model_dir}",
        f"--problem={task}",
        f"--decode_from_file={source}",
        "--decode_hparams=batch_size=16",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == predictions
    return len(lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    "problem, tasks",
    [
        ("copy_sequence", ["copy_sequence"]),
        ("qp_all", ["qp_is_duplicate", "generate_similar_question"]),
        ("translate_en_es", ["translate_en_es"]),
    ],
)
def test_decode_of_raw_dev_records_equals_eval_for_built_in_problems(tmp_path, problem, tasks):
    data = tmp_path / "data"
    assert run_binary("t2t-datagen", f"--problem={problem}", f"--data_dir={data}").returncode == 0
    model_dir = _model(tmp_path, problem, data)
    for task in tasks:
        assert _decode_equals_eval(tmp_path, model_dir, task, data, None) > 0


@pytest.mark.slow
def test_decode_of_raw_dev_records_equals_eval_for_a_user_problem_with_multi_line_fields(tmp_path):
    usr_dir = tmp_path / "usr"
    usr_dir.mkdir()
    (usr_dir / "quotes.py").write_text(USER_PROBLEMS)
    raw = tmp_path / "raw"
    _quotes(raw)
    data = tmp_path / "data"
    proc = run_binary(
        "t2t-datagen", f"--usr_dir={usr_dir}", "--problem=quote_category", f"--tmp_dir={raw}", f"--data_dir={data}"
    )
    assert proc.returncode == 0, proc.stderr
    model_dir = _model(tmp_path, "quote_category", data, f"--usr_dir={usr_dir}")
    registry.import_usr_dir(str(usr_dir))
    assert _decode_equals_eval(tmp_path, model_dir, "quote_category", data, str(raw), f"--usr_dir={usr_dir}") > 10


def test_a_vocabulary_that_keeps_whitespace_round_trips_multi_line_fields(tmp_path):
    usr_dir = tmp_path / "usr"
    usr_dir.mkdir()
    (usr_dir / "quotes.py").write_text(USER_PROBLEMS)
    raw = tmp_path / "raw"
    _quotes(raw)
    data = tmp_path / "data"
    proc = run_binary(
        "t2t-datagen", f"--usr_dir={usr_dir}", "--problem=quote_category", f"--tmp_dir={raw}", f"--data_dir={data}"
    )
    assert proc.returncode == 0, proc.stderr
    vocab = Vocabulary(str(data / "vocab.quotes.model"))
    for text, _ in QUOTES:
        assert vocab.decode(vocab.encode(text)) == text
    from test_datagen import read_examples

    from t2tcli.problem import data_files

    seen = [vocab.decode(inputs) for inputs, _ in read_examples(data_files(str(data), "quote_category", "train"))]
    assert any(text.startswith("category: +---+\n| o |\n+---+ (") for text in seen)
    assert any(text.startswith("category: Fair is foul,\n  and foul is fair:\n\tHover") for text in seen)
    # A decode line holds the field escaped, and goes through the same preprocess.
    line = preprocessing.line_of(("text",), {"text": QUOTES[0][0]})
    assert "\n" not in line and preprocessing.DecodeLines(registry.problem("copy_sequence"))(line) == QUOTES[0][0]


def test_datagen_regenerates_when_the_problem_code_changes(tmp_path):
    usr_dir = tmp_path / "usr"
    usr_dir.mkdir()
    (usr_dir / "quotes.py").write_text(USER_PROBLEMS)
    raw = tmp_path / "raw"
    _quotes(raw)
    args = [f"--usr_dir={usr_dir}", "--problem=quote_category", f"--tmp_dir={raw}", f"--data_dir={tmp_path / 'data'}"]
    assert "rows ->" in run_binary("t2t-datagen", *args).stdout
    assert "complete, skipped" in run_binary("t2t-datagen", *args).stdout
    (usr_dir / "quotes.py").write_text(USER_PROBLEMS.replace('"category: "', '"label: "'))
    proc = run_binary("t2t-datagen", *args)
    assert "rows ->" in proc.stdout, proc.stdout
    meta = json.loads((tmp_path / "data" / "quote_category.meta.json").read_text())
    assert meta["vocab_description"].startswith("VocabSpec(name='quotes'")
