"""The decode pipeline with a fake model: alignment, order, escapes, truncation, scoring."""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest

from t2tcli.data.vocabulary.vocab import EOS_ID, PAD_ID
from t2tcli.decode import batching, settings
from t2tcli.decode import lines as decode_lines
from t2tcli.decode.stats import Stats
from t2tcli.errors import UserError
from t2tcli.io import text_files


def char_encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def char_decode(ids: list[int]) -> str:
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i != PAD_ID:
            out.append(chr(i))
    return "".join(out)


class ReversingModel:
    """Outputs each input reversed; scores = -(number of target tokens)."""

    def __init__(self, max_decode_length: int = 40) -> None:
        self.max_decode_length = max_decode_length
        self.batches: list[dict[str, np.ndarray]] = []

    def __call__(self, batches, shapes):
        for features in batches():
            assert features["inputs"].shape == shapes["inputs"]
            assert features["inputs"].dtype == np.int32
            self.batches.append(features)
            for b in range(features["inputs"].shape[0]):
                ids = [int(i) for i in features["inputs"][b] if i not in (PAD_ID, EOS_ID)]
                out = np.zeros(self.max_decode_length, np.int32)
                rev = ids[::-1][: self.max_decode_length - 1] + [EOS_ID]
                out[: len(rev)] = rev
                score = -float(np.count_nonzero(features["targets"][b])) if "targets" in features else -len(ids)
                yield {"outputs": out, "scores": np.float32(score)}


def job(**kw) -> decode_lines.LineJob:
    args = dict(encode=char_encode, decode=char_decode, inputs_length=16, targets_length=8, batch_size=3)
    args.update(kw)
    return decode_lines.LineJob(**args)


def test_one_output_per_input_in_order_with_empty_lines():
    lines = ["abc", "", "hello world", "   ", "x", "longer line here", "", "zz"]
    out = io.StringIO()
    model = ReversingModel()
    stats = decode_lines.run(lines, out, job(), model)
    assert out.getvalue().split("\n")[:-1] == ["cba", "", "dlrow olleh", "", "x", "reh enil regnol", "", "zz"]
    assert stats.lines == 8 and stats.empty == 3
    assert stats.output_tokens == 3 + 11 + 1 + 16 + 2 - 1  # the 16-char line is cut to 15 tokens + EOS
    # 5 non-empty lines in batches of 3: 2 batches, sorted longest first, last one padded.
    assert len(model.batches) == 2
    first = [char_decode(list(r)) for r in model.batches[0]["inputs"]]
    assert first == ["longer line her", "hello world", "abc"]


def test_newlines_travel_escaped():
    out = io.StringIO()
    decode_lines.run(["ab\\ncd", "back\\\\slash"], out, job(), ReversingModel())
    assert out.getvalue() == "dc\\nba\nhsals\\\\kcab\n"


def test_escape_round_trip():
    for text in ["plain", "two\nlines", "tab\there", "back\\n slash", "\r\n", ""]:
        assert text_files.unescape(text_files.escape(text)) == text
        assert "\n" not in text_files.escape(text)
    assert text_files.unescape("C:\\path") == "C:\\path"


def test_truncation_is_counted_and_warned(caplog):
    lines = ["a" * 30, "b" * 5, "c" * 16]
    out = io.StringIO()
    with caplog.at_level("WARNING"):
        stats = decode_lines.run(lines, out, job(inputs_length=10), ReversingModel())
    assert stats.truncated_inputs == 2
    assert out.getvalue().split("\n")[:-1] == ["a" * 9, "b" * 5, "c" * 9]
    assert "input:1: input of 31 tokens truncated to 10" in caplog.text
    assert "2 of 3 inputs were longer than 10 tokens" in caplog.text


def test_summary_says_how_many_rows_the_decode_steps_computed():
    """The fast engine says the rows its loops computed; the summary turns that into the
    share of rows x steps, which tells how much finished lines leaving the loop saved.
    An engine that says only its steps (CTranslate2's) gets no share."""
    stats = Stats()
    stats.count_batch({"decode_steps": 10, "decode_row_steps": 50, "decode_loop_rows": 8}, 2)
    stats.count_batch({"decode_steps": 6, "decode_row_steps": 14, "decode_loop_rows": 4}, 1)
    assert stats.summary().endswith("2 batches, 16 decode steps, 62% of their rows computed")
    steps_only = Stats()
    steps_only.count_batch({"decode_steps": 7}, 3)
    assert steps_only.summary().endswith("1 batch, 7 decode steps")


def test_summary_says_how_long_t2t_decode_waited_on_the_engine():
    """An engine that says how long each batch kept t2t-decode waiting (CTranslate2's) gets
    it summed beside the decode time, so t2t-decode's own share of it can be read off one run."""
    stats = Stats(started=0.0)
    stats.first_batch, stats.finished = 1.0, 11.0
    stats.count_batch({"decode_steps": 5, "engine_seconds": 4.25}, 2)
    stats.count_batch({"decode_steps": 3, "engine_seconds": 5.0}, 2)
    assert stats.summary().endswith("2 batches, 8 decode steps; 9.25 s of the 10.00 s waiting on the engine")
    assert "on the engine" not in Stats().summary()


def test_format_input_errors_name_the_line():
    def fmt(line: str) -> str:
        if "\t" not in line:
            raise UserError("expected question1<TAB>question2")
        return "pair: " + line.replace("\t", " | ")

    out = io.StringIO()
    decode_lines.run(["q1\tq2"], out, job(format_input=fmt, inputs_length=40), ReversingModel())
    assert out.getvalue() == "2q | 1q :riap\n"
    with pytest.raises(UserError, match=r"in.txt:2: expected question1<TAB>question2"):
        decode_lines.run(
            ["a\tb", "no tab"], io.StringIO(), job(format_input=fmt, source_name="in.txt"), ReversingModel()
        )


def test_scoring_reads_pairs_and_keeps_empty_lines():
    out = io.StringIO()
    model = ReversingModel()
    decode_lines.run(["in\tabc", "", "a\tb\tlonger"], out, job(), model, scoring=True)
    assert out.getvalue().split("\n")[:-1] == ["-4", "", "-7"]  # target tokens + EOS
    assert "targets" in model.batches[0]
    with pytest.raises(UserError, match="input:1: expected 'input<TAB>target'"):
        decode_lines.run(["no target"], io.StringIO(), job(), ReversingModel(), scoring=True)


def test_many_lines_across_sort_windows(monkeypatch):
    monkeypatch.setattr(batching, "SORT_WINDOW_BATCHES", 2)
    rng = np.random.default_rng(0)
    lines = ["".join(chr(97 + int(c)) for c in rng.integers(0, 26, rng.integers(0, 12))) for _ in range(200)]
    out = io.StringIO()
    seen = []
    decode_lines.run(lines, out, job(batch_size=7), ReversingModel(), progress=seen.append)
    assert out.getvalue().split("\n")[:-1] == [line[::-1] for line in lines]
    assert sum(seen) == 200


def test_model_returning_too_few_rows_is_an_error():
    def short_model(batches, shapes):
        for features in batches():
            yield {"outputs": features["inputs"][0], "scores": 0.0}

    with pytest.raises(RuntimeError, match="fewer rows"):
        decode_lines.run(["a", "b"], io.StringIO(), job(), short_model)


def test_decode_hparams_validation():
    hp = settings.parse_decode_hparams("beam_size=4,alpha=0.6,batch_size=8")
    assert (hp.beam_size, hp.alpha, hp.batch_size, hp.temperature) == (4, 0.6, 8, 0.0)
    with pytest.raises(UserError, match="unknown hparam 'beam'"):
        settings.parse_decode_hparams("beam=4")
    with pytest.raises(UserError, match="does not sample"):
        settings.parse_decode_hparams("beam_size=4,temperature=1.0")
    with pytest.raises(UserError, match="engine=tpu is not one of auto, fast, mesh"):
        settings.parse_decode_hparams("engine=tpu")
    params = settings.parse_decode_hparams("engine=mesh,beam_size=2").engine_fields()
    assert params == {
        "beam_size": 2,
        "alpha": 0.6,
        "temperature": 0.0,
        "top_k": 0,
        "max_decode_length": 0,
        "engine": "mesh",
        "quantization": "float32",
        "return_beams": False,
    }


def test_read_lines_stdin_and_crlf(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\r\n\nb\x0cc\nlast")))
    assert list(text_files.read_lines("-", "decode_from_file")) == ["a", "", "b\x0cc", "last"]
    path = tmp_path / "in.txt"
    path.write_bytes(b"x\n\ny\n")
    assert list(text_files.read_lines(str(path), "f")) == ["x", "", "y"]
    assert text_files.count_lines(str(path)) == 3
    with pytest.raises(UserError, match="--f=.*missing.txt: no such file"):
        list(text_files.read_lines(str(tmp_path / "missing.txt"), "f"))


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with text_files.atomic_output(str(target), "decode_to_file") as f:
            f.write("partial\n")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with text_files.atomic_output(str(target), "decode_to_file") as f:
        f.write("done\n")
    assert target.read_text() == "done\n"


def test_lines_are_formatted_as_the_problem_formats_them():
    from t2tcli import registry

    problem = registry.problem("qp_is_duplicate")
    model = ReversingModel(max_decode_length=200)
    out = io.StringIO()
    fmt = decode_lines.input_formatter(problem, raw=False)
    decode_lines.run(["How old are you?\tWhat is your age?", ""], out, job(format_input=fmt, inputs_length=200), model)
    fed = char_decode(list(model.batches[0]["inputs"][0]))
    record = {"question1": "How old are you?", "question2": "What is your age?"}
    assert fed == problem.preprocess(record)["inputs"]
    assert fed.startswith("is duplicate: ") and " <SEP> " in fed
    with pytest.raises(UserError, match=r"input:1: expected 2 tab-separated fields \(question1, question2\), got 1"):
        decode_lines.run(["just one question"], io.StringIO(), job(format_input=fmt), ReversingModel())
    raw = decode_lines.input_formatter(problem, raw=True)
    assert raw("is duplicate: a <SEP> b") == "is duplicate: a <SEP> b"
    with pytest.raises(UserError, match="'qp_all' is a mixture: pass --problem=<one of qp_is_duplicate"):
        decode_lines.input_formatter(registry.problem("qp_all"), raw=False)


def test_scan_lengths_sizes_static_shapes_to_the_file():
    lines = ["abc", "", "abcdefg\tx", "a\\nb"]
    assert decode_lines.scan_lengths(lines, job(), scoring=False) == (10, 1)
    assert decode_lines.scan_lengths(["ab\tcdef", "abcd\tx"], job(), scoring=True) == (5, 5)
    assert [decode_lines.bucket(n) for n in (1, 16, 17, 40)] == [16, 16, 32, 48]
    with pytest.raises(UserError, match="input:2: expected 'input<TAB>target'"):
        decode_lines.scan_lengths(["a\tb", "c"], job(), scoring=True)
