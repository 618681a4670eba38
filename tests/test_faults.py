"""Bad input and interrupted runs, binary by binary: one line, exit 1, nothing broken.

Each fault asserts the exit code, that the error is the last line on stderr and the
only one saying "error:", that no traceback is printed, and what the output
directories hold afterwards: no output that looks complete, and an existing model_dir
unchanged, file for file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_binary
from toy_model import toy_model  # noqa: F401  (session fixture)


def assert_fails_in_one_line(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1], proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` with a hash of its bytes."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(directory))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def model_copy(toy_model, tmp_path):  # noqa: F811
    """A private copy of the trained toy model_dir, free to damage."""
    model_dir = tmp_path / "model"
    shutil.copytree(toy_model["model_dir"], model_dir)
    return model_dir, Path(toy_model["data_dir"])


def _data_shard(data_dir: Path, split: str = "train") -> Path:
    return sorted(data_dir.glob(f"copy_sequence-{split}-*"))[0]


# --- t2t-datagen -------------------------------------------------------------------------


def test_datagen_output_directory_faults(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        (str(a_file), "exists and is not a directory"),
        (str(a_file / "below"), "is a file, so the directory cannot be made"),
        ("/proc/t2t-cannot-be-made", "/proc/t2t-cannot-be-made"),
    ]
    for data_dir, message in cases:
        proc = run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data_dir}")
        assert_fails_in_one_line(proc, message)
    assert a_file.read_text() == "x"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"id,question1,question2,is_duplicate\n1,a\x00b,c,0\n", "line 2: a NUL byte"),
        (
            b'id,question1,question2,is_duplicate\n1,"a\nb",c,0\n2,"never ends,c,1\n3,x,y,0\n',
            "line 4: a quoted field starts",
        ),
        (b"id,question1,question2,is_duplicate\n1,a,b,0\n2,\xff\xfe,c,1\n", "not valid UTF-8 at line 3"),
        (b"id,question1,question2,is_duplicate\n1,a,b,maybe\n", "is_duplicate must be one of 0, 1, got 'maybe'"),
    ],
)
def test_datagen_bad_csv_names_the_line_and_leaves_nothing(tmp_path, content, message):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.csv").write_bytes(content)
    out = tmp_path / "out"
    proc = run_binary("t2t-datagen", "--problem=qp_is_duplicate", f"--tmp_dir={raw}", f"--data_dir={out}")
    assert_fails_in_one_line(proc, str(raw / "train.csv"), message)
    assert not list(out.glob("*.meta.json")) and not list(out.glob(".*.work")), sorted(os.listdir(out))


def test_quora_needs_no_test_csv(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    shutil.copy(REPO / "problems" / "data" / "quora" / "train.csv", raw / "train.csv")
    proc = run_binary("t2t-datagen", "--problem=qp_is_duplicate", f"--tmp_dir={raw}", f"--data_dir={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stderr
    assert "test" not in proc.stdout.split("->")[1]


# --- t2t-train ---------------------------------------------------------------------------


def _train(model_dir: Path, data_dir: Path, steps: int, *extra: str) -> subprocess.CompletedProcess:
    return run_binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        f"--train_steps={steps}",
        *extra,
    )


def test_train_on_a_truncated_shard_names_it_and_writes_nothing(toy_model, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    shutil.copytree(toy_model["data_dir"], data)
    shard = _data_shard(data)
    os.truncate(shard, shard.stat().st_size // 2)
    proc = _train(tmp_path / "model", data, 5)
    assert_fails_in_one_line(proc, str(shard), "truncated")
    assert not (tmp_path / "model").exists()
    proc = run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data}")
    assert proc.returncode == 0 and "rows ->" in proc.stdout, "datagen sees the damage and regenerates"


def test_resuming_with_another_vocabulary_is_refused_and_changes_nothing(model_copy, tmp_path):
    model_dir, data_dir = model_copy
    other = tmp_path / "other"
    shutil.copytree(data_dir, other)
    from t2tcli.data.vocabulary import vocab

    proto = (other / "vocab.toy.model").read_bytes()
    same_size = vocab.with_sentinels(vocab.without_sentinels(proto)[0], 0)
    # Another model of the same size: one piece renamed.
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto.FromString(same_size)
    model.pieces[10].piece = "\u2581zzz"
    (other / "vocab.toy.model").write_bytes(model.SerializeToString())
    before = snapshot(model_dir)
    proc = _train(model_dir, other, 500)
    assert_fails_in_one_line(proc, "was trained with the vocabulary", "differs from it")
    assert snapshot(model_dir) == before


def test_train_into_a_file_or_a_directory_it_cannot_make(toy_model, tmp_path):  # noqa: F811
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert_fails_in_one_line(_train(a_file, Path(toy_model["data_dir"]), 5), "exists and is not a directory")
    assert_fails_in_one_line(_train(Path("/proc/t2t-no-model"), Path(toy_model["data_dir"]), 5), "/proc/t2t-no-model")


# --- t2t-eval, t2t-decode, t2t-export ----------------------------------------------------


def _damage_checkpoint(model_dir: Path) -> None:
    for data in model_dir.glob("model.ckpt-*.data-*"):
        if data.stat().st_size > 1000:
            os.truncate(data, data.stat().st_size // 2)


@pytest.mark.slow
def test_a_damaged_checkpoint_is_one_line_in_every_binary_and_leaves_no_output(model_copy, tmp_path):
    model_dir, data_dir = model_copy
    _damage_checkpoint(model_dir)
    lines = tmp_path / "in.txt"
    lines.write_text("a b c\n")
    out = tmp_path / "out.txt"
    proc = run_binary(
        "t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}", f"--decode_to_file={out}"
    )
    error = assert_fails_in_one_line(proc, "cannot be read", "truncated or damaged")
    # The path the user's model_dir holds, not the private one it was read at.
    assert f"checkpoint {model_dir}/model.ckpt-" in error and "/.reading." not in error, error
    assert not out.exists() and not list(tmp_path.glob(".out.txt.tmp*"))
    proc = run_binary("t2t-eval", f"--model_dir={model_dir}", "--max_examples=8")
    assert_fails_in_one_line(proc, "cannot be read")
    assert not (model_dir / "eval_dev").exists()
    export_dir = tmp_path / "export"
    proc = run_binary("t2t-export", f"--model_dir={model_dir}", f"--export_dir={export_dir}")
    assert_fails_in_one_line(proc, "cannot be read")
    assert not export_dir.exists() or os.listdir(export_dir) == []
    averaged = tmp_path / "averaged"
    proc = run_binary("t2t-avg-checkpoints", f"--model_dir={model_dir}", "--num_last=2", f"--output_dir={averaged}")
    error = assert_fails_in_one_line(proc, "is truncated")
    assert f"checkpoint {model_dir}/model.ckpt-" in error and "/.reading." not in error, error
    assert not averaged.exists()
    # Resuming from it, or fine-tuning from it, is refused before anything is written.
    before = snapshot(model_dir)
    assert_fails_in_one_line(_train(model_dir, data_dir, 10_000), "is truncated")
    assert snapshot(model_dir) == before
    fine_tuned = tmp_path / "fine_tuned"
    assert_fails_in_one_line(_train(fine_tuned, data_dir, 5, f"--init_checkpoint={model_dir}"), "is truncated")
    assert not fine_tuned.exists()


def test_evaluating_a_split_that_cannot_be_scored(model_copy, tmp_path):
    model_dir, data_dir = model_copy
    # copy_sequence's test split has targets; a problem without a test split, and an unlabeled one, do not.
    from test_datagen import run

    run("qp_is_duplicate", tmp_path / "qp")
    proc = run_binary(
        "t2t-eval",
        f"--model_dir={model_dir}",
        "--split=test",
        "--problem=qp_is_duplicate",
        f"--data_dir={tmp_path / 'qp'}",
    )
    assert_fails_in_one_line(proc, "'test' split of problem 'qp_is_duplicate' is unlabeled")
    run("translate_en_es", tmp_path / "tr")
    proc = run_binary(
        "t2t-eval",
        f"--model_dir={model_dir}",
        "--split=test",
        "--problem=translate_en_es",
        f"--data_dir={tmp_path / 'tr'}",
    )
    assert_fails_in_one_line(proc, "problem 'translate_en_es' has no 'test' split (its source defines dev, train)")
    assert not (model_dir / "eval_test").exists()


def test_a_corrupt_hparams_file_is_named(model_copy, tmp_path):
    model_dir, _ = model_copy
    (model_dir / "hparams.json").write_text("{not json")
    lines = tmp_path / "in.txt"
    lines.write_text("a\n")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}")
    assert_fails_in_one_line(proc, f"{model_dir / 'hparams.json'}: unreadable hparams")


def test_decode_input_and_output_faults(toy_model, tmp_path):  # noqa: F811
    model_dir = toy_model["model_dir"]
    bad = tmp_path / "in.txt"
    bad.write_bytes(b"a b\n" * 499 + b"c \xff d\n" + b"e\n")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={bad}")
    assert_fails_in_one_line(proc, f"{bad}:500: not UTF-8")
    good = tmp_path / "good.txt"
    good.write_text("a b\n")
    proc = run_binary(
        "t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={good}", f"--decode_to_file={tmp_path}"
    )
    assert_fails_in_one_line(proc, "is a directory, expected a file name")
    assert "decode engine" not in proc.stderr, "refused before the model was loaded"
    proc = run_binary(
        "t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={good}", "--decode_to_file=/proc/t2t/out.txt"
    )
    assert_fails_in_one_line(proc, "directory /proc/t2t does not exist")


# --- kill -9 at work ---------------------------------------------------------------------


def _kill_when(args: list[str], ready, timeout: float = 300) -> None:
    """Starts a binary, SIGKILLs it once `ready()` is true (or it has run `timeout` s)."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


# Runs a binary with some of its methods wrapped: after each call, the process SIGKILLs
# itself if the files named by the glob are non-empty on disk. A poll from outside can
# miss a stage that lasts milliseconds on a fast machine; this kill cannot.
_KILL_SELF_AFTER = """
import glob, importlib, os, runpy, signal, sys
script, pattern, targets = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
def wrap(owner, name):
    inner = getattr(owner, name)
    def wrapped(*args, **kwargs):
        result = inner(*args, **kwargs)
        if any(os.path.getsize(p) > 0 for p in glob.glob(pattern)):
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(owner, name, wrapped)
for target in targets:
    module, cls, method = target.split(":")
    wrap(getattr(importlib.import_module(module), cls), method)
sys.argv = [script, *sys.argv[4:]]
runpy.run_path(script, run_name="__main__")
"""


def _kill_self_after(binary: str, pattern: str, targets: list[str], *args: str) -> int:
    """Runs `binary`; it kills itself once a call to one of `targets` leaves `pattern`'s files non-empty."""
    script = str(REPO / "bin" / binary)
    command = [sys.executable, "-c", _KILL_SELF_AFTER, script, pattern, ",".join(targets), *args]
    return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600).returncode


@pytest.mark.slow
def test_killed_datagen_reruns_to_the_same_bytes(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert run_binary("t2t-datagen", "--problem=qp_all", f"--data_dir={whole}").returncode == 0
    complete = sorted(p.name for p in whole.glob("*.meta.json"))

    # Pass 1 writes the spool before the vocabulary exists; pass 2 appends encoded rows to
    # the shards' buckets (closing them flushes what is buffered), and writes shards from
    # them. The third run finds the vocabulary written and goes straight to the buckets.
    spooling = (".*.work/*.spool", ["t2tcli.data.datagen.spool:Spool:append", "t2tcli.data.datagen.spool:Spool:close"])
    buckets = ["t2tcli.data.datagen.shards:SplitBuckets:add", "t2tcli.data.datagen.shards:SplitBuckets:close"]
    for pattern, targets in (spooling, (".*.work/*.bucket*", buckets), (".*.work/*.bucket*", buckets)):
        args = ["--problem=qp_all", f"--data_dir={killed}"]
        assert _kill_self_after("t2t-datagen", str(killed / pattern), targets, *args) == -signal.SIGKILL
        assert any(p.stat().st_size > 0 for p in killed.glob(pattern)), f"killed while it wrote {pattern}"
        assert sorted(p.name for p in killed.glob("*.meta.json")) != complete, "the kill interrupted the run"
    assert run_binary("t2t-datagen", "--problem=qp_all", f"--data_dir={killed}").returncode == 0
    assert snapshot(killed) == snapshot(whole)


@pytest.mark.slow
def test_killed_decode_leaves_no_output_and_reruns_to_the_same_lines(toy_model, tmp_path):  # noqa: F811
    lines = tmp_path / "in.txt"
    lines.write_text("".join(f"{'a b c d e f g h i j'[: 2 * (i % 9) + 1]}\n" for i in range(3000)))
    out = tmp_path / "out.txt"
    args = [f"--model_dir={toy_model['model_dir']}", f"--decode_from_file={lines}", f"--decode_to_file={out}"]
    _kill_when([str(REPO / "bin" / "t2t-decode"), *args], lambda: bool(list(tmp_path.glob(".out.txt.tmp*"))))
    assert not out.exists() and list(tmp_path.glob(".out.txt.tmp*")), "only the temporary file"
    assert run_binary("t2t-decode", *args).returncode == 0
    assert not list(tmp_path.glob(".out.txt.tmp*")), "the killed run's temporary file is cleared"
    whole = tmp_path / "whole.txt"
    assert run_binary("t2t-decode", *args[:2], f"--decode_to_file={whole}").returncode == 0
    assert out.read_text() == whole.read_text() and len(out.read_text().splitlines()) == 3000


@pytest.mark.slow
def test_killed_eval_reruns_to_one_record_per_checkpoint(model_copy):
    model_dir, _ = model_copy
    args = [f"--model_dir={model_dir}", "--checkpoint=all", "--max_examples=300"]
    results = model_dir / "eval_dev" / "metrics.jsonl"
    _kill_when([str(REPO / "bin" / "t2t-eval"), *args], lambda: results.exists())
    assert run_binary("t2t-eval", *args).returncode == 0
    assert run_binary("t2t-eval", *args).returncode == 0, "evaluated again: records replaced, not added"
    records = [line for line in results.read_text().splitlines() if line.strip()]
    steps = [json.loads(r)["step"] for r in records]
    assert sorted(steps) == sorted(set(steps)) and len(steps) >= 2


@pytest.mark.slow
def test_killed_training_resumes_to_the_same_step_with_a_usable_model(toy_model, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    args = [
        str(REPO / "bin" / "t2t-train"),
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={toy_model['data_dir']}",
        f"--model_dir={model_dir}",
        "--train_steps=60",
        "--save_checkpoints_steps=20",
    ]
    state = model_dir / "checkpoint"

    def saved_step_20() -> bool:
        # The state file names a checkpoint only once all its files are written: killed
        # between its .index and that line, a run resumes from the one before (a CI run
        # killed there found none and rightly started over).
        return state.exists() and '"model.ckpt-20"' in state.read_text()

    _kill_when(args, saved_step_20)
    proc = _train(model_dir, Path(toy_model["data_dir"]), 60, "--save_checkpoints_steps=20")
    assert proc.returncode == 0 and "resuming" in proc.stderr, proc.stderr[-2000:]
    from t2tcli.compat import tf

    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-60")
    lines = tmp_path / "in.txt"
    lines.write_text("a b\n")
    assert run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}").returncode == 0
