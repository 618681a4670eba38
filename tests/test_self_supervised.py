"""T5's self-supervised objectives: corruption ops, the text source, and the binaries on them."""

from __future__ import annotations

import gzip
import json
import logging
import re

import pytest
from conftest import REPO, run_binary

from t2tcli.compat import tf
from t2tcli.data.input import corruption
from t2tcli.data.objectives import IidDenoising, PrefixLM, Room, SpanCorruption
from t2tcli.data.sources.source_base import ReadOptions
from t2tcli.data.sources.text_source import TextSource
from t2tcli.errors import UserError

VOCAB, SENTINELS = 1000, 100
ROOM = Room(vocab_size=VOCAB, sentinels=SENTINELS, inputs_length=128, targets_length=128)
# Sentinel ids: <extra_id_0> is the last id of the vocabulary.
FIRST_SENTINEL = VOCAB - SENTINELS


def documents(lengths: list[int], start: int = 2) -> tf.data.Dataset:
    """Documents of consecutive ids (below the sentinels), so a piece's order can be checked."""
    docs, next_id = [], start
    for n in lengths:
        docs.append([2 + (next_id + i) % (FIRST_SENTINEL - 2) for i in range(n)])
        next_id += n
    return tf.data.Dataset.from_generator(lambda: iter(docs), output_signature=tf.TensorSpec([None], tf.int32))


def made(objective, docs: tf.data.Dataset, seed: int = 7, room: Room = ROOM) -> list[dict[str, list[int]]]:
    ds = corruption.corrupted(docs, objective, room, seed, "vocab.test.model")
    return [{k: v.tolist() for k, v in ex.items()} for ex in ds.as_numpy_iterator()]


def rebuilt(ex: dict[str, list[int]]) -> list[int]:
    """The piece an example was made from: each sentinel of the inputs replaced by the
    tokens after the same sentinel in the targets (and the other way round)."""
    spans: dict[int, list[int]] = {}
    current = None
    for token in ex["targets"]:
        if token >= FIRST_SENTINEL:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out = []
    for token in ex["inputs"]:
        out.extend(spans[token] if token >= FIRST_SENTINEL else [token])
    return out


def pieces(docs_lengths: list[int], piece: int) -> list[list[int]]:
    stream = [t for doc in documents(docs_lengths).as_numpy_iterator() for t in doc.tolist()]
    return [stream[i : i + piece] for i in range(0, len(stream), piece) if len(stream[i : i + piece]) >= 2]


def test_span_corruption_has_t5s_lengths_and_sentinels_and_loses_nothing():
    objective = SpanCorruption()
    # T5's arithmetic: 568 tokens make inputs of 512 and targets of 114 (EOS included).
    assert objective.piece_length(512, 114) == 568 and objective.lengths_for(568) == (512, 114)
    piece = objective.piece_length(128, 128)
    examples = made(objective, documents([90, 300, 45, 700, 13]))
    expected = pieces([90, 300, 45, 700, 13], piece)
    assert len(examples) == len(expected)
    noise = spans = 0
    for ex, original in zip(examples, expected, strict=True):
        assert rebuilt(ex) == original
        assert len(ex["inputs"]) <= 127 and len(ex["targets"]) <= 127  # EOS makes 128
        sentinels_in = [t for t in ex["inputs"] if t >= FIRST_SENTINEL]
        sentinels_out = [t for t in ex["targets"] if t >= FIRST_SENTINEL]
        # <extra_id_0>, <extra_id_1>, ... in order, the same ones on both sides.
        assert sentinels_in == sentinels_out == list(range(VOCAB - 1, VOCAB - 1 - len(sentinels_in), -1))
        assert ex["targets"][0] == VOCAB - 1 and ex["inputs"][0] != VOCAB - 1  # a kept span first
        if len(original) == piece:
            assert (len(ex["inputs"]) + 1, len(ex["targets"]) + 1) == objective.lengths_for(piece)
        noise += len(ex["targets"]) - len(sentinels_out)
        spans += len(sentinels_out)
    total = sum(len(p) for p in expected)
    assert abs(noise / total - 0.15) < 0.02
    assert abs(noise / spans - 3.0) < 0.5


def test_corruption_is_drawn_from_the_seed_and_the_piece_anew_each_epoch():
    objective = SpanCorruption()
    piece = objective.piece_length(128, 128)
    one_epoch = [piece * 3]  # whole pieces: epoch 2 cuts the same pieces again
    twice = documents(one_epoch).repeat(2)
    first, again = made(objective, twice), made(objective, twice)
    assert first == again, "one seed, the same examples"
    assert len(first) == 6
    for a, b in zip(first[:3], first[3:], strict=True):
        assert rebuilt(a) == rebuilt(b), "the same text..."
    assert any(a != b for a, b in zip(first[:3], first[3:], strict=True)), "...corrupted anew in epoch 2"
    assert made(objective, twice, seed=8) != first, "another seed, other noise"


@pytest.mark.parametrize("objective", [IidDenoising(), PrefixLM()], ids=lambda o: o.name)
def test_iid_denoising_and_prefix_lm_fit_the_lengths_and_lose_nothing(objective):
    room = Room(VOCAB, SENTINELS, inputs_length=64, targets_length=48)
    examples = made(objective, documents([500, 77, 260]), room=room)
    expected = pieces([500, 77, 260], objective.piece_length(64, 48))
    assert len(examples) == len(expected)
    for ex, original in zip(examples, expected, strict=True):
        assert len(ex["inputs"]) <= 63 and ex["inputs"] and ex["targets"]
        if objective.name == "prefix_lm":
            assert len(ex["targets"]) <= 47 and ex["inputs"] + ex["targets"] == original
        else:
            assert rebuilt(ex) == original
    if objective.name == "prefix_lm":
        assert len({len(ex["inputs"]) for ex in examples}) > 1, "the cut is drawn, not fixed"


def test_too_few_sentinels_or_too_short_targets_are_one_line_errors():
    with pytest.raises(UserError, match=r"vocab\.test\.model: a vocabulary of 1000 ids with 3 sentinels.*needs 8"):
        made(SpanCorruption(), documents([10]), room=Room(VOCAB, 3, 128, 128))
    with pytest.raises(UserError, match=r"targets_length=29 or more"):
        SpanCorruption().piece_length(128, 20)
    with pytest.raises(UserError, match="noise_density"):
        SpanCorruption(noise_density=1.5)


# A gzip file cut in half, as an interrupted copy leaves it.
_WHOLE_GZIP = gzip.compress("".join(f"line {i * i} of {i}\n" for i in range(5000)).encode())
CUT_GZIP = _WHOLE_GZIP[: len(_WHOLE_GZIP) // 2]


def read_all(source: TextSource) -> list[tuple[str, int]]:
    options = ReadOptions(chunk_rows=2)
    return [
        (text, int(line))
        for chunk in source.chunks(options)
        for text, line in zip(chunk.frame["text"], chunk.lines, strict=True)
    ]


def test_text_source_reads_lines_paragraphs_and_gzip(tmp_path, caplog):
    (tmp_path / "a.txt").write_text("first line\n\n  second line  \nthird\n", encoding="utf-8")
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write("zipped one\nzipped two\n\nnew paragraph\n")
    (tmp_path / "long.txt").write_text("x" * 50 + "\nshort\n")
    lines = TextSource([str(tmp_path / "*.txt"), str(tmp_path / "*.txt.gz")])
    got = read_all(lines)
    assert got[:3] == [("first line", 1), ("second line", 3), ("third", 4)]
    # Files in name order, whichever pattern found them.
    assert got[3:] == [("zipped one", 1), ("zipped two", 2), ("new paragraph", 4), ("x" * 50, 1), ("short", 2)]
    paragraphs = read_all(TextSource(str(tmp_path / "b.txt.gz"), paragraphs=True))
    assert paragraphs == [("zipped one zipped two", 1), ("new paragraph", 4)]
    cut = read_all(TextSource(str(tmp_path / "long.txt"), max_chars=20))
    assert cut == [("x" * 20, 1), ("short", 2)]
    assert "long.txt: 1 of 2 lines were longer than 20 characters and were cut there" in caplog.text


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.txt", b"", r"empty\.txt: no text \(an empty file, or only blank lines\)"),
        ("blank.txt", b"\n  \n", r"blank\.txt: no text"),
        ("binary.txt", b"ok\n\x89PNG\x00\x01\n", r"binary\.txt: line 2: a NUL byte: a binary file, not text"),
        ("latin1.txt", "ok\ncaf\xe9\n".encode("latin-1"), r"latin1\.txt: line 2, byte 4: not UTF-8 text"),
        ("fake.txt.gz", b"not gzip at all", r"fake\.txt\.gz: not a gzip file"),
        ("cut.txt.gz", CUT_GZIP, r"cut\.txt\.gz: a damaged gzip file"),
    ],
)
def test_text_source_bad_files_name_the_file(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(UserError, match=message):
        read_all(TextSource(str(tmp_path / name)))


def test_text_source_with_no_files_says_what_it_looked_for(tmp_path):
    with pytest.raises(UserError, match=r"\*\.txt: matches no file"):
        TextSource(str(tmp_path / "*.txt")).fingerprint()


def write_corpus(directory, lines: int = 400) -> None:
    import csv

    directory.mkdir(parents=True, exist_ok=True)
    with open(REPO / "problems" / "data" / "translate_en_es.csv", encoding="utf-8") as f:
        verses = [row["english"] for row, _ in zip(csv.DictReader(f), range(lines), strict=False)]
    half = len(verses) // 2
    (directory / "plain.txt").write_text("\n".join(verses[:half]) + "\n", encoding="utf-8")
    with gzip.open(directory / "zipped.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(verses[half:]) + "\n")


TINY = ["--hparams_set=mtf_transformer_tiny", "--random_seed=3"]


def test_span_corruption_from_tmp_dir_trains_evaluates_and_decodes(tmp_path):
    text, data, model = tmp_path / "my_text", tmp_path / "data", tmp_path / "model"
    write_corpus(text)
    made_data = run_binary("t2t-datagen", "--problem=span_corruption", f"--tmp_dir={text}", f"--data_dir={data}")
    assert made_data.returncode == 0, made_data.stderr[-2000:]
    meta = json.loads((data / "span_corruption.meta.json").read_text())
    assert meta["rows_read"] == 400, "both files, the .gz read directly"
    from t2tcli.data.vocabulary.vocab import sentinel_count

    assert sentinel_count((data / "vocab.text.model").read_bytes()) == 100
    args = [f"--data_dir={data}", f"--model_dir={model}", *TINY]
    trained = run_binary("t2t-train", "--problem=span_corruption", *args, "--train_steps=30")
    assert trained.returncode == 0, trained.stderr[-2000:]
    scored = run_binary("t2t-eval", f"--model_dir={model}", "--max_examples=40")
    assert scored.returncode == 0, scored.stderr[-2000:]
    record = json.loads((model / "eval_dev" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["problem"] == "span_corruption" and record["examples"] > 0
    assert 0 <= record["metrics"]["token_accuracy"] <= 100 and record["metrics"]["loss"] > 0
    again = run_binary("t2t-eval", f"--model_dir={model}", "--max_examples=40", f"--eval_dir={tmp_path / 'again'}")
    assert again.returncode == 0
    second = json.loads((tmp_path / "again" / "metrics.jsonl").read_text().splitlines()[-1])
    assert second["metrics"] == record["metrics"], "the dev text is corrupted with one fixed seed"
    lines = tmp_path / "in.txt"
    lines.write_text("And God said, Let there be <extra_id_0>: and there was light.\n")
    decoded = run_binary("t2t-decode", f"--model_dir={model}", f"--decode_from_file={lines}",
                         f"--decode_to_file={tmp_path / 'out.txt'}")  # fmt: skip
    assert decoded.returncode == 0, decoded.stderr[-2000:]
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 1


def test_mixture_of_span_corruption_and_a_supervised_problem_trains(tmp_path):
    usr = tmp_path / "usr"
    usr.mkdir()
    (usr / "__init__.py").write_text(
        "from t2tcli.problem import Mixture, SelfSupervisedProblem, Text2TextProblem, by_examples\n"
        "from t2tcli.registry import register_problem\n"
        "from t2tcli.sources import TsvSource\n"
        "\n"
        "@register_problem('shout')\n"
        "class Shout(Text2TextProblem):\n"
        "    vocab = SelfSupervisedProblem.vocab  # the vocabulary 'text', sentinels and all\n"
        "    def source(self, tmp_dir):\n"
        f"        return TsvSource('{tmp_path}/pairs.tsv', columns=('a', 'b'))\n"
        "    def preprocess(self, record):\n"
        "        return {'inputs': 'shout: ' + record['a'], 'targets': record['b']}\n"
        "\n"
        "@register_problem('shout_and_text')\n"
        "class ShoutAndText(Mixture):\n"
        "    vocab = SelfSupervisedProblem.vocab\n"
        "    problems = [('span_corruption', 1.0), ('shout', by_examples)]\n"
    )
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    rows = [f"{' '.join(words[i % 8 : i % 8 + 3])}\t{' '.join(words[i % 8 : i % 8 + 3]).upper()}" for i in range(300)]
    (tmp_path / "pairs.tsv").write_text("a\tb\n" + "\n".join(rows) + "\n")
    write_corpus(tmp_path / "my_text", 200)
    data, model = tmp_path / "data", tmp_path / "model"
    common = [f"--usr_dir={usr}", "--problem=shout_and_text", f"--data_dir={data}"]
    made_data = run_binary("t2t-datagen", *common, f"--tmp_dir={tmp_path / 'my_text'}")
    assert made_data.returncode == 0, made_data.stderr[-2000:]
    assert {p.name for p in data.glob("*.meta.json")} == {"span_corruption.meta.json", "shout.meta.json"}
    trained = run_binary("t2t-train", *common, f"--model_dir={model}", *TINY, "--train_steps=20")
    assert trained.returncode == 0, trained.stderr[-2000:]
    scored = run_binary("t2t-eval", f"--model_dir={model}", "--max_examples=30", "--trust_usr_dir")
    assert scored.returncode == 0, scored.stderr[-2000:]
    problems = {json.loads(r)["problem"] for r in (model / "eval_dev" / "metrics.jsonl").read_text().splitlines()}
    assert problems == {"span_corruption", "shout"}


def sentinel_short_problems(tmp_path) -> str:
    """A --usr_dir with span corruption over --tmp_dir's text in vocabularies of 0 and 2 sentinels."""
    usr = tmp_path / "usr"
    usr.mkdir()
    (usr / "__init__.py").write_text(
        "from t2tcli.problem import SpanCorruption, VocabSpec\n"
        "from t2tcli.registry import register_problem\n"
        "from t2tcli.builtin.problems.self_supervised import SpanCorruptionText\n"
        "\n"
        "@register_problem('no_sentinels')\n"
        "class NoSentinels(SpanCorruptionText):\n"
        "    vocab = VocabSpec(name='plain', size=300)\n"
        "\n"
        "@register_problem('two_sentinels')\n"
        "class TwoSentinels(SpanCorruptionText):\n"
        "    vocab = VocabSpec(name='few', size=300, extra_ids=2)\n"
    )
    return str(usr)


@pytest.mark.parametrize(
    "setup, problem, message",
    [
        (None, "span_corruption", r"problem 'span_corruption' reads the \*\.txt and \*\.txt\.gz files of --tmp_dir"),
        ("empty", "span_corruption", r"empty\.txt: no text"),
        ("binary", "span_corruption", r"binary\.txt: line 1: a NUL byte"),
        ("text", "no_sentinels", r"vocabulary 'plain': no room for T5's sentinels .*extra_ids=100"),
    ],
)
def test_bad_text_input_is_one_line(tmp_path, setup, problem, message):
    from test_faults import assert_fails_in_one_line

    tmp = tmp_path / "raw"
    tmp.mkdir()
    if setup == "empty":
        (tmp / "empty.txt").write_text("")
    elif setup == "binary":
        (tmp / "binary.txt").write_bytes(b"\x00\x01\x02 not text")
    elif setup == "text":
        (tmp / "ok.txt").write_text("a line of text\n")
    args = [f"--problem={problem}", f"--data_dir={tmp_path / 'data'}", f"--usr_dir={sentinel_short_problems(tmp_path)}"]
    failed = run_binary("t2t-datagen", *args, *([f"--tmp_dir={tmp}"] if setup else []))
    line = assert_fails_in_one_line(failed)
    assert re.search(message, line), line


def test_training_needs_the_sentinels_its_lengths_use(tmp_path):
    """A vocabulary with fewer sentinels than the objective needs at the model's lengths is
    one line naming the vocabulary file, before any step."""
    from test_faults import assert_fails_in_one_line

    write_corpus(tmp_path / "my_text", 100)
    data, usr = tmp_path / "data", f"--usr_dir={sentinel_short_problems(tmp_path)}"
    generate = ["--problem=two_sentinels", f"--tmp_dir={tmp_path / 'my_text'}", f"--data_dir={data}", usr]
    assert run_binary("t2t-datagen", *generate).returncode == 0
    failed = run_binary(
        "t2t-train", "--problem=two_sentinels", f"--data_dir={data}", f"--model_dir={tmp_path / 'm'}", usr, *TINY
    )
    needs = "span_corruption at inputs_length=32 needs 3"
    assert_fails_in_one_line(failed, "vocab.few.model", "with 2 sentinels", needs)


def verses(count: int) -> list[str]:
    import csv

    with open(REPO / "problems" / "data" / "translate_en_es.csv", encoding="utf-8") as f:
        return [row["english"] for row, _ in zip(csv.DictReader(f), range(count), strict=False)]


@pytest.fixture(scope="module")
def plain_text_data(tmp_path_factory):
    """span_corruption generated from a corpus of `*.txt` files only: (data_dir, datagen's stderr)."""
    base = tmp_path_factory.mktemp("plain_text")
    (base / "text").mkdir()
    (base / "text" / "corpus.txt").write_text("\n".join(verses(300)) + "\n", encoding="utf-8")
    made = run_binary("t2t-datagen", "--problem=span_corruption", f"--tmp_dir={base / 'text'}", f"--data_dir={base}/d")
    assert made.returncode == 0, made.stderr[-2000:]
    return base / "d", made.stderr


def test_meta_records_the_patterns_that_found_the_text(plain_text_data):
    data, stderr = plain_text_data
    meta = json.loads((data / "span_corruption.meta.json").read_text())
    assert meta["skipped"]["sources"]["train"]["source"] == "*.txt", "no .txt.gz file was read"
    assert "concatenation of its space-separated words" not in stderr, "a vocabulary datagen trained leaves no task"


def test_max_examples_counts_examples_of_a_self_supervised_problem(plain_text_data):
    from t2tcli import registry
    from t2tcli.evaluate import evaluation

    data, _ = plain_text_data
    problem = registry.problem("span_corruption")
    every = evaluation.tasks_for(problem, str(data), "dev", 0, (128, 128))[0].examples
    texts = evaluation.read_examples(str(data), "span_corruption", "dev", 5)
    assert sum(len(t.targets) for t in texts) < 2 * 114, "five texts make fewer than five pieces here"
    capped = evaluation.tasks_for(problem, str(data), "dev", 5, (128, 128))[0].examples
    assert len(every) > 5 and capped == every[:5]


def test_a_run_refused_at_its_checks_writes_nothing_and_the_suggested_rerun_is_accepted(
    plain_text_data, tmp_path, monkeypatch, caplog
):
    from t2tcli.train import loop, trainer

    data, _ = plain_text_data
    model = tmp_path / "model"

    def config(hparams: str) -> trainer.TrainConfig:
        return trainer.TrainConfig(
            "span_corruption", "mtf_transformer_tiny", str(data), str(model), hparams, train_steps=2
        )

    with pytest.raises(UserError, match=r"span_corruption: inputs_length=32 takes pieces of") as refused:
        trainer.run(config("targets_length=4"))
    suggested = re.search(r"set --hparams=(targets_length=\d+) or more", str(refused.value)).group(1)
    assert not model.exists(), sorted(p.name for p in model.iterdir())
    # Accepted: past every check, the run is recorded with the suggested length (training itself stubbed out).
    monkeypatch.setattr(loop, "train", lambda cfg, plan: 0)
    caplog.set_level(logging.WARNING)
    assert trainer.run(config(suggested)) == 0
    assert "warmup_steps=100 is more than --train_steps=2" in caplog.text, "a new run shorter than its warm-up"
    assert json.loads((model / "hparams.json").read_text())["targets_length"] == int(suggested.split("=")[-1])


def test_pretraining_text_leaves_out_another_problems_dev_texts(tmp_path):
    """--leave_out_dev_of: texts of the fine-tuning problem's dev split (its whitespace aside)
    are not in the pretraining data, in any split; every other text is."""
    from t2tcli.data.vocabulary.vocab import Vocabulary

    lines = verses(120)
    raw, usr, data = tmp_path / "raw", tmp_path / "usr", tmp_path / "data"
    raw.mkdir()
    usr.mkdir()
    (raw / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (raw / "train.tsv").write_text("text\tlabel\n" + "".join(f"{t}\tyes\n" for t in lines[:80]), encoding="utf-8")
    dev = [t.replace(" ", "  ", 1) for t in lines[80:100]]  # laid out otherwise, the same text
    (raw / "dev.tsv").write_text("text\tlabel\n" + "".join(f"{t}\tno\n" for t in dev), encoding="utf-8")
    (usr / "__init__.py").write_text(
        "from t2tcli.problem import SelfSupervisedProblem, Text2TextProblem\n"
        "from t2tcli.registry import register_problem\n"
        "from t2tcli.sources import TsvSource\n"
        "\n"
        "@register_problem('verse_label')\n"
        "class VerseLabel(Text2TextProblem):\n"
        "    vocab = SelfSupervisedProblem.vocab\n"
        "    def source(self, tmp_dir):\n"
        "        return {split: TsvSource(f'{tmp_dir}/{split}.tsv', columns=('text', 'label'))\n"
        "                for split in ('train', 'dev')}\n"
        "    def preprocess(self, record):\n"
        "        return {'inputs': 'label: ' + record['text'], 'targets': record['label']}\n"
    )
    common = ["--problem=span_corruption", f"--tmp_dir={raw}", f"--data_dir={data}", f"--usr_dir={usr}"]
    made = run_binary("t2t-datagen", *common, "--leave_out_dev_of=verse_label")
    assert made.returncode == 0, made.stderr[-2000:]
    assert "left out 20 texts that are dev/test texts of verse_label" in made.stderr
    meta = json.loads((data / "span_corruption.meta.json").read_text())
    assert meta["rows_read"] == 100
    vocab = Vocabulary(str(data / "vocab.text.model"))
    written = set()
    for split in ("train", "dev"):
        for path in sorted(data.glob(f"span_corruption-{split}-*")):
            for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
                ids = tf.train.Example.FromString(record).features.feature["targets"].int64_list.value
                written.add(vocab.decode(list(ids)))
    # (Decoded: a character the small vocabulary lacks comes back as one unknown, so count them.)
    assert len(written) == 100 and not written & set(lines[80:100])
    unknown = run_binary("t2t-datagen", *common, "--leave_out_dev_of=no_such_problem", "--overwrite")
    assert unknown.returncode == 1 and "no_such_problem" in unknown.stderr.splitlines()[-1]
