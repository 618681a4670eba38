"""t2t-datagen as an Apache Beam pipeline, writing the same bytes as the local run: the launcher.

It plans and locks as the local run does, checks the runner's options offline, runs the
graph of `beam_pipeline`, and turns the pipeline's summary into data_dir's outputs with
the local run's own functions (`stages`, `writer.finish_task`, `meta`). Workers write
shards into a staging directory inside data_dir; the launcher moves them into place and
writes each meta file last, so a failed pipeline leaves nothing that looks complete.
Imports: core, io and data.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import time
import uuid
from typing import Any

from absl import logging

from t2tcli import registry
from t2tcli.data import layout
from t2tcli.data.datagen import beam_pipeline, beam_summary
from t2tcli.data.datagen.beam_pipeline import BeamJob
from t2tcli.data.datagen.beam_summary import TaskStats, TrainedVocab, UnitReport, WrittenShard
from t2tcli.data.datagen.meta import summary_line
from t2tcli.data.datagen.options import Options, num_shards, split_sources
from t2tcli.data.datagen.plan import Plan, holding, plan, remove_outputs
from t2tcli.data.datagen.stages import ReadTotals, SourceReport, check_skipped, require_train
from t2tcli.data.datagen.writer import finish_task
from t2tcli.data.problem import Problem
from t2tcli.data.vocabulary.vocab import Vocabulary, write_model
from t2tcli.errors import UserError
from t2tcli.io import atomic, fs, scratch

RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner", "FnApiRunner")


def pipeline_options(runner: str, beam_options: str) -> tuple[Any, Any]:
    """(runner, PipelineOptions) for --beam_runner and --beam_options."""
    beam_pipeline.module()
    from apache_beam.options.pipeline_options import PipelineOptions

    name = "FnApiRunner" if runner == "InProcess" else runner
    if name not in RUNNERS:
        raise UserError(f"--beam_runner={runner}: use one of {', '.join(RUNNERS)} (or InProcess)")
    try:
        flags = shlex.split(beam_options or "")
    except ValueError as exc:
        raise UserError(f"--beam_options: {exc}") from None
    if name == "FnApiRunner":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner(), PipelineOptions(flags)
    return name, PipelineOptions(flags)


def validate(runner: Any, options: Any, data_dir: str) -> None:
    """The options a runner cannot start without, checked offline, as one line (Beam's own
    validator looks up credentials and buckets over the network, for minutes offline)."""
    if runner != "DataflowRunner":
        return
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    cloud = options.view_as(GoogleCloudOptions)
    missing = [f"--{name}" for name in ("project", "region", "temp_location") if not getattr(cloud, name)]
    if missing:
        raise UserError(f"--beam_options for DataflowRunner: {', '.join(missing)} missing")
    if not cloud.temp_location.startswith("gs://"):
        raise UserError(f"--beam_options: --temp_location={cloud.temp_location}: DataflowRunner needs a gs:// path")
    if not fs.is_remote(data_dir):
        raise UserError(f"--data_dir={data_dir}: DataflowRunner's workers write the shards, so it must be gs://")


def failure_line(exc: BaseException) -> str:
    """The line that says why a pipeline failed: a worker's own one-line error where there
    is one (Beam wraps it in its traceback), else the exception's first line."""
    text = str(exc)
    marker = "UserError: "
    if marker in text:
        return text[text.rindex(marker) + len(marker) :].splitlines()[0].strip()
    if "job server jar" in text:
        return (
            "its job server jar could not be fetched (no network?); give a local one in --beam_options "
            "(--flink_job_server_jar=PATH, --spark_job_server_jar=PATH) or start a job server and use "
            "--beam_runner=PortableRunner --beam_options='--job_endpoint=HOST:PORT'"
        )
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


def graph_lines(pipeline: Any) -> list[str]:
    """The pipeline's top-level steps, in order: what --dry_run prints."""
    proto = pipeline.to_runner_api()
    root = proto.components.transforms[proto.root_transform_ids[0]]
    return [proto.components.transforms[t].unique_name for t in root.subtransforms]


def generate(
    problem: Problem,
    options: Options,
    runner: str,
    beam_options: str,
    usr_dirs: list[str],
    dry_run: bool = False,
) -> list[str]:
    """datagen.generate on a Beam runner: same outputs, summary lines for the log."""
    beam_pipeline.module()
    runner_obj, pipeline_opts = pipeline_options(runner, beam_options)
    validate(runner_obj, pipeline_opts, options.data_dir)
    with contextlib.nullcontext() if dry_run else holding(problem, options.data_dir):
        return _launch(problem, options, runner, runner_obj, pipeline_opts, usr_dirs, dry_run)


def _launch(
    problem: Problem,
    options: Options,
    runner: str,
    runner_obj: Any,
    pipeline_opts: Any,
    usr_dirs: list[str],
    dry_run: bool,
) -> list[str]:
    beam = beam_pipeline.module()
    work = plan(problem, options, look=not dry_run)
    summaries = work.skipped_summaries()
    if not work.pending:
        return summaries
    staging = os.path.join(options.data_dir, layout.staging_name(problem.name, uuid.uuid4().hex[:12]))
    code = registry.code_bundles(usr_dirs)
    job = BeamJob(
        problem.name,
        code,
        tuple(registry.code_digest(bundle) for bundle in code),
        options,
        staging,
        {(task.name, split): count for task in work.pending for split, count in num_shards(task, options).items()},
    )
    if dry_run:
        # The graph is the runner-independent one a runner is handed (Dataflow's Runner v2
        # takes it as it is). It is built on the in-process runner: Beam's constructor for
        # Dataflow looks up the temp_location bucket over the network, for minutes offline.
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner_obj = FnApiRunner()
    pipeline = beam.Pipeline(runner=runner_obj, options=pipeline_opts)
    beam_pipeline.build(pipeline, job, work)
    if dry_run:
        parts = len(beam_pipeline.work_units(job, work.pending))
        head = f"dry run on {runner}: {len(work.pending)} problems, {parts} source parts;"
        return summaries + [f"{head} the pipeline's steps (nothing was run):"] + graph_lines(pipeline)
    fs.makedirs(options.data_dir)
    for task in work.pending:
        remove_outputs(task, options.data_dir)
    for stale in fs.glob_in(options.data_dir, layout.staging_name(problem.name)):  # what a killed launcher left
        fs.rmtree(stale)
    if fs.is_remote(staging):
        fs.makedirs(staging)
    else:  # made here, not found: nothing planted under its name is written through
        scratch.fresh_dir(staging)
    start = time.monotonic()
    try:
        try:
            pipeline.run().wait_until_finish()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - any runner's failure becomes one line
            raise UserError(f"--beam_runner={runner}: {failure_line(exc)}") from None
        summary = os.path.join(staging, beam_pipeline.SUMMARY)
        items = beam_summary.decode(fs.read_bytes(summary), summary)
        seconds = time.monotonic() - start
        return summaries + finish(work, job, items, seconds)
    finally:
        fs.rmtree(staging)


def finish(work: Plan, job: BeamJob, items: list[Any], seconds: float) -> list[str]:
    """The launcher's part after the pipeline: checks of skipped rows and empty splits,
    then vocabulary, shards and meta files moved or written into data_dir, meta last."""
    options = job.options
    reports: dict[tuple[str, str], list[UnitReport]] = {}
    stats: dict[str, TaskStats] = {}
    written: set[tuple[str, str, int]] = set()
    vocab_proto = work.source_vocab
    for item in items:
        if isinstance(item, UnitReport):
            reports.setdefault((item.task, item.source_split), []).append(item)
        elif isinstance(item, TaskStats):
            stats[item.task] = item
        elif isinstance(item, WrittenShard):
            written.add((item.task, item.split, item.shard))
        elif isinstance(item, TrainedVocab):
            vocab_proto = item.proto
    totals = {}
    for task in work.pending:
        sources = split_sources(task, options)
        totals[task.name] = ReadTotals(work.fingerprints[task.name])
        for source_split, source in sources.items():
            report = merged_report(source.origin, source_split, reports.get((task.name, source_split), []))
            report.name = source.recorded_name()
            check_skipped(task, source, report)
            totals[task.name].reports.append(report)
        totals[task.name].counts = dict(stats[task.name].counts) if task.name in stats else {}
        require_train(task, options, totals[task.name].counts)
    if work.need_vocab:
        write_model(vocab_proto, work.vocab_file)
    vocab_size = Vocabulary(work.vocab_file).vocab_size
    summaries = []
    for task in work.pending:
        place = functools.partial(_move_staged, job, written, task.name)
        lengths = {"inputs": stats[task.name].inputs, "targets": stats[task.name].targets}
        meta = finish_task(task, options, work.vocab_file, vocab_size, totals[task.name], lengths, place)
        logging.info("%s: written by Beam", task.name)
        summaries.append(summary_line(meta, seconds))
    return summaries


def _move_staged(
    job: BeamJob, written: set[tuple[str, str, int]], name: str, split: str, index: int, final: str
) -> None:
    """Puts a shard the workers wrote at its final path."""
    if (name, split, index) in written:
        fs.rename(layout.shard_path(job.staging, name, split, index, job.shard_counts[(name, split)]), final)
    else:  # no pair hashed to this shard: an empty file, as the local run writes
        atomic.write_bytes(final, b"")


def merged_report(origin: str, source_split: str, parts: list[UnitReport]) -> SourceReport:
    """One source's report from its parts' reports: sums, and the first skipped lines in
    reading order."""
    merged = SourceReport(origin, source_split)
    for part in sorted(parts, key=lambda p: p.unit):
        merged.merge(part.report)
    return merged
