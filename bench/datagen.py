"""Benchmark: t2t-datagen qp_is_duplicate against the common hand-written loop.

    python bench/datagen.py                 # 400k-row comparison, then RSS at 100k and 1M rows
    python bench/datagen.py --rows 50000 --rss_rows 20000,100000   # quicker

Each run is a fresh process, timed by wall clock, its peak RSS read from wait4().
The baseline does what a typical script does: pandas read_csv of the whole file,
`iterrows`, the same normalisation, SentencePiece `encode` per row and one
`tf.train.Example` per row through `tf.io.TFRecordWriter`. It reuses the vocabulary
that t2t-datagen trained, so it is timed without vocabulary training; t2t-datagen is
timed both end to end and with the vocabulary already present.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORDS = (
    "what how why when where which who is are can do does the a an best way to learn python java cook rice "
    "fast good book read write money make online india job career life love world war history science "
    "math physics movie music song game play start business company phone app google facebook quora"
).split()

BASELINE = r"""
import hashlib, sys
import pandas as pd
import sentencepiece as spm
import tensorflow as tf

csv_path, vocab_path, out_dir = sys.argv[1:4]
sp = spm.SentencePieceProcessor(model_file=vocab_path)


def norm(text):
    return " ".join(text.replace('"', "").lower().split())


def feature(ids):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=ids))


frame = pd.read_csv(csv_path, keep_default_na=False, dtype=str)
writers = {s: tf.io.TFRecordWriter(f"{out_dir}/{s}.tfrecord") for s in ("train", "dev")}
for _, row in frame.iterrows():
    if not row["question1"].strip() or not row["question2"].strip():
        continue
    inputs = f"is duplicate: {norm(row['question1'])} <SEP> {norm(row['question2'])}"
    split = "dev" if int(hashlib.md5(row["id"].encode()).hexdigest(), 16) % 10 == 0 else "train"
    example = tf.train.Example(features=tf.train.Features(feature={
        "inputs": feature(sp.encode(inputs) + [1]),
        "targets": feature(sp.encode(row["is_duplicate"]) + [1]),
    }))
    writers[split].write(example.SerializeToString())
for w in writers.values():
    w.close()
"""


def write_quora_csv(path: Path, rows: int, seed: int = 7) -> None:
    """Kaggle-format train.csv with commas, quotes, newlines and a few empty question2."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        for i in range(rows):
            q1 = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 18))) + "?"
            q2 = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 18))) + "?"
            if i % 97 == 0:
                q1 = f'What does "{q1[:-1]}" mean, really?'
            if i % 1009 == 0:
                q2 = q2.replace(" ", "\n", 1)
            if i % 5003 == 0:
                q2 = ""
            writer.writerow([i, 2 * i, 2 * i + 1, q1, q2, rng.randint(0, 1)])


def timed(command: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one child process."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def datagen(raw: Path, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        str(REPO / "bin" / "t2t-datagen"),
        "--problem=qp_is_duplicate",
        f"--tmp_dir={raw}",
        f"--data_dir={data_dir}",
    ]


def drop_outputs_keep_vocab(data_dir: Path) -> None:
    for path in data_dir.glob("qp_is_duplicate*"):
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rss_rows", default="100000,1000000", help="comma-separated row counts for the RSS check")
    parser.add_argument("--quick", action="store_true", help="smoke run: 40k rows, RSS at 10k and 100k")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rss_rows = 40_000, "10000,100000"

    work = Path(tempfile.mkdtemp(prefix="t2t_bench_"))
    table: list[tuple[str, int, float, float, float]] = []
    try:
        raw = work / "raw"
        raw.mkdir()
        (raw / "test.csv").write_text("test_id,question1,question2\n0,what?,why?\n", encoding="utf-8")
        write_quora_csv(raw / "train.csv", args.rows)
        out = work / "out"
        seconds, cpu, rss = timed(datagen(raw, out))
        table.append(("t2t-datagen, end to end (trains vocab)", args.rows, seconds, cpu, rss))
        drop_outputs_keep_vocab(out)
        seconds, cpu, rss = timed(datagen(raw, out))
        table.append(("t2t-datagen, vocab present", args.rows, seconds, cpu, rss))
        baseline_dir = work / "baseline"
        baseline_dir.mkdir()
        script = work / "baseline.py"
        script.write_text(BASELINE, encoding="utf-8")
        command = [sys.executable, str(script), str(raw / "train.csv"), str(out / "vocab.qp.model"), str(baseline_dir)]
        seconds, cpu, rss = timed(command)
        table.append(("baseline: iterrows + Example per row", args.rows, seconds, cpu, rss))

        for rows in (int(n) for n in args.rss_rows.split(",") if n):
            write_quora_csv(raw / "train.csv", rows)
            data_dir = work / f"rss_{rows}"
            seconds, cpu, rss = timed(datagen(raw, data_dir))
            table.append((f"t2t-datagen, end to end, {rows:,}", rows, seconds, cpu, rss))
            drop_outputs_keep_vocab(data_dir)
            seconds, cpu, rss = timed(datagen(raw, data_dir))
            table.append((f"t2t-datagen, vocab present, {rows:,}", rows, seconds, cpu, rss))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("wall: elapsed seconds; CPU: user+sys seconds of the process (steadier on a shared machine)")
    print(f"{'run':44} {'rows':>10} {'wall s':>7} {'rows/s':>8} {'CPU s':>7} {'rows/CPU s':>10} {'peak RSS MiB':>12}")
    for name, rows, seconds, cpu, rss in table:
        rates = f"{rows / seconds:>8,.0f} {cpu:>7.1f} {rows / cpu:>10,.0f}"
        print(f"{name:44} {rows:>10,} {seconds:>7.1f} {rates} {rss:>12,.0f}")
    base_wall, base_cpu = table[2][2], table[2][3]
    for name, _, seconds, cpu, _ in table[:2]:
        print(f"speed-up over the baseline, {name}: {base_wall / seconds:.1f}x wall, {base_cpu / cpu:.1f}x CPU")


if __name__ == "__main__":
    main()
