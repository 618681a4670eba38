"""Benchmark: t2t-datagen on Apache Beam (DirectRunner, 1 and 2 worker processes) beside the local run.

    python bench/datagen_beam.py              # 400k rows: one CSV, and the same rows in 8 files
    python bench/datagen_beam.py --quick      # 40k rows

Every run is a fresh t2t-datagen process, end to end (vocabulary trained), timed by wall
clock; each Beam output is checked byte for byte against the local one. A single CSV is
one read unit (quoted newlines make a byte-range split unsafe), so only encoding and shard
writing spread over workers; the 8-file run reads files in parallel too.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datagen import REPO, timed, write_quora_csv  # noqa: E402

PARTS_PROBLEM = '''
from t2tcli import registry
from t2tcli.sources import CsvSource, raw_dir


@registry.register_problem("qp_parts")
class QpParts(type(registry.problem("qp_is_duplicate"))):
    """qp_is_duplicate read from train-*.csv."""

    def source(self, tmp_dir):
        return CsvSource(f"{raw_dir(tmp_dir)}/train-*.csv", columns=("id", "question1", "question2", "is_duplicate"),
                         required=("question1", "question2", "is_duplicate"), key="id")
'''


def split_csv(source: Path, directory: Path, parts: int) -> None:
    """The rows of `source` dealt into `parts` files, each with the header."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(source, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    size = -(-len(body) // parts)
    for index in range(parts):
        with open(directory / f"train-{index}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(body[index * size : (index + 1) * size])


def command(problem: str, raw: Path, out: Path, usr_dir: Path, workers: int | None) -> list[str]:
    args = [
        sys.executable,
        str(REPO / "bin" / "t2t-datagen"),
        f"--usr_dir={usr_dir}",
        f"--problem={problem}",
        f"--tmp_dir={raw}",
        f"--data_dir={out}",
    ]
    if workers:
        args += [
            "--beam_runner=DirectRunner",
            f"--beam_options=--direct_num_workers={workers} --direct_running_mode=multi_processing",
        ]
    return args


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="smoke run: 40k rows")
    args = parser.parse_args()
    rows = 40_000 if args.quick else args.rows
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        one, many, usr_dir = tmp_dir / "one", tmp_dir / "many", tmp_dir / "usr"
        one.mkdir()
        usr_dir.mkdir()
        (usr_dir / "qp_parts.py").write_text(PARTS_PROBLEM)
        write_quora_csv(one / "train.csv", rows)
        split_csv(one / "train.csv", many, args.parts)
        print(f"t2t-datagen, {rows:,} Quora-format rows, end to end (vocabulary trained); wall clock")
        print(f"{'input':<14}{'run':<26}{'seconds':>9}{'rows/s':>10}{'vs local':>10}  same bytes")
        for label, problem, raw in (("1 CSV", "qp_is_duplicate", one), (f"{args.parts} CSVs", "qp_parts", many)):
            local_out = tmp_dir / f"{problem}-local"
            local_seconds = timed(command(problem, raw, local_out, usr_dir, None))[0]
            local = tree(local_out)
            print(f"{label:<14}{'local':<26}{local_seconds:>9.1f}{rows / local_seconds:>10,.0f}{1.0:>10.2f}")
            by_workers = {}
            for workers in (1, 2):
                out = tmp_dir / f"{problem}-beam{workers}"
                seconds = timed(command(problem, raw, out, usr_dir, workers))[0]
                by_workers[workers] = seconds
                same = "yes" if tree(out) == local else "NO"
                run = f"Beam Direct, {workers} worker{'s' if workers > 1 else ''}"
                ratio = local_seconds / seconds
                print(f"{label:<14}{run:<26}{seconds:>9.1f}{rows / seconds:>10,.0f}{ratio:>10.2f}  {same}")
            print(f"{label:<14}Beam scaling 1 -> 2 workers: {by_workers[1] / by_workers[2]:.2f}x")


if __name__ == "__main__":
    main()
