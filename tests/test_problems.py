"""Built-in problems: Quora pairs, the mixture, translation, TFDS-backed QQP."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
import tensorflow_datasets as tfds
from test_datagen import read_examples, run, write_quora

from t2tcli import registry
from t2tcli.data.layout import data_files, read_meta
from t2tcli.data.sources import columns, preprocessing, text
from t2tcli.data.vocabulary.vocab import Vocabulary
from t2tcli.errors import UserError


def test_qp_inputs_are_normalised_and_a_decode_line_goes_through_the_same_preprocess():
    problem = registry.problem("qp_is_duplicate")
    record = {"question1": ' What is "Python"?\nReally ', "question2": "“Why” LEARN it?", "is_duplicate": "1"}
    expected = "is duplicate: what is python? really <SEP> why learn it?"
    assert problem.preprocess(record) == {"inputs": expected, "targets": "1"}
    line = preprocessing.DecodeLines(problem)
    assert line.fields == ("question1", "question2")
    assert line(' What is "Python"?\\nReally \t“Why” LEARN it?') == expected
    with pytest.raises(UserError, match=r"expected 2 tab-separated fields \(question1, question2\), got 1"):
        line("no tab here")
    assert preprocessing.DecodeLines(registry.problem("generate_similar_question")).fields == ("question1",)
    assert preprocessing.DecodeLines(registry.problem("translate_en_es")).fields == ("english",)
    assert preprocessing.DecodeLines(registry.problem("copy_sequence")).fields == ("inputs",)
    assert problem.metrics == ("accuracy", "f1")


@pytest.mark.parametrize("extra", ["", "with\0nul", "tab\there", "  lead", "trail "])
def test_column_wise_text_helpers_equal_their_string_versions(extra):
    texts = ["ΟΔΟΣ Σ", ' "Quoted"\r\nTwo  lines ', "“Curly” İstanbul", "", "  ", "ÀÉÎ ǅ ß", "a\u3000b", extra]
    column = text.squash_spaces(columns.Column(list(texts)))
    assert column.values == [text.squash_spaces(t) for t in texts]
    assert text.squash_spaces(columns.Column([])).values == []
    labels = columns.Column([" 1", "0 ", "maybe"])
    assert text.choice(labels, ("0", "1"), "label", default="").values == ["1", "0", ""]
    with pytest.raises(UserError, match="label must be one of 0, 1, got 'maybe'"):
        text.choice(labels, ("0", "1"), "label")


def test_qp_runs_column_wise_and_gives_what_record_by_record_gives():
    problem = registry.problem("qp_is_duplicate")
    frame = pd.DataFrame(
        {"question1": ["A b?", ' "x"  y '], "question2": ["C\nd", "é"], "is_duplicate": ["0", "1"]}, dtype=object
    )
    chunk = preprocessing.ChunkPreprocessor(problem)
    assert chunk(frame) == preprocessing.record_by_record(problem, frame) and chunk.columnwise is True
    with pytest.raises(UserError, match="is_duplicate must be one of 0, 1, got 'yes'"):
        chunk(frame.assign(is_duplicate=["0", "yes"]))
    paraphrase = preprocessing.ChunkPreprocessor(registry.problem("generate_similar_question"))
    assert paraphrase(frame) == ([None, "paraphrase: x y"], [None, "é"]) and paraphrase.columnwise is False


def test_a_preprocess_that_needs_one_string_runs_record_by_record_with_the_same_result():
    class Conditional(type(registry.problem("copy_sequence"))):
        name = "conditional"

        def preprocess(self, record):
            word = record["inputs"]
            return {"inputs": f"{len(word)}: {word}" if word.startswith("a") else word.upper(), "targets": word[:1]}

    frame = pd.DataFrame({"inputs": ["a b", "c d", "abc"], "targets": ["", "", ""]}, dtype=object)
    chunk = preprocessing.ChunkPreprocessor(Conditional())
    assert chunk(frame) == (["3: a b", "C D", "3: abc"], ["a", "c", "a"]) and chunk.columnwise is False


def test_qp_all_generates_both_tasks_with_one_vocabulary(tmp_path):
    raw = write_quora(tmp_path / "raw", rows=300)
    summary = run("qp_all", tmp_path / "out", raw)
    assert [line.split(":")[0] for line in summary] == ["qp_is_duplicate", "generate_similar_question"]
    assert sorted(p.name for p in (tmp_path / "out").glob("vocab.*")) == ["vocab.qp.model", "vocab.qp.vocab"]
    vocab = Vocabulary(str(tmp_path / "out" / "vocab.qp.model"))
    assert vocab._sp.piece_to_id("<SEP>") in vocab.encode("what <SEP> why")  # a user-defined symbol: one piece

    duplicate = read_meta(str(tmp_path / "out"), "qp_is_duplicate")
    similar = read_meta(str(tmp_path / "out"), "generate_similar_question")
    assert duplicate["vocab_file"] == similar["vocab_file"] == "vocab.qp.model"
    assert duplicate["splits"]["test"]["examples"] == 20 and "test" not in similar["splits"]
    # Same row keys, same hash: both tasks hold out the same question pairs for dev.
    assert (
        similar["filtered"] == 150
        and similar["splits"]["train"]["examples"] + similar["splits"]["dev"]["examples"] == 150
    )

    labels = {vocab.decode(t) for _, t in read_examples(data_files(str(tmp_path / "out"), "qp_is_duplicate", "train"))}
    assert labels == {"0", "1"}
    test_targets = {
        vocab.decode(t) for _, t in read_examples(data_files(str(tmp_path / "out"), "qp_is_duplicate", "test"))
    }
    assert test_targets == {""}  # unlabeled
    for inputs, targets in read_examples(data_files(str(tmp_path / "out"), "generate_similar_question", "dev")):
        question = vocab.decode(inputs).removeprefix("paraphrase: ")
        assert vocab.decode(targets).startswith(question.rstrip("?"))  # q2 is q1, shouted, plus its id

    again = run("qp_all", tmp_path / "out", raw)
    assert all("complete, skipped" in line for line in again)


def test_translate_en_es_reads_tmp_dir(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    with open(raw / "translate_en_es.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "book", "chapter", "verse", "english", "spanish"])
        for i in range(200):
            writer.writerow([i, "Gen", 1, i, f"In the beginning, verse {i}.", f"En el principio, versículo {i}."])
    summary = run("translate_en_es", tmp_path / "out", raw)
    assert summary[0].startswith("translate_en_es: 200 rows -> train ")
    vocab = Vocabulary(str(tmp_path / "out" / "vocab.translate_en_es.model"))
    for inputs, targets in read_examples(data_files(str(tmp_path / "out"), "translate_en_es", "dev")):
        english = vocab.decode(inputs)
        assert english.startswith("translate English to Spanish: In the beginning, verse ")
        assert vocab.decode(targets) == f"En el principio, versículo {english.split()[-1][:-1]}."
    assert registry.problem("translate_en_es").metrics == ("bleu",)


def test_translate_falls_back_to_shipped_data():
    source = registry.problem("translate_en_es").source(None)
    assert source.path.endswith("problems/data/translate_en_es.csv")
    assert registry.problem("qp_is_duplicate").source(None)["train"].path.endswith("problems/data/quora/train.csv")


def test_glue_qqp_from_mocked_tfds(tmp_path):
    with tfds.testing.mock_data(num_examples=30):
        summary = run("glue_qqp", tmp_path / "out", tfds_data_dir=str(tmp_path / "tfds"))
    assert summary[0].startswith("glue_qqp: 90 rows -> train 30, dev 30, test 30")
    vocab = Vocabulary(str(tmp_path / "out" / "vocab.glue_qqp.model"))
    inputs, _ = read_examples(data_files(str(tmp_path / "out"), "glue_qqp", "dev"))[0]
    assert vocab.decode(inputs).startswith("is duplicate: ") and " <SEP> " in vocab.decode(inputs)


def test_glue_qqp_unprepared_says_how_to_prepare(tmp_path):
    with pytest.raises(UserError) as info:
        run("glue_qqp", tmp_path / "out", tfds_data_dir=str(tmp_path / "tfds"))
    message = str(info.value)
    assert "glue/qqp:2.0.0' is not prepared in" in message and "tfds build glue/qqp" in message


def test_only_a_problem_that_opts_in_gets_whole_columns():
    seen = []

    class Plain(type(registry.problem("copy_sequence"))):
        name = "plain"
        columnwise = False

        def preprocess(self, record):
            seen.append(type(record["inputs"]))
            return {"inputs": record["inputs"].lower(), "targets": record["targets"]}

    frame = pd.DataFrame({"inputs": ["A b", "C"], "targets": ["x", "y"]}, dtype=object)
    assert preprocessing.ChunkPreprocessor(Plain())(frame) == (["a b", "c"], ["x", "y"])
    assert seen == [str, str]
    seen.clear()
    Plain.columnwise = True
    assert preprocessing.ChunkPreprocessor(Plain())(frame) == (["a b", "c"], ["x", "y"])
    assert columns.Column in seen


def test_decode_fields_must_be_declared_where_inputs_join_several():
    class TwoFields(type(registry.problem("copy_sequence"))):
        name = "two_fields"

        def preprocess(self, record):
            return {"inputs": record["a"] + " | " + record["b"], "targets": record["c"]}

    with pytest.raises(UserError, match=r"set decode_fields = .*several: a, b"):
        preprocessing.decode_fields(TwoFields())
    TwoFields.decode_fields = ("b", "a")
    assert preprocessing.DecodeLines(TwoFields())("x\ty") == "y | x"


def test_mixture_rates_are_numbers_or_functions(tmp_path):
    from t2tcli.problem import Mixture, by_examples

    class Rated(Mixture):
        name = "rated"
        vocab = registry.problem("copy_sequence").vocab
        problems = [("copy_sequence", 2), ("reverse_sequence", by_examples)]

    (copy, two), (reverse, rate) = Rated().components()
    assert (copy.name, two, reverse.name, rate) == ("copy_sequence", 2, "reverse_sequence", by_examples)
    Rated.problems = [("copy_sequence", "examples")]  # the earlier spelling of by_examples
    assert Rated().components()[0][1] is by_examples
    Rated.problems = [("copy_sequence", "half")]
    with pytest.raises(UserError, match="the rate of 'copy_sequence' is 'half'; use a number or a function"):
        Rated().components()
