"""datagen in-process: shards, vocabulary round trip, determinism, resumability, skip reports."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from t2tcli import registry
from t2tcli.compat import tf
from t2tcli.data.datagen import run as datagen
from t2tcli.data.datagen import shards, stats
from t2tcli.data.layout import data_files, read_meta
from t2tcli.data.problem import VocabSpec
from t2tcli.data.vocabulary import packed_encoder
from t2tcli.data.vocabulary.packed_encoder import PackedTextEncoder, Spans, interleave, varint
from t2tcli.data.vocabulary.vocab import EOS_ID, Vocabulary
from t2tcli.errors import UserError

WORDS = "what how why is the a best way to learn python cook rice fast good book read".split()


def write_quora(tmp_dir: Path, rows: int = 300, blank_ids: tuple[int, ...] = ()) -> Path:
    """A Kaggle-format train.csv (+ test.csv); one question spans two lines; `blank_ids` lack question2."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    with open(tmp_dir / "train.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        for i in range(rows):
            q1 = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 5)) + "?"
            q2 = "" if i in blank_ids else f'"{q1.upper()}", {i}?'
            if i == 5:
                q1 = "a question\nover two lines?"
            writer.writerow([i, 2 * i, 2 * i + 1, q1, q2, i % 2])
    with open(tmp_dir / "test.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["test_id", "question1", "question2"])
        for i in range(20):
            writer.writerow([i, f"how to learn {WORDS[i % len(WORDS)]}?", "why read?"])
    return tmp_dir


def run(name: str, data_dir: Path, tmp_dir: Path | None = None, **kwargs) -> list[str]:
    options = datagen.Options(data_dir=str(data_dir), tmp_dir=str(tmp_dir) if tmp_dir else None, **kwargs)
    return datagen.generate(registry.problem(name), options)


def read_examples(files: list[str]) -> list[tuple[list[int], list[int]]]:
    out = []
    records = (r for f in files for r in tf.compat.v1.io.tf_record_iterator(f))
    for record in records:
        feature = tf.train.Example.FromString(record).features.feature
        out.append((list(feature["inputs"].int64_list.value), list(feature["targets"].int64_list.value)))
    return out


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("toy")
    run("copy_sequence", data_dir)
    run("reverse_sequence", data_dir)
    return data_dir


def test_toy_shards_match_meta_and_round_trip(toy_dir):
    vocab = Vocabulary(str(toy_dir / "vocab.toy.model"))
    for name, expected in (("copy_sequence", lambda s: s), ("reverse_sequence", lambda s: " ".join(s.split()[::-1]))):
        meta = read_meta(str(toy_dir), name)
        assert meta["vocab_file"] == "vocab.toy.model" and meta["vocab_size"] == vocab.vocab_size
        assert meta["metrics"] == ["accuracy", "sequence_accuracy"]
        total = 0
        for split, info in meta["splits"].items():
            files = data_files(str(toy_dir), name, split)
            assert [os.path.basename(f) for f in files] == info["files"]
            assert len(files) == info["shards"] == {"train": 2, "dev": 1, "test": 1}[split]
            examples = read_examples(files)
            assert len(examples) == info["examples"] > 0
            total += len(examples)
            for inputs, targets in examples[:50]:
                assert inputs[-1] == EOS_ID and targets[-1] == EOS_ID and EOS_ID not in inputs[:-1]
                text = vocab.decode(inputs)
                assert set(text.split()) <= set("abcdefghij") and 3 <= len(text.split()) <= 10
                assert vocab.decode(targets) == expected(text)
        assert total == meta["rows_read"] == 21_000
        dev_share = meta["splits"]["dev"]["examples"] / 20_000
        assert 0.08 < dev_share < 0.12
        assert meta["lengths"]["inputs"]["max"] == 11  # 10 letters + EOS
        assert meta["lengths"]["inputs"]["p50"] <= meta["lengths"]["inputs"]["p90"] <= 11


def test_rerun_skips_complete_problem(toy_dir):
    before = tree(toy_dir)
    assert run("copy_sequence", toy_dir) == ["copy_sequence: complete, skipped (use --overwrite to regenerate)"]
    assert tree(toy_dir) == before


def test_rerun_clears_what_a_killed_run_left_of_a_complete_component(toy_dir):
    """A run killed while writing a later component leaves the earlier one's spool behind."""
    stale = toy_dir / ".copy_sequence.work"
    stale.mkdir()
    (stale / "train.spool").write_bytes(b"left by a killed run")
    before = tree(toy_dir)
    assert run("copy_sequence", toy_dir) == ["copy_sequence: complete, skipped (use --overwrite to regenerate)"]
    assert not stale.exists() and tree(toy_dir) == before


def test_same_input_gives_byte_identical_output(tmp_path):
    raw = write_quora(tmp_path / "raw")
    run("qp_is_duplicate", tmp_path / "a", raw)
    run("qp_is_duplicate", tmp_path / "b", raw, chunk_rows=37)  # chunking must not matter
    # With the vocabulary present, rows skip the spool and go straight to the shards: same bytes.
    (tmp_path / "c").mkdir()
    for name in ("vocab.qp.model", "vocab.qp.vocab"):
        (tmp_path / "c" / name).write_bytes((tmp_path / "a" / name).read_bytes())
    run("qp_is_duplicate", tmp_path / "c", raw, chunk_rows=50)
    a, b, c = tree(tmp_path / "a"), tree(tmp_path / "b"), tree(tmp_path / "c")
    assert sorted(a) == sorted(b) and len(a) == 4 + 1 + 1 + 1 + 2  # shards, meta, model, vocab
    assert a == b == c
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".")]  # no work directory left
    # Train shards are shuffled: the row ids (the number ending question2) are out of file order.
    vocab = Vocabulary(str(tmp_path / "a" / "vocab.qp.model"))
    examples = read_examples(data_files(str(tmp_path / "a"), "qp_is_duplicate", "train")[:1])
    ids = [int(re.search(r", (\d+)\?$", vocab.decode(inputs)).group(1)) for inputs, _ in examples]
    assert len(ids) > 30 and ids != sorted(ids)


def test_resume_after_failure_matches_uninterrupted_run(tmp_path, monkeypatch):
    raw = write_quora(tmp_path / "raw")
    run("qp_is_duplicate", tmp_path / "clean", raw)

    real_write_shard = shards.write_shard
    calls = []

    def dying_write_shard(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as if killed while writing the third shard
        return real_write_shard(*args, **kwargs)

    monkeypatch.setattr(shards, "write_shard", dying_write_shard)
    with pytest.raises(KeyboardInterrupt):
        run("qp_is_duplicate", tmp_path / "killed", raw)
    monkeypatch.setattr(shards, "write_shard", real_write_shard)
    left = tree(tmp_path / "killed")
    assert "qp_is_duplicate.meta.json" not in left  # nothing claims to be complete
    assert len([n for n in left if n.startswith("qp_is_duplicate-train")]) == 2
    with pytest.raises(UserError, match="run t2t-datagen"):
        read_meta(str(tmp_path / "killed"), "qp_is_duplicate")

    summary = run("qp_is_duplicate", tmp_path / "killed", raw)
    assert summary[0].startswith("qp_is_duplicate: 320 rows -> train ")
    assert tree(tmp_path / "killed") == tree(tmp_path / "clean")


def test_changed_input_or_overwrite_regenerates(tmp_path):
    raw = write_quora(tmp_path / "raw", rows=200)
    run("qp_is_duplicate", tmp_path / "out", raw, num_train_shards=3)
    assert len(data_files(str(tmp_path / "out"), "qp_is_duplicate", "train")) == 3
    assert "complete" in run("qp_is_duplicate", tmp_path / "out", raw, num_train_shards=3)[0]
    # Different shard count: the old shards go, so readers never mix the two.
    run("qp_is_duplicate", tmp_path / "out", raw)
    assert len(data_files(str(tmp_path / "out"), "qp_is_duplicate", "train")) == 4
    write_quora(tmp_path / "raw", rows=250)
    assert run("qp_is_duplicate", tmp_path / "out", raw)[0].startswith("qp_is_duplicate: 270 rows -> ")
    assert read_meta(str(tmp_path / "out"), "qp_is_duplicate")["rows_read"] == 270
    assert "rows ->" in run("qp_is_duplicate", tmp_path / "out", raw, overwrite=True)[0]


def test_skipped_rows_are_counted_and_reported(tmp_path, caplog):
    raw = write_quora(tmp_path / "raw", rows=400, blank_ids=(20, 300))
    run("qp_is_duplicate", tmp_path / "out", raw)
    meta = read_meta(str(tmp_path / "out"), "qp_is_duplicate")
    train = meta["skipped"]["sources"]["train"]
    # Row id i is on line i + 2, plus one for the two-line question of row 5.
    assert train == {"source": "train.csv", "rows": 400, "skipped": 2, "first_lines": [23, 303], "filtered": 0}
    assert meta["skipped"]["total"] == 2
    assert meta["splits"]["train"]["examples"] + meta["splits"]["dev"]["examples"] == 398
    assert "skipped 2 of 400 rows with an empty required field" in caplog.text
    assert "at lines 23, 303" in caplog.text


def test_too_many_skipped_rows_fail_naming_file_and_lines(tmp_path):
    raw = write_quora(tmp_path / "raw", rows=100, blank_ids=(3, 4))
    with pytest.raises(UserError) as info:
        run("qp_is_duplicate", tmp_path / "out", raw)
    message = str(info.value)
    assert message.startswith(f"{raw / 'train.csv'}: skipped 2 of 100 rows")
    assert "at lines 5, 6" in message and "more than 1.00% of the rows" in message
    assert not (tmp_path / "out" / "qp_is_duplicate.meta.json").exists()
    assert not list((tmp_path / "out").glob("qp_is_duplicate-*"))


def test_example_bytes_parse_as_tf_examples():
    record = shards.ExampleEncoder().encode([5, 300, 20000], [])
    example = tf.train.Example.FromString(record)
    assert list(example.features.feature["inputs"].int64_list.value) == [5, 300, 20000, EOS_ID]
    assert list(example.features.feature["targets"].int64_list.value) == [EOS_ID]
    assert sorted(example.features.feature) == ["inputs", "targets"]
    long = list(range(100, 3100))  # past the precomputed header sizes
    example = tf.train.Example.FromString(shards.ExampleEncoder().encode(long, long[::-1]))
    assert list(example.features.feature["inputs"].int64_list.value) == long + [EOS_ID]
    assert list(example.features.feature["targets"].int64_list.value) == long[::-1] + [EOS_ID]


def test_batch_of_examples_equals_one_by_one():
    encoder = shards.ExampleEncoder()
    ids = [[5, 300, 20000], [], list(range(100, 3100)), [7] * 200, [2**20]]
    records = encoder.records(
        packed_encoder.pack_ids(ids)[0], packed_encoder.pack_ids([[len(i)] for i in ids][::-1])[0]
    ).tolist()
    singles = [encoder.encode(a, b) for a, b in zip(ids, [[len(i)] for i in ids][::-1], strict=True)]
    assert records == [shards.tfrecord_bytes([s]) for s in singles]


def test_column_wise_squash_spaces_with_every_kind_of_whitespace():
    from t2tcli.data.sources import columns, text

    every = {c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()}
    assert every == {" ", *text._OTHER_WHITESPACE}  # the scan for irregular spacing looks for all of them
    texts = ["plain text", "", " ", "a  b", " a", "a ", "  ", "x"]
    for w in sorted(every):
        texts += [f"a{w}b", f"{w}a", f"a{w}", f"a {w} b", f"{w}{w}", w]
    ascii_texts = [t for t in texts if t.isascii()]
    for batch in (texts, ascii_texts, ascii_texts[::-1], texts + ["ñ"], ["what is x?"] * 3, [""], [" "], ["\x01a"]):
        assert text.squash_spaces(columns.Column(list(batch))).values == list(map(text.squash_spaces, batch))


def test_meta_is_valid_json_with_agreed_keys(toy_dir):
    meta = json.loads((toy_dir / "copy_sequence.meta.json").read_text())
    for key in ("problem", "vocab_file", "vocab_size", "splits", "skipped", "lengths", "source_fingerprint"):
        assert key in meta
    assert set(meta["lengths"]["targets"]) == {"p50", "p90", "p95", "p99", "max"}


def test_word_cached_encoding_equals_whole_text_encoding(toy_dir, tmp_path):
    raw = write_quora(tmp_path / "raw")
    run("qp_is_duplicate", tmp_path / "out", raw)
    vocab = Vocabulary(str(tmp_path / "out" / "vocab.qp.model"))
    texts = [
        "is duplicate: how to cook <SEP> why",
        "a  b\tc ",
        "",
        " ",
        "ñandú ｆｕｌｌ width",
        "xyz<SEP>q",
        "what?" * 40,
    ]
    encoder = PackedTextEncoder(vocab)
    assert encoder.use_word_cache
    packed, counts = encoder.encode(texts * 3)
    expected = vocab.encode_batch(texts * 3)
    assert packed.tolist() == [b"".join(map(varint, ids)) for ids in expected]
    assert counts.tolist() == [len(ids) for ids in expected]

    encoder = PackedTextEncoder(vocab)
    encoder._by_word = lambda batch: (Spans.from_list([b"wrong"] * len(batch)), None)  # as if split differently
    packed, _ = encoder.encode(texts)
    expected = [b"".join(map(varint, ids)) for ids in vocab.encode_batch(texts)]
    assert not encoder.use_word_cache and packed.tolist() == expected


@pytest.mark.parametrize("supplied", [False, True])
def test_whole_text_encoding_is_mentioned_only_for_a_vocabulary_the_user_supplied(tmp_path, caplog, supplied):
    """A vocabulary datagen trained itself leaves nothing to act on, so its slower encoding
    goes unmentioned; one given with --vocab_from gets a line saying what would be faster."""
    import logging

    from t2tcli.data.vocabulary.vocab import train_vocabulary

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    sentences = [" ".join(words[i % 10 : i % 10 + 4]) for i in range(200)]
    train_vocabulary(sentences, str(tmp_path / "v.model"), 60)
    encoder = PackedTextEncoder(Vocabulary(str(tmp_path / "v.model")), supplied=supplied)
    encoder._by_word = lambda batch: (Spans.from_list([b"wrong"] * len(batch)), None)  # as if split otherwise
    caplog.set_level(logging.INFO)
    encoder.encode(sentences[:10])
    assert not encoder.use_word_cache
    mentioned = [r.getMessage() for r in caplog.records if "concatenation of its space-separated words" in r.message]
    if supplied:
        assert len(mentioned) == 1 and "no --vocab_from" in mentioned[0] and "the ids are right" in mentioned[0]
    else:
        assert not mentioned and not [r for r in caplog.records if r.levelno >= logging.INFO and "v.model" in r.message]


def test_words_found_by_key_encode_as_whole_texts(tmp_path, monkeypatch):
    """Later batches find known words by their byte keys; every kind of word must still encode exactly."""
    raw = write_quora(tmp_path / "raw")
    run("qp_is_duplicate", tmp_path / "out", raw)
    vocab = Vocabulary(str(tmp_path / "out" / "vocab.qp.model"))
    words = ["", "a", "how", "seven77", "eightchr", "fifteen-bytes!!", "sixteen-bytes!!!", "ñandú", "中文字", "a\0b"]
    words += ["x" * n for n in range(1, 20)] + ["é" * 7, "é" * 8, "what?", "What?"]
    texts = [" ".join(words[(i * j) % len(words)] for j in range(i % 7 + 1)) for i in range(600)]
    texts += ["  double  spaces ", " ".join(words)]
    expected = [b"".join(map(varint, vocab.encode(t))) for t in texts]
    monkeypatch.setattr(packed_encoder, "VERIFY_TEXTS", 0)  # no safety net: the keyed path alone must be right
    encoder = PackedTextEncoder(vocab)
    keyed_texts = [t for t in texts if max(map(len, t.encode().split(b" "))) <= 15]
    for batch in (texts, texts[::-1], keyed_texts, texts[5:300], texts):
        packed, counts = encoder.encode(batch)
        assert encoder.use_word_cache
        assert packed.tolist() == [expected[texts.index(t)] for t in batch]
        assert counts.tolist() == [len(vocab.encode(t)) for t in batch]
    # Every cached word of up to 15 bytes is found by its key, to the row its string has; longer ones are not.
    found = encoder._keyed.find(packed_encoder._Words.of(" ".join(words).encode())).tolist()
    assert found == [encoder._rows[w] if len(w.encode()) <= 15 else -1 for w in words]


def test_spans_gather_and_take_match_python_slicing():
    rng = np.random.default_rng(0)
    items = [bytes(rng.integers(0, 256, size).astype(np.uint8)) for size in rng.integers(0, 200, 300)]
    spans = Spans.from_list(items)
    assert spans.tolist() == items and spans.joined().tobytes() == b"".join(items)
    order = rng.permutation(len(items))[:200]
    assert spans.take(order).joined().tobytes() == b"".join(items[i] for i in order)
    short = Spans.from_list([item[:3] for item in items])  # short spans: the per-byte numpy gather
    assert short.take(order).joined().tobytes() == b"".join(items[i][:3] for i in order)
    assert interleave([short, spans, Spans.repeated(b"!", len(items))]).tolist() == [
        item[:3] + item + b"!" for item in items
    ]
    assert Spans.from_list([]).joined().tobytes() == b""


def test_vocab_sample_is_bounded_distinct_and_independent_of_chunking():
    texts = [f"text {i}" for i in range(5000)] + ["0"] * 3000 + ["1"] * 3000
    chunked = stats.VocabSample(200)
    for start in range(0, len(texts), 700):
        chunked.add(texts[start : start + 700])
    assert len(chunked.texts) <= 250
    whole = stats.VocabSample(200)
    whole.add(texts[::-1])
    sample = chunked.sentences()
    assert sample == whole.sentences() and len(sample) == len(set(sample)) == 200
    small = stats.VocabSample(10_000)
    small.add(texts)
    assert sorted(small.sentences()) == sorted(set(texts))


def test_vocab_from_file_is_reused_not_trained(toy_dir, tmp_path):
    copy_sequence = type(registry.problem("copy_sequence"))
    toy_model = str(toy_dir / "vocab.toy.model")

    class ReusesVocab(copy_sequence):
        name = "copy_reusing_vocab"
        vocab = VocabSpec(name="reused", from_file=toy_model)
        train_rows, test_rows = 500, 50

    datagen.generate(ReusesVocab(), datagen.Options(data_dir=str(tmp_path)))
    assert (tmp_path / "vocab.reused.model").read_bytes() == (toy_dir / "vocab.toy.model").read_bytes()
    assert read_meta(str(tmp_path), "copy_reusing_vocab")["vocab_file"] == "vocab.reused.model"

    class BadVocab(ReusesVocab):
        name = "copy_bad_vocab"
        vocab = VocabSpec(name="bad", from_file=str(tmp_path / "missing.model"))

    with pytest.raises(UserError, match="missing.model"):
        datagen.generate(BadVocab(), datagen.Options(data_dir=str(tmp_path)))


def test_sentinels_encode_as_t5_and_round_trip(toy_dir, tmp_path):
    from t2tcli.data.vocabulary import vocab as vocablib

    proto = (toy_dir / "vocab.toy.model").read_bytes()
    with_ids = vocablib.with_sentinels(proto, 100)
    assert vocablib.sentinel_count(with_ids) == 100 and vocablib.with_sentinels(with_ids, 100) == with_ids
    assert vocablib.without_sentinels(with_ids) == (proto, 100)
    vocablib.write_model(with_ids, str(tmp_path / "t5.model"))
    plain, t5 = Vocabulary(str(toy_dir / "vocab.toy.model")), Vocabulary(str(tmp_path / "t5.model"))
    assert t5.vocab_size == plain.vocab_size + 100
    # <extra_id_0> is the last id, as in T5; the space before it belongs to it, as Hugging Face tokenizes.
    ids = t5.encode("a b <extra_id_0> c <extra_id_99>")
    assert ids == plain.encode("a b") + [t5.vocab_size - 1] + plain.encode("c") + [t5.vocab_size - 100]
    assert t5.decode(ids) == "a b <extra_id_0> c <extra_id_99>"


def test_vocab_from_replaces_the_problems_vocabulary_and_regenerates(toy_dir, tmp_path):
    from t2tcli.data.vocabulary import vocab as vocablib

    other = tmp_path / "other.model"
    other.write_bytes(vocablib.with_sentinels((toy_dir / "vocab.toy.model").read_bytes(), 10))
    out = tmp_path / "out"
    run("copy_sequence", out)
    assert run("copy_sequence", out)[0].endswith("complete, skipped (use --overwrite to regenerate)")
    summary = run("copy_sequence", out, vocab_from=str(other))
    assert "rows ->" in summary[0], "another vocabulary makes the shards stale"
    assert (out / "vocab.toy.model").read_bytes() == other.read_bytes()
    assert read_meta(str(out), "copy_sequence")["vocab_size"] == Vocabulary(str(other)).vocab_size
    assert run("copy_sequence", out, vocab_from=str(other))[0].endswith(
        "complete, skipped (use --overwrite to regenerate)"
    )
    # A released T5 sentencepiece.model has no sentinels; --vocab_extra_ids appends them.
    plain = tmp_path / "plain.model"
    plain.write_bytes((toy_dir / "vocab.toy.model").read_bytes())
    base = Vocabulary(str(plain)).vocab_size
    assert "rows ->" in run("copy_sequence", out, vocab_from=str(plain))[0]
    assert "rows ->" in run("copy_sequence", out, vocab_from=str(plain), vocab_extra_ids=100)[0]
    assert Vocabulary(str(out / "vocab.toy.model")).vocab_size == base + 100
    assert read_meta(str(out), "copy_sequence")["vocab_size"] == base + 100
    with pytest.raises(UserError, match="a directory without config.json"):
        run("copy_sequence", out, vocab_from=str(tmp_path))
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(UserError, match="junk.model: not a SentencePiece model"):
        run("copy_sequence", out, vocab_from=str(tmp_path / "junk.model"))


def test_preprocess_failures_name_file_and_line(tmp_path):
    raw = write_quora(tmp_path / "raw", rows=40)
    text = (raw / "train.csv").read_text(encoding="utf-8").splitlines(True)
    row = next(i for i, line in enumerate(text) if line.startswith("30,"))
    text[row] = text[row].rstrip("\n").rsplit(",", 1)[0] + ",maybe\n"  # label of id 30: line 33
    (raw / "train.csv").write_text("".join(text), encoding="utf-8")
    with pytest.raises(UserError) as info:
        run("qp_is_duplicate", tmp_path / "out", raw)
    assert str(info.value) == f"{raw / 'train.csv'}: line 33: is_duplicate must be one of 0, 1, got 'maybe'"

    class Buggy(type(registry.problem("copy_sequence"))):
        name = "buggy"
        train_rows, test_rows = 50, 5

        def preprocess(self, record):
            return {"inputs": record["input"], "targets": record["targets"]}  # a typo: "input"

    with pytest.raises(UserError) as info:
        datagen.generate(Buggy(), datagen.Options(data_dir=str(tmp_path / "buggy")))
    assert str(info.value) == "<generated buggy>: line 1: preprocessing for problem 'buggy' failed: KeyError: 'input'"
