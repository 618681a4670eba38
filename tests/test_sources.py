"""Raw readers: messy CSV, TSV, JSONL, and their one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2tcli.errors import UserError
from t2tcli.sources import CsvSource, JsonlSource, ReadOptions, TsvSource, raw_dir


def read_all(source, chunk_rows: int = 1000):
    chunks = list(source.chunks(ReadOptions(chunk_rows=chunk_rows)))
    frame = pd.concat([c.frame for c in chunks], ignore_index=True)
    lines = [int(n) for c in chunks for n in c.lines]
    keys = [k for c in chunks for k in c.keys.tolist()]
    return frame, lines, keys, len(chunks)


MESSY = (
    "\ufeffid,question1,question2,is_duplicate\r\n"
    '1,"What is 1,000 + 1?","Is it ""1001""?",0\r\n'
    '2,"A question\r\nover two lines",plain,1\r\n'
    "3,,empty first,0\r\n"
    "4,ñandú,ü,1\r\n"
)


def test_csv_quotes_commas_newlines_bom_crlf(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(MESSY.encode("utf-8"))
    source = CsvSource(str(path), columns=("id", "question1", "question2", "is_duplicate"), key="id")
    frame, lines, keys, _ = read_all(source)
    assert frame["question1"].tolist() == ["What is 1,000 + 1?", "A question\r\nover two lines", "", "ñandú"]
    assert frame["question2"].tolist() == ['Is it "1001"?', "plain", "empty first", "ü"]
    # Line numbers count the header and the newline inside the quoted field of record 2.
    assert lines == [2, 3, 5, 6]
    assert keys == ["1", "2", "3", "4"]


def test_csv_chunks_bound_memory_and_keep_order(tmp_path):
    path = tmp_path / "big.csv"
    pd.DataFrame({"a": [f"row {i}" for i in range(25)], "b": range(25)}).to_csv(path, index=False)
    frame, lines, keys, count = read_all(CsvSource(str(path), columns=("a",)), chunk_rows=10)
    assert count == 3
    assert frame["a"].tolist() == [f"row {i}" for i in range(25)]
    assert lines == list(range(2, 27)) == keys  # no key column: the line is the key


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "empty file"),
        (b"id,question1\n1,a\n", "missing column 'question2' (header has: id, question1)"),
        (b"id,question1,question2\n", "no data rows"),
        (b"id,question1,question2\n1,ok,ok\n2,caf\xe9,x\n", "not valid UTF-8 at line 3, byte 6 (0xe9)"),
        (b"id,question1,question2\n1,a,b\n2,a,b,c\n", "malformed CSV: line 3: expected 3 fields, saw 4"),
    ],
)
def test_csv_bad_input_is_one_line_naming_file(tmp_path, content, expected):
    path = tmp_path / "train.csv"
    path.write_bytes(content)
    with pytest.raises(UserError) as info:
        read_all(CsvSource(str(path), columns=("id", "question1", "question2")))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_missing_file_and_missing_tmp_dir(tmp_path):
    with pytest.raises(UserError, match="nope.csv: no such file"):
        read_all(CsvSource(str(tmp_path / "nope.csv"), columns=("a",)))
    with pytest.raises(UserError, match="--tmp_dir is required"):
        raw_dir(None)
    assert raw_dir(None, tmp_path) == str(tmp_path)


def test_tsv_has_no_quoting(tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text('review\tlabel\n"great", said she\tpos\nbad\tneg\n', encoding="utf-8")
    frame, lines, _, _ = read_all(TsvSource(str(path), columns=("review", "label")))
    assert frame.values.tolist() == [['"great", said she', "pos"], ["bad", "neg"]]
    assert lines == [2, 3]


def test_jsonl_keeps_newlines_and_reports_bad_lines(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [{"src": "line one\nline two", "tgt": "x", "extra": 1}, {"src": "b", "tgt": None}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    frame, lines, _, _ = read_all(JsonlSource(str(path), columns=("src", "tgt")))
    assert frame.values.tolist() == [["line one\nline two", "x"], ["b", ""]]
    assert lines == [1, 2]

    path.write_text('{"src": "a", "tgt": "b"}\n{"src": "a",\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"data.jsonl: line 2: invalid JSON"):
        read_all(JsonlSource(str(path), columns=("src", "tgt")))
    path.write_text('{"src": "a"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"data.jsonl: line 1: missing field 'tgt'"):
        read_all(JsonlSource(str(path), columns=("src", "tgt")))
