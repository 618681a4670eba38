"""The local run's two passes over a plan's pending problems, with their timing and progress.

Pass 1 (`read_task`) streams each source through the shared stages into a spool, or, when
the vocabulary exists already, straight into the shard writer; the vocabulary is made
between the passes; pass 2 (`write_task`) encodes the spool into shards and the meta file.
Work directories are local scratch (`layout.work_dir`), made fresh and private through
`t2tcli.io.scratch` and removed whatever happens, a full disk included. Imports: core, io and
data (layout, meta, options, plan, problem, spool, stages, stats, vocab_sources and writer).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from absl import logging

from t2tcli.data import layout
from t2tcli.data.datagen.meta import summary_line
from t2tcli.data.datagen.options import Options, progress
from t2tcli.data.datagen.plan import Plan
from t2tcli.data.datagen.spool import Spool, spool_chunks
from t2tcli.data.datagen.stages import require_train, split_chunks
from t2tcli.data.datagen.stats import VocabSample
from t2tcli.data.datagen.vocab_sources import make_vocabulary
from t2tcli.data.datagen.writer import ShardWriter
from t2tcli.data.problem import Text2TextProblem
from t2tcli.errors import UserError
from t2tcli.io import scratch


def run(work: Plan, options: Options) -> list[str]:
    """Generates the plan's pending problems; returns their summary lines."""
    summaries: list[str] = []
    if not work.need_vocab:  # one pass: rows go from the source straight to the shards, without a spool
        for task in work.pending:
            start = time.monotonic()
            work_dir = layout.work_dir(options.data_dir, task.name)
            scratch.fresh_dir(work_dir)
            try:
                writer = ShardWriter(task, work_dir, work.vocab_file, options)
                try:
                    spool = read_task(task, options, work.fingerprints[task.name], None, writer)
                    meta = writer.finish(spool)
                finally:
                    writer.close()
            except BaseException:
                _remove_work_dirs([work_dir], failing=True)
                raise
            _remove_work_dirs([work_dir], failing=False)
            summaries.append(summary_line(meta, time.monotonic() - start))
        return summaries
    sample = VocabSample(work.problem.vocab.max_training_sentences) if work.source_vocab is None else None
    seconds = {task.name: 0.0 for task in work.pending}
    spools = {}
    try:
        for task in work.pending:
            start = time.monotonic()
            spools[task.name] = read_task(task, options, work.fingerprints[task.name], sample)
            seconds[task.name] += time.monotonic() - start
        start = time.monotonic()
        make_vocabulary(work.problem, work.vocab_file, work.source_vocab, sample)
        for task in work.pending:  # the shared vocabulary's cost, spread by share of rows
            share = spools[task.name].rows / max(1, sum(s.rows for s in spools.values()))
            seconds[task.name] += share * (time.monotonic() - start)
        for task in work.pending:
            start = time.monotonic()
            meta = write_task(task, spools[task.name], work.vocab_file, options)
            seconds[task.name] += time.monotonic() - start
            summaries.append(summary_line(meta, seconds[task.name]))
    except BaseException:
        _remove_work_dirs([spool.work_dir for spool in spools.values()], failing=True)
        raise
    _remove_work_dirs([spool.work_dir for spool in spools.values()], failing=False)
    return summaries


def _remove_work_dirs(paths: list[str], failing: bool) -> None:
    """Removes each work directory, all of them even when one is refused. While another
    failure is on its way out, a refusal is logged rather than raised: it would hide that
    failure, the one the user has to see; otherwise the first refusal is raised."""
    refused: UserError | None = None
    for path in paths:
        try:
            scratch.remove_dir(path)
        except UserError as exc:
            if failing:
                logging.warning("%s", exc)
            else:
                refused = refused or exc
    if refused is not None:
        raise refused


def read_task(
    task: Text2TextProblem,
    options: Options,
    fingerprint: str,
    sample: VocabSample | None,
    writer: ShardWriter | None = None,
) -> Spool:
    """Pass 1: source -> skipped/filtered counts, split assignment, text spool, vocab sample.

    With a `writer` (the vocabulary exists already), rows go to it instead of the spool,
    and to the work directory the caller made for it.
    """
    work_dir = writer.work_dir if writer is not None else layout.work_dir(options.data_dir, task.name)
    if writer is None:
        scratch.fresh_dir(work_dir)
    spool = Spool(fingerprint, work_dir=work_dir)
    with scratch.removed_on_failure(work_dir):  # nothing of a failed run stays behind
        try:
            for part in split_chunks(task, options, spool.reports):
                split, inputs, targets = part.split, part.inputs, part.targets
                if writer is not None:
                    writer.add(split, part.hashes, inputs, targets)
                else:
                    spool.append(split, part.hashes, inputs, targets)
                spool.counts[split] = spool.counts.get(split, 0) + len(inputs)
                if split == "train" and sample is not None:
                    sample.add(inputs)
                    sample.add(targets)
        finally:
            spool.close()
        require_train(task, options, spool.counts)
    return spool


def write_task(task: Text2TextProblem, spool: Spool, vocab_file: str, options: Options) -> dict[str, Any]:
    """Pass 2 from the spool: see `ShardWriter`."""
    writer = ShardWriter(task, spool.work_dir, vocab_file, options)
    try:
        with progress(options, f"{task.name}: writing", total=sum(spool.counts.values())) as bar:
            for split in layout.SPLITS:
                if split not in spool.files:
                    continue
                for hashes, inputs, targets in spool_chunks(spool.files[split]):
                    gc.collect(1)
                    writer.add(split, hashes, inputs, targets)
                    bar.update(len(inputs))
        return writer.finish(spool)
    finally:
        writer.close()
