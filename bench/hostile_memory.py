#!/usr/bin/env python3
"""Peak memory of t2t-decode and t2t-datagen on hostile flags and inputs, beside a normal run.

Each case runs the binary as a user would, in a process of its own, and prints its peak
resident set (its own VmHWM at exit), its exit status and the last
line it wrote to stderr. What should hold: every hostile case ends in one line or
succeeds, and its peak is that of the normal run, whatever the flag's value or the
compressed input's ratio.

Decode cases, on a tiny copy_sequence model (trained a step, or --model_dir): a 2-line
input with batch_size=1000000000, max_decode_length=100000000, extra_length=1000000000,
max_input_length=-7; 64 lines at beam_size=128 and max_decode_length=16384 (each bound
sane alone, their product past the memory there is, when the machine has less than
the caches need); a line of --long_line_mb MB in a file and one of --stdin_line_mb MB
on stdin. Datagen cases, span_corruption over a small corpus in --tmp_dir: with a
line of --long_line_mb MB, with a gzip file of a few hundred KB holding one line of
--gzip_line_mb MB, and with a FIFO named f.txt.

    python bench/hostile_memory.py
    python bench/hostile_memory.py --model_dir=runs/copy --stdin_line_mb=4096
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cpu_kind() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# Runs a binary and writes its own peak resident set (VmHWM, in KiB) to $PEAK_FILE at exit:
# ru_maxrss would carry over the peak of the process that forked it.
_LAUNCHER = """
import atexit, os, runpy, sys
def report():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM"))
    open(os.environ["PEAK_FILE"], "w").write(line.split()[1])
atexit.register(report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(binary: str, *args: str, stdin_bytes: tuple[bytes, int] | None = None, timeout: float = 900) -> dict:
    """Runs bin/<binary>; {"rc", "peak_mb", "last"}. `stdin_bytes` = (block, times) is
    written to its stdin, then a newline."""
    peak_file = tempfile.NamedTemporaryFile(delete=False)
    peak_file.close()
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3", PEAK_FILE=peak_file.name)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(REPO / "bin" / binary), *args],
            stdin=subprocess.PIPE if stdin_bytes else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        if stdin_bytes:

            def feed() -> None:
                block, times = stdin_bytes
                try:
                    for _ in range(times):
                        proc.stdin.write(block)
                    proc.stdin.write(b"\n")
                    proc.stdin.close()
                except (BrokenPipeError, OSError):
                    pass

            threading.Thread(target=feed, daemon=True).start()
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, _ = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = [line for line in err.read().decode("utf-8", "replace").splitlines() if line.strip()]
    last = re.sub(r"^\d\d:\d\d:\d\d [IWE] ", "", lines[-1]) if lines else ""
    peak = Path(peak_file.name).read_text().strip()
    os.unlink(peak_file.name)
    return {"rc": proc.returncode, "peak_mb": int(peak or 0) / 1024, "last": last[:110]}


def model_dir(base: Path) -> str:
    data, model = base / "data", base / "model"
    for binary, args in (
        ("t2t-datagen", ["--problem=copy_sequence", f"--data_dir={data}"]),
        (
            "t2t-train",
            [
                "--problem=copy_sequence",
                "--hparams_set=mtf_transformer_tiny",
                f"--data_dir={data}",
                f"--model_dir={model}",
                "--train_steps=1",
            ],
        ),
    ):
        outcome = run(binary, *args)
        if outcome["rc"]:
            raise SystemExit(f"{binary} failed: {outcome['last']}")
    return str(model)


def corpus(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly box".split()
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(5 + i % 9)) for i in range(400)]
    (directory / "plain.txt").write_text("\n".join(lines) + "\n")


def long_line(path: Path, megabytes: int, after: bytes = b"\n") -> None:
    """One line of `megabytes` MB, written a MB at a time (this process stays small)."""
    with open(path, "wb") as f:
        for _ in range(megabytes):
            f.write(b"a " * (1 << 19))
        f.write(after)


def one_line_gzip(path: Path, mebibytes: int) -> None:
    member = gzip.compress(b"a" * (1 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(mebibytes):
            f.write(member)


def report(kind: str, name: str, outcome: dict) -> None:
    peak, rc, last = outcome["peak_mb"], outcome["rc"], outcome["last"]
    print(f"{kind:8} {name:34} peak {peak:8.0f} MB  exit {rc:3}  {last}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", help="a trained model_dir to decode with (default: a tiny one made here)")
    parser.add_argument("--long_line_mb", type=int, default=200)
    parser.add_argument("--stdin_line_mb", type=int, default=1024)
    parser.add_argument("--gzip_line_mb", type=int, default=1024)
    parser.add_argument("--skip", default="", help="comma-separated: decode, datagen")
    args = parser.parse_args()
    print(f"CPU: {cpu_kind()}; {os.cpu_count()} cores; peak = the process's own VmHWM", flush=True)
    with tempfile.TemporaryDirectory(prefix="hostile-memory.") as tmp:
        base = Path(tmp)
        if "decode" not in args.skip:
            model = args.model_dir or model_dir(base / "toy")
            two = base / "two.txt"
            two.write_text("a b c\nd e\n")
            long_file = base / "long.txt"
            long_line(long_file, args.long_line_mb, b"\nb c\n")
            lines = base / "lines.txt"
            lines.write_text("".join(f"a b {i % 10}\n" for i in range(64)))
            decode = ["--raw_inputs", f"--model_dir={model}"]
            run("t2t-decode", *decode, f"--decode_from_file={two}")  # a first decode may convert the model
            for name, flags, extra in (
                ("normal (2 lines)", "", {}),
                ("normal (64 lines)", "", {"file": lines}),
                ("batch_size=1000000000", "batch_size=1000000000", {}),
                ("max_decode_length=100000000", "max_decode_length=100000000", {}),
                ("extra_length=1000000000", "extra_length=1000000000", {}),
                ("max_input_length=-7", "max_input_length=-7", {}),
                ("64 lines, beam 128, length 16384", "beam_size=128,max_decode_length=16384", {"file": lines}),
                (f"a {args.long_line_mb} MB line (file)", "", {"file": long_file}),
                (f"a {args.stdin_line_mb} MB line (stdin)", "", {"stdin": args.stdin_line_mb}),
            ):
                source = str(extra.get("file", two)) if "stdin" not in extra else "-"
                stdin = (b"a " * (1 << 19), extra["stdin"]) if "stdin" in extra else None
                flag_args = (f"--decode_from_file={source}", f"--decode_hparams={flags}")
                outcome = run("t2t-decode", *decode, *flag_args, stdin_bytes=stdin)
                report("decode", name, outcome)
        if "datagen" not in args.skip:
            cases = {
                "normal (400 lines)": lambda d: None,
                f"a {args.long_line_mb} MB line": lambda d: long_line(d / "long.txt", args.long_line_mb),
                f"{args.gzip_line_mb} MB line in a gzip": lambda d: one_line_gzip(d / "bomb.txt.gz", args.gzip_line_mb),
                "a FIFO f.txt": lambda d: os.mkfifo(d / "f.txt"),
            }
            for i, (name, plant) in enumerate(cases.items()):
                text = base / f"text{i}"
                corpus(text)
                plant(text)
                data = base / f"data{i}"
                outcome = run("t2t-datagen", "--problem=span_corruption", f"--tmp_dir={text}", f"--data_dir={data}")
                if name.endswith("gzip"):
                    name += f" ({(text / 'bomb.txt.gz').stat().st_size >> 10} KB)"
                report("datagen", name, outcome)


if __name__ == "__main__":
    main()
