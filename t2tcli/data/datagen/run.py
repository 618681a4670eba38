"""t2t-datagen's local run: raw records -> vocabulary, TFRecord shards and meta file.

Per problem, pass 1 streams the source in chunks, skips records with a blank required
field (counting them), preprocesses, assigns train/dev by a hash of the row key and
spools the text pairs to disk; it also keeps a deterministic sample of train text
for the vocabulary. Pass 2 encodes the spool in batches and writes the shards. When
the vocabulary exists already there is no spool: pass 1 hands each chunk straight to
pass 2's encoder, and the output is the same.

Every output is written under a temporary name and renamed when complete; the meta
file is written last, so a problem counts as generated only when its meta file exists,
matches the current source and vocabulary, and names shards that all exist. Anything
less is regenerated from scratch on the next run.

This module is the entry point the CLI and tests call; the concerns live beside it:
`plan` (what to make), `stages` (pass 1), `local_runner` (the passes), `writer` (pass 2),
`meta`, `stats`, `vocab_sources`, `layout` (file names). Imports: io and data.
"""

from __future__ import annotations

from t2tcli.data import layout
from t2tcli.data.datagen import local_runner
from t2tcli.data.datagen.options import Options
from t2tcli.data.datagen.plan import holding, plan, remove_outputs
from t2tcli.data.datagen.stages import split_records, tuned_for_batches
from t2tcli.data.problem import Problem
from t2tcli.io import scratch

__all__ = ["Options", "generate", "split_records"]


def generate(problem: Problem, options: Options) -> list[str]:
    """Generates every component of `problem` that is not complete; returns summary lines."""
    with holding(problem, options.data_dir):
        work = plan(problem, options)
        for task in work.pending + work.complete:  # what a killed run left, complete components' too
            scratch.remove_dir(layout.work_dir(options.data_dir, task.name))
        summaries = work.skipped_summaries()
        if not work.pending:
            return summaries
        for task in work.pending:
            remove_outputs(task, options.data_dir)
        with tuned_for_batches():
            try:
                return summaries + local_runner.run(work, options)
            except OSError as exc:
                if exc.filename is None:  # a write into the work directory or a bucket: name where it went
                    raise OSError(exc.errno, exc.strerror or str(exc), options.data_dir) from None
                raise
