"""bin/t2t-datagen as a user runs it: summaries, --usr_dir, one-line errors, a real kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from test_datagen import tree, write_quora

from t2tcli.data.layout import read_meta


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("t2t-datagen: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_toy_problem_end_to_end_prints_summary(binary, tmp_path):
    proc = binary("t2t-datagen", "--problem=reverse_sequence", f"--data_dir={tmp_path}", "--num_shards=3", check=True)
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("reverse_sequence: 21000 rows -> train ")
    assert "skipped 0" in summary and summary.endswith(" rows/s")
    assert len(read_meta(str(tmp_path), "reverse_sequence")["splits"]["train"]["files"]) == 3


def test_usr_dir_problem_from_tsv(binary, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = ["review\tlabel"] + [f"{'Great' if i % 2 else 'Awful'} product number {i}\t{i % 2}" for i in range(120)]
    (raw / "reviews.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    usr_dir = str(REPO / "examples" / "usr_dir")
    proc = binary(
        "t2t-datagen",
        f"--usr_dir={usr_dir}",
        "--problem=review_sentiment",
        f"--tmp_dir={raw}",
        f"--data_dir={tmp_path / 'out'}",
        check=True,
    )
    assert "review_sentiment: 120 rows -> train " in proc.stdout
    meta = read_meta(str(tmp_path / "out"), "review_sentiment")
    assert meta["vocab_file"] == "vocab.reviews.model"
    assert meta["splits"]["train"]["examples"] + meta["splits"]["dev"]["examples"] == 120

    proc = binary("t2t-datagen", f"--usr_dir={usr_dir}", "--problem=review_sentiment", f"--data_dir={tmp_path}")
    assert_one_line_error(proc, "--tmp_dir is required")


BAD_TRAIN_CSV = {
    "missing_column": (b"id,question1,is_duplicate\n1,a,0\n", ["missing column 'question2'"]),
    "empty_file": (b"", ["empty file"]),
    "undecodable": (b"id,question1,question2,is_duplicate\n1,a,b,0\n2,\xff\xfe,b,1\n", ["not valid UTF-8 at line 3"]),
    "too_many_skipped": (
        b"id,question1,question2,is_duplicate\n"
        + b"".join(b"%d,q,%s,0\n" % (i, b"" if i == 3 else b"r") for i in range(50)),
        ["skipped 1 of 50 rows", "at lines 5", "more than 1.00%"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TRAIN_CSV))
def test_bad_csv_is_one_line_error_naming_file(binary, tmp_path, case):
    raw = write_quora(tmp_path / "raw", rows=10)
    content, fragments = BAD_TRAIN_CSV[case]
    (raw / "train.csv").write_bytes(content)
    proc = binary("t2t-datagen", "--problem=qp_is_duplicate", f"--tmp_dir={raw}", f"--data_dir={tmp_path / 'out'}")
    assert_one_line_error(proc, f"{raw / 'train.csv'}: ", *fragments)
    assert not list((tmp_path / "out").glob("qp_is_duplicate*"))


def test_unprepared_tfds_is_one_line_error(binary, tmp_path):
    proc = binary("t2t-datagen", "--problem=glue_qqp", f"--tfds_data_dir={tmp_path}", f"--data_dir={tmp_path / 'o'}")
    assert_one_line_error(proc, "glue/qqp:2.0.0", f"not prepared in {tmp_path}", "tfds build glue/qqp")


@pytest.mark.slow
def test_killed_run_resumes_to_identical_output(tmp_path):
    raw = write_quora(tmp_path / "raw", rows=100_000)
    command = [sys.executable, str(REPO / "bin" / "t2t-datagen"), "--problem=qp_is_duplicate", f"--tmp_dir={raw}"]
    subprocess.run([*command, f"--data_dir={tmp_path / 'clean'}"], check=True, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen([*command, f"--data_dir={killed}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(killed.glob("qp_is_duplicate-train-*")) and time.monotonic() < deadline:
        time.sleep(0.01)  # kill as soon as the first shard is complete: mid-way through writing
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "qp_is_duplicate.meta.json").exists()
    subprocess.run([*command, f"--data_dir={killed}"], check=True, capture_output=True)
    assert tree(killed) == tree(tmp_path / "clean")
    assert not any(name.startswith(".") for name in os.listdir(killed))
