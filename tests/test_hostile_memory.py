"""A few bytes of flags or input must not take the machine's memory: t2t-decode and
t2t-datagen run under an address-space limit a little above a normal run's peak, and
each hostile case ends in one line (exit 1) or succeeds within it.

The limit is measured, not guessed: a normal run of the same binary reports its peak
address space, and the hostile runs get that plus a margin far below what the hostile
value would take if it were tried (gigabytes).
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO
from test_faults import assert_fails_in_one_line
from toy_model import toy_model  # noqa: F401  (session fixture)

MIB = 1 << 20
# Reports the process's peak address space to the file named by $VM_PEAK_FILE at exit.
_LAUNCHER = """
import atexit, os, runpy, sys
def report():
    with open(os.environ["VM_PEAK_FILE"], "w") as f:
        f.write(next(l for l in open("/proc/self/status") if l.startswith("VmPeak")).split()[1])
atexit.register(report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_bounded(
    tmp_path: Path,
    binary: str,
    *args: str,
    limit: int | None = None,
    stdin_line_mib: int = 0,
    timeout: float = 600,
) -> tuple[subprocess.CompletedProcess, int]:
    """(the finished process, its peak address space in bytes), run under RLIMIT_AS=`limit`;
    with `stdin_line_mib`, its stdin is one line of that many MiB, written as it is read."""
    peak_file = tmp_path / f"vm-peak-{binary}-{len(list(tmp_path.glob('vm-peak-*')))}"
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        VM_PEAK_FILE=str(peak_file),
        CUDA_VISIBLE_DEVICES="",
        MALLOC_ARENA_MAX="2",
        TF_CPP_MIN_LOG_LEVEL="3",
    )

    def bound() -> None:
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(REPO / "bin" / binary), *args],
        stdin=subprocess.PIPE if stdin_line_mib else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=bound,
    )
    if stdin_line_mib:

        def feed() -> None:
            block = b"word " * (MIB // 5)
            try:
                for _ in range(stdin_line_mib):
                    proc.stdin.write(block)
                proc.stdin.write(b"\nlast line\n")
                proc.stdin.close()
            except OSError:  # the decode ended first
                pass

        threading.Thread(target=feed, daemon=True).start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{binary} {' '.join(args)} ran past {timeout} s:\n{err.decode()[-2000:]}")
    completed = subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())
    peak = int(peak_file.read_text()) * 1024 if peak_file.exists() else 0
    return completed, peak


@pytest.fixture(scope="module")
def decode_bound(toy_model, tmp_path_factory):  # noqa: F811
    """(model_dir, a 2-line input, the address-space limit): a normal decode's peak plus 1 GiB."""
    tmp = tmp_path_factory.mktemp("decode_bound")
    two = tmp / "two.txt"
    two.write_text("a b c\nd e\n")
    normal, peak = run_bounded(tmp, "t2t-decode", f"--model_dir={toy_model['model_dir']}", f"--decode_from_file={two}")
    assert normal.returncode == 0 and peak > 0, normal.stderr[-2000:]
    return toy_model["model_dir"], two, peak + 1024 * MIB


def test_a_billion_batch_size_decodes_two_lines_within_the_bound(decode_bound, tmp_path):
    model_dir, two, limit = decode_bound
    proc, peak = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={two}",
        "--decode_hparams=batch_size=1000000000",
        limit=limit,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["a b c", "d e"]
    assert peak <= limit


@pytest.mark.parametrize(
    "flag, message",
    [
        ("max_decode_length=100000000", "--decode_hparams: max_decode_length=100000000 is more than 16384"),
        ("extra_length=1000000000", "--decode_hparams: extra_length=1000000000 is more than 16384"),
        ("max_input_length=-7", "--decode_hparams: max_input_length=-7 must be >= 0"),
        ("beam_size=1000000000", "--decode_hparams: beam_size=1000000000 is more than 128"),
    ],
)
def test_a_hostile_decode_length_is_one_line_within_the_bound(decode_bound, tmp_path, flag, message):
    model_dir, two, limit = decode_bound
    proc, _ = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={two}",
        f"--decode_hparams={flag}",
        limit=limit,
    )
    assert_fails_in_one_line(proc, message)


def test_an_endless_line_on_stdin_is_cut_as_it_is_read(decode_bound, tmp_path):
    """A line of 1.5 GiB on a pipe: read in pieces, cut, decoded; the next line still comes."""
    model_dir, _, limit = decode_bound
    proc, peak = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        "--decode_from_file=-",
        stdin_line_mib=1536,
        limit=limit,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) == 2
    assert peak <= limit


def small_corpus(directory: Path) -> Path:
    directory.mkdir(parents=True)
    lines = [f"document {i} says {' '.join(['word'] * (3 + i % 11))} and {i * 7} more" for i in range(300)]
    (directory / "plain.txt").write_text("\n".join(lines) + "\n")
    return directory


def gzip_of_one_line(path: Path, mebibytes: int) -> None:
    """Concatenated gzip members of 1 MiB each, one line together: ~1 KB a MiB on disk."""
    member = gzip.compress(b"a" * MIB, compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(mebibytes):
            f.write(member)


@pytest.fixture(scope="module")
def datagen_bound(tmp_path_factory):
    """The address-space limit of span_corruption datagen: a normal run's peak plus 256 MiB."""
    tmp = tmp_path_factory.mktemp("datagen_bound")
    text = small_corpus(tmp / "text")
    args = ("--problem=span_corruption", f"--tmp_dir={text}", f"--data_dir={tmp / 'data'}")
    normal, peak = run_bounded(tmp, "t2t-datagen", *args)
    assert normal.returncode == 0 and peak > 0, normal.stderr[-2000:]
    return peak + 256 * MIB


def test_a_gzip_of_one_gibibyte_line_is_one_line_within_the_bound(datagen_bound, tmp_path):
    text = small_corpus(tmp_path / "text")
    gzip_of_one_line(text / "bomb.txt.gz", 1024)
    assert (text / "bomb.txt.gz").stat().st_size < 2 * MIB
    proc, _ = run_bounded(
        tmp_path,
        "t2t-datagen",
        "--problem=span_corruption",
        f"--tmp_dir={text}",
        f"--data_dir={tmp_path / 'data'}",
        limit=datagen_bound,
    )
    line = assert_fails_in_one_line(proc, f"{text / 'bomb.txt.gz'}: decompresses to more than")
    assert "times its compressed size" in line
    assert not (tmp_path / "data" / "span_corruption.meta.json").exists()


def test_a_long_line_in_a_gzip_is_cut_as_it_is_read_within_the_bound(datagen_bound, tmp_path):
    """120 MiB of one line, under the inflation floor: read in pieces and cut to 100,000 characters."""
    text = small_corpus(tmp_path / "text")
    gzip_of_one_line(text / "long.txt.gz", 120)
    proc, peak = run_bounded(
        tmp_path,
        "t2t-datagen",
        "--problem=span_corruption",
        f"--tmp_dir={text}",
        f"--data_dir={tmp_path / 'data'}",
        limit=datagen_bound,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 of 1 lines were longer than 100000 characters and were cut there" in proc.stderr
    assert peak <= datagen_bound


def test_a_fifo_in_tmp_dir_is_refused_in_one_line(tmp_path):
    text = small_corpus(tmp_path / "text")
    os.mkfifo(text / "f.txt")
    proc, _ = run_bounded(
        tmp_path,
        "t2t-datagen",
        "--problem=span_corruption",
        f"--tmp_dir={text}",
        f"--data_dir={tmp_path / 'data'}",
        timeout=300,
    )
    assert_fails_in_one_line(proc, f"{text / 'f.txt'}: a FIFO, not a regular file")
