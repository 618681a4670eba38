"""A few bytes of flags or input must not take the machine's memory: t2t-decode and
t2t-datagen run under an address-space limit a little above a normal run's, and each
hostile case ends in one line (exit 1) or succeeds with a peak resident set within a
margin of the normal run's.

The bounds are measured, not guessed: a normal run of the same binary reports its peak
address space and resident set; the hostile runs get those plus margins far below what
the hostile value would take if it were tried (gigabytes, or the whole of a long line).
"""

from __future__ import annotations

import dataclasses
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

from t2tcli.decode import side_by_side

MIB = 1 << 20
# Reports the process's peak address space and resident set (VmPeak, VmHWM: its own,
# not the forking parent's, which ru_maxrss would carry over) to $VM_PEAK_FILE at exit.
_LAUNCHER = """
import atexit, os, runpy, sys
def report():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    with open(os.environ["VM_PEAK_FILE"], "w") as f:
        f.write(status["VmPeak"].split()[0] + " " + status["VmHWM"].split()[0])
atexit.register(report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@dataclasses.dataclass
class Bounded:
    """A finished run: its process, and its peak address space and resident set in bytes."""

    proc: subprocess.CompletedProcess
    vm_peak: int
    rss_peak: int


def run_bounded(
    tmp_path: Path,
    binary: str,
    *args: str,
    limit: int | None = None,
    stdin_line_mib: int = 0,
    timeout: float = 600,
) -> Bounded:
    """bin/`binary` run under RLIMIT_AS=`limit`; with `stdin_line_mib`, its stdin is one
    line of that many MiB, written as it is read."""
    runs = len(list(tmp_path.glob("vm-peak-*")))
    peak_file, out_file, err_file = (tmp_path / f"{kind}-{binary}-{runs}" for kind in ("vm-peak", "out", "err"))
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

    with open(out_file, "wb") as out, open(err_file, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(REPO / "bin" / binary), *args],
            stdin=subprocess.PIPE if stdin_line_mib else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
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
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    _, status, _ = os.wait4(proc.pid, 0)
    timed_out = not timer.is_alive()
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    completed = subprocess.CompletedProcess(
        proc.args, proc.returncode, out_file.read_text(errors="replace"), err_file.read_text(errors="replace")
    )
    if timed_out:
        pytest.fail(f"{binary} {' '.join(args)} ran past {timeout} s:\n{completed.stderr[-2000:]}")
    vm_peak, rss_peak = (int(kib) * 1024 for kib in peak_file.read_text().split()) if peak_file.exists() else (0, 0)
    return Bounded(completed, vm_peak, rss_peak)


@dataclasses.dataclass
class Bounds:
    """What hostile runs are held to: an address-space limit (RLIMIT_AS) and a peak resident set."""

    limit: int
    rss: int

    def hold(self, run: Bounded) -> None:
        assert run.vm_peak <= self.limit
        assert run.rss_peak <= self.rss, f"peak RSS {run.rss_peak >> 20} MiB, bound {self.rss >> 20} MiB"


def bounds_of(normal: Bounded, rss_margin: int) -> Bounds:
    assert normal.proc.returncode == 0 and normal.vm_peak > 0, normal.proc.stderr[-2000:]
    return Bounds(limit=normal.vm_peak + 1024 * MIB, rss=normal.rss_peak + rss_margin)


@pytest.fixture(scope="module")
def decode_bound(toy_model, tmp_path_factory):  # noqa: F811
    """(model_dir, a 2-line input, the Bounds of a normal decode of it)."""
    tmp = tmp_path_factory.mktemp("decode_bound")
    two = tmp / "two.txt"
    two.write_text("a b c\nd e\n")
    normal = run_bounded(tmp, "t2t-decode", f"--model_dir={toy_model['model_dir']}", f"--decode_from_file={two}")
    return toy_model["model_dir"], two, bounds_of(normal, 256 * MIB)


def test_a_billion_batch_size_decodes_two_lines_within_the_bound(decode_bound, tmp_path):
    model_dir, two, bounds = decode_bound
    run = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={two}",
        "--decode_hparams=batch_size=1000000000",
        limit=bounds.limit,
    )
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    assert run.proc.stdout.splitlines() == ["a b c", "d e"]
    bounds.hold(run)


@pytest.mark.parametrize(
    "flag, message",
    [
        ("max_decode_length=100000000", "--decode_hparams: max_decode_length=100000000 is more than 16384"),
        ("extra_length=1000000000", "--decode_hparams: extra_length=1000000000 is more than 16384"),
        ("max_input_length=-7", "--decode_hparams: max_input_length=-7 must be >= 0"),
    ],
)
def test_a_hostile_decode_length_is_one_line_within_the_bound(decode_bound, tmp_path, flag, message):
    model_dir, two, bounds = decode_bound
    run = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={two}",
        f"--decode_hparams={flag}",
        limit=bounds.limit,
    )
    assert_fails_in_one_line(run.proc, message)
    bounds.hold(run)


def test_an_endless_line_on_stdin_is_cut_as_it_is_read(decode_bound, tmp_path):
    """A line of 1 GiB on a pipe: read in pieces, cut, decoded; the next line still comes."""
    model_dir, _, bounds = decode_bound
    run = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        "--decode_from_file=-",
        stdin_line_mib=1024,
        limit=bounds.limit,
    )
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    assert len(run.proc.stdout.splitlines()) == 2
    bounds.hold(run)


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
def datagen_bound(tmp_path_factory) -> Bounds:
    """The Bounds of span_corruption datagen over a small corpus."""
    tmp = tmp_path_factory.mktemp("datagen_bound")
    text = small_corpus(tmp / "text")
    args = ("--problem=span_corruption", f"--tmp_dir={text}", f"--data_dir={tmp / 'data'}")
    return bounds_of(run_bounded(tmp, "t2t-datagen", *args), 128 * MIB)


def datagen(tmp_path: Path, text: Path, bounds: Bounds | None = None, timeout: float = 600) -> Bounded:
    args = ("--problem=span_corruption", f"--tmp_dir={text}", f"--data_dir={tmp_path / 'data'}")
    return run_bounded(tmp_path, "t2t-datagen", *args, limit=bounds.limit if bounds else None, timeout=timeout)


def test_a_gzip_of_one_gibibyte_line_is_one_line_within_the_bound(datagen_bound, tmp_path):
    text = small_corpus(tmp_path / "text")
    gzip_of_one_line(text / "bomb.txt.gz", 1024)
    assert (text / "bomb.txt.gz").stat().st_size < 2 * MIB
    run = datagen(tmp_path, text, datagen_bound)
    line = assert_fails_in_one_line(run.proc, f"{text / 'bomb.txt.gz'}: decompresses to more than")
    assert "times its compressed size" in line
    assert not (tmp_path / "data" / "span_corruption.meta.json").exists()
    datagen_bound.hold(run)


def test_a_long_line_in_a_gzip_is_cut_as_it_is_read_within_the_bound(datagen_bound, tmp_path):
    """200 MiB of one line, under the inflation floor: read in pieces and cut to 100,000 characters."""
    text = small_corpus(tmp_path / "text")
    gzip_of_one_line(text / "long.txt.gz", 200)
    run = datagen(tmp_path, text, datagen_bound)
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    assert "1 of 1 lines were longer than 100000 characters and were cut there" in run.proc.stderr
    datagen_bound.hold(run)


def test_a_fifo_in_tmp_dir_is_refused_in_one_line(tmp_path):
    text = small_corpus(tmp_path / "text")
    os.mkfifo(text / "f.txt")
    run = datagen(tmp_path, text, timeout=300)
    assert_fails_in_one_line(run.proc, f"{text / 'f.txt'}: a FIFO, not a regular file")


def test_a_batch_past_the_memory_there_is_is_one_line(decode_bound, tmp_path):
    """Each bound sane alone, their product not: 64 lines x 128 beams x 16,384 steps."""
    model_dir, _, bounds = decode_bound
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"a b {i % 10}\n" for i in range(64)))
    run = run_bounded(
        tmp_path,
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={lines}",
        "--decode_hparams=beam_size=128,alpha=0.6,max_decode_length=16384,batch_size=64",
        limit=bounds.limit,
    )
    # beam_size > 1 runs on the fast engine: on a CPU, a batch on each core, two at least.
    batches = max(2, side_by_side.workers())
    assert_fails_in_one_line(
        run.proc, f"--decode_hparams: {batches} batches in flight of 64 lines x beam_size=128", "MiB of attention"
    )
    bounds.hold(run)
