"""A problem's meta file: what datagen wrote, read, skipped and filtered, and from what.

It is written last, so its presence says the problem's outputs are complete (see
`layout.is_complete`); both runners build it here, byte for byte alike, and derive their
summary lines from it. Imports: io and data (layout, options, problem, stages, stats
and vocab_sources).
"""

from __future__ import annotations

import json
import os
from typing import Any

from t2tcli.data import layout
from t2tcli.data.datagen.options import Options
from t2tcli.data.datagen.stages import ReadTotals
from t2tcli.data.datagen.stats import LengthHistogram
from t2tcli.data.datagen.vocab_sources import vocab_description
from t2tcli.data.problem import Text2TextProblem
from t2tcli.io import atomic, fs


def split_entry(examples: int, paths: list[str]) -> dict[str, Any]:
    """One split's entry: its example count, and its shards' names and sizes as written."""
    return {
        "examples": examples,
        "shards": len(paths),
        "files": [os.path.basename(path) for path in paths],
        "bytes": [fs.getsize(path) for path in paths],
    }


def build_meta(
    task: Text2TextProblem,
    options: Options,
    vocab_file: str,
    vocab_size: int,
    splits_meta: dict[str, Any],
    totals: ReadTotals,
    lengths: dict[str, LengthHistogram],
) -> dict[str, Any]:
    """The meta file's content: what was written, read, skipped and filtered, and from what."""
    return {
        "problem": task.name,
        "vocab_file": os.path.basename(layout.vocab_path(options.data_dir, task.vocab.name)),
        "vocab_size": vocab_size,
        "vocab_sha256": layout.file_sha256(vocab_file),
        "vocab_description": vocab_description(task, options),
        "splits": splits_meta,
        "rows_read": totals.rows,
        "skipped": {
            "total": sum(r.skipped for r in totals.reports),
            "sources": {
                r.split: {
                    "source": r.name or os.path.basename(r.origin),
                    "rows": r.rows,
                    "skipped": r.skipped,
                    "first_lines": r.first_skipped_lines,
                    "filtered": r.filtered,
                }
                for r in totals.reports
            },
        },
        "filtered": sum(r.filtered for r in totals.reports),
        "lengths": {name: histogram.summary() for name, histogram in lengths.items()},
        "lengths_include_eos": True,
        "metrics": list(task.metrics),
        "source_fingerprint": totals.fingerprint,
    }


def write_meta(task: Text2TextProblem, options: Options, meta: dict[str, Any]) -> None:
    atomic.write_bytes(
        layout.meta_path(options.data_dir, task.name), (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
    )


def summary_line(meta: dict[str, Any], seconds: float) -> str:
    splits = ", ".join(f"{split} {info['examples']}" for split, info in meta["splits"].items())
    rows = meta["rows_read"]
    rate = rows / seconds if seconds > 0 else float("inf")
    return (
        f"{meta['problem']}: {rows} rows -> {splits}; skipped {meta['skipped']['total']}, "
        f"filtered {meta['filtered']}; {seconds:.1f} s, {rate:,.0f} rows/s"
    )
