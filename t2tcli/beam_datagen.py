"""t2t-datagen as an Apache Beam pipeline, writing the same bytes as the local run.

The pipeline runs datagen's own stages (`t2tcli.datagen`: read a source part, skip,
preprocess, split; the vocabulary sample; encoding; shard writing), so a problem is
described once. What makes the output identical to the local run, whatever the runner
and worker count:

- every pair carries its place in the local reading order (its source part's index and
  its record's position there); a shard's records are sorted by it before the train
  split's seeded shuffle, exactly as the local run appends them to its buckets;
- the shard is picked by the same hash of the row key; file names are fixed;
- the vocabulary sample is order-free (the texts of smallest hash), so partial samples
  merge into the local one, and SentencePiece trains once, on one worker;
- counts, length histograms and skip reports are sums (first skipped lines: the first
  ones in reading order), gathered into one summary the launcher turns into meta.json.

Workers write shards into a staging directory inside data_dir; the launcher moves them
into place and writes each meta file last, so a failed pipeline leaves nothing that looks
complete. Workers rebuild the problem from the registry by name (and --usr_dir), which is
why a Problem needs no Beam-specific code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shlex
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
from absl import logging

from t2tcli import datagen, fs, registry, shards
from t2tcli.errors import UserError
from t2tcli.io import atomic
from t2tcli.packed_encoder import PackedTextEncoder, Spans
from t2tcli.problem import Problem, Text2TextProblem, shard_path
from t2tcli.vocab import Vocabulary, write_model

RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner", "FnApiRunner")
# TFDS splits are cut into this many ranges, read in parallel (file sources: one part per file).
TFDS_PARTS = 16
INSTALL_HINT = "pip install 't2tcli[beam]'"
_SUMMARY = "summary.pkl"
_SPLITS = ("train", "dev", "test")


def module() -> Any:
    try:
        import apache_beam
    except ImportError:
        raise UserError(f"--beam_runner needs Apache Beam: {INSTALL_HINT}") from None
    return apache_beam


@dataclasses.dataclass(frozen=True)
class Job:
    """What workers need to rebuild the problem and its options: names, not objects."""

    problem: str
    code: tuple[registry.CodeBundle, ...]  # the built-in problems and --usr_dir code, sources included
    options: datagen.Options
    staging: str
    shard_counts: dict[tuple[str, str], int]


_PROBLEMS: dict[tuple[str, tuple[str, ...]], Problem] = {}


def problem_of(job: Job) -> Problem:
    """The job's problem in this worker process, built once from the registry."""
    key = (job.problem, tuple(path for path, _ in job.code))
    if key not in _PROBLEMS:
        registry.import_code_bundles(job.code, tempfile.gettempdir())
        _PROBLEMS[key] = registry.problem(job.problem)
    return _PROBLEMS[key]


def task_of(job: Job, name: str) -> Text2TextProblem:
    return next(task for task, _ in problem_of(job).components() if task.name == name)


def read_options(options: datagen.Options) -> Any:
    return datagen.read_options_of(options, parts=TFDS_PARTS)


def work_units(job: Job, tasks: list[Text2TextProblem]) -> list[tuple[str, str, int, Any]]:
    """(task, source split, part index, part) of every source part, in the local reading order."""
    units = []
    for task in tasks:
        for source_split, source in datagen.split_sources(task, job.options).items():
            for index, unit in enumerate(source.units(read_options(job.options))):
                units.append((task.name, source_split, index, unit))
    return units


@dataclasses.dataclass
class Part:
    """One chunk's pairs of one split, with each pair's place in the local reading order."""

    task: str
    split: str
    unit: int
    positions: np.ndarray
    hashes: np.ndarray
    inputs: list[str]
    targets: list[str]


def read_unit(job: Job, element: tuple[str, str, int, Any]) -> Iterator[Any]:
    """Reads one source part through skip, preprocess and split: its Parts, then its report
    as ("report", task, source split, part index, SourceReport)."""
    from t2tcli.preprocessing import ChunkPreprocessor

    name, source_split, index, unit = element
    task = task_of(job, name)
    sources = datagen.split_sources(task, job.options)
    report = datagen.SourceReport(sources[source_split].origin, source_split)
    preprocess = ChunkPreprocessor(task)
    for chunk in sources[source_split].unit_chunks(unit, read_options(job.options)):
        for part in datagen.chunk_parts(task, sources, source_split, chunk, preprocess, report):
            yield Part(name, part.split, index, part.positions, part.hashes, part.inputs, part.targets)
    yield ("report", name, source_split, index, report)


def sample_combine(limit: int) -> Any:
    beam = module()

    class SampleTexts(beam.CombineFn):
        """The vocabulary sample of every train pair; partial samples merge exactly."""

        def create_accumulator(self) -> datagen.VocabSample:
            return datagen.VocabSample(limit)

        def add_input(self, sample: datagen.VocabSample, part: Part) -> datagen.VocabSample:
            sample.add(part.inputs)
            sample.add(part.targets)
            return sample

        def merge_accumulators(self, samples: Any) -> datagen.VocabSample:
            merged = datagen.VocabSample(limit)
            for sample in samples:
                merged.merge(sample)
            return merged

        def extract_output(self, sample: datagen.VocabSample) -> datagen.VocabSample:
            return sample

    return SampleTexts()


def train_vocabulary(job: Job, sample: datagen.VocabSample) -> bytes:
    problem = problem_of(job)
    return datagen.trained_vocabulary(problem, sample, problem.vocab_file(job.options.data_dir))


class Encoder:
    """Pairs -> framed records, by the vocabulary the pipeline made (one per worker)."""

    def __init__(self, proto: bytes) -> None:
        with tempfile.NamedTemporaryFile(suffix=".model", delete=False) as f:
            f.write(proto)
        try:
            vocab = Vocabulary(f.name)
        finally:
            os.remove(f.name)
        self.text_encoder = PackedTextEncoder(vocab)
        self.example_encoder = shards.ExampleEncoder()


_ENCODERS: dict[int, Encoder] = {}


def encode_part(job: Job, part: Part, proto: bytes) -> Iterator[Any]:
    """A Part -> ((task, split, shard), (part index, positions, record bytes, sizes)) per
    shard it touches, and ("stats", task, split, count, input lengths, target lengths)."""
    encoder = _ENCODERS.get(id(proto))
    if encoder is None:
        _ENCODERS.clear()
        encoder = _ENCODERS[id(proto)] = Encoder(proto)
    input_lengths = target_lengths = np.zeros(0, dtype=np.int64)
    count = job.shard_counts[(part.task, part.split)]
    for block, packed_inputs, in_lengths, packed_targets, tg_lengths in datagen.encoded_blocks(
        encoder.text_encoder, part.inputs, part.targets
    ):
        input_lengths = np.concatenate([input_lengths, in_lengths])
        target_lengths = np.concatenate([target_lengths, tg_lengths])
        records = encoder.example_encoder.records(packed_inputs, packed_targets)
        shard_ids = shards.shard_of(part.hashes[block], count)
        positions = part.positions[block]
        for shard in np.unique(shard_ids).tolist():
            picked = np.flatnonzero(shard_ids == shard)
            block = records.take(picked)
            value = (part.unit, positions[picked], block.joined().tobytes(), block.sizes)
            yield (part.task, part.split, shard), value
    yield ("stats", part.task, part.split, len(part.inputs), input_lengths, target_lengths)


def write_shard(job: Job, keyed: tuple[tuple[str, str, int], Any]) -> tuple[str, str, int, int]:
    """One shard's records, put in the local reading order (then shuffled as locally for
    train), written to the staging directory under its final name."""
    (name, split, shard), blocks = keyed
    blocks = list(blocks)
    units = np.concatenate([np.full(len(b[1]), b[0], dtype=np.int64) for b in blocks])
    positions = np.concatenate([b[1] for b in blocks])
    sizes = np.concatenate([b[3] for b in blocks]).astype(np.int64)
    data = np.frombuffer(b"".join(b[2] for b in blocks), dtype=np.uint8)
    records = Spans(data, np.cumsum(sizes) - sizes, sizes).take(np.lexsort((positions, units)))
    count = job.shard_counts[(name, split)]
    final = shard_path(job.staging, name, split, shard, count)
    seed = shards.shuffle_seed(name, split, str(shard)) if split == "train" else None
    return name, split, shard, shards.write_records(records, final, seed)


def histogram_sum() -> Any:
    beam = module()

    class StatsSum(beam.CombineFn):
        """Per task: examples per split and the length histograms of inputs and targets."""

        def create_accumulator(self) -> tuple[dict[str, int], datagen.LengthHistogram, datagen.LengthHistogram]:
            return {}, datagen.LengthHistogram(), datagen.LengthHistogram()

        def add_input(self, acc: Any, stats: tuple[str, int, np.ndarray, np.ndarray]) -> Any:
            split, count, inputs, targets = stats
            acc[0][split] = acc[0].get(split, 0) + count
            acc[1].add(inputs)
            acc[2].add(targets)
            return acc

        def merge_accumulators(self, accs: Any) -> Any:
            merged = self.create_accumulator()
            for counts, inputs, targets in accs:
                for split, count in counts.items():
                    merged[0][split] = merged[0].get(split, 0) + count
                merged[1].merge(inputs)
                merged[2].merge(targets)
            return merged

        def extract_output(self, acc: Any) -> Any:
            return acc

    return StatsSum()


def write_summary(job: Job, items: list[Any]) -> None:
    atomic.write_bytes(os.path.join(job.staging, _SUMMARY), pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL))


def build(pipeline: Any, job: Job, plan: datagen.Plan) -> None:
    """The datagen graph on `pipeline`: read -> preprocess -> split -> vocabulary sample ->
    SentencePiece (once) -> encode -> shard -> summary."""
    beam = module()
    units = work_units(job, plan.pending)
    parts_and_reports = (
        pipeline
        | "SourceParts" >> beam.Create(units)
        | "Spread" >> beam.Reshuffle()
        | "ReadPreprocessSplit" >> beam.FlatMap(lambda unit: read_unit(job, unit))
    )
    parts = parts_and_reports | "Pairs" >> beam.Filter(lambda x: isinstance(x, Part))
    reports = parts_and_reports | "SkipReports" >> beam.Filter(lambda x: not isinstance(x, Part))
    summary_items = [reports]
    if plan.need_vocab and plan.source_vocab is None:
        limit = plan.problem.vocab.max_training_sentences
        vocab = (
            parts
            | "TrainPairs" >> beam.Filter(lambda part: part.split == "train")
            | "VocabSample" >> beam.CombineGlobally(sample_combine(limit))
            | "TrainSentencePiece" >> beam.Map(lambda sample: train_vocabulary(job, sample))
        )
        summary_items.append(vocab | "VocabItem" >> beam.Map(lambda proto: ("vocab", proto)))
    else:
        # the source's model, or the existing vocabulary, which stays
        proto = plan.source_vocab if plan.source_vocab is not None else fs.read_bytes(plan.vocab_file)
        vocab = pipeline | "Vocabulary" >> beam.Create([proto])
    encoded = parts | "Encode" >> beam.FlatMap(
        lambda part, proto: encode_part(job, part, proto), proto=beam.pvalue.AsSingleton(vocab)
    )
    stats = (
        encoded
        | "Stats" >> beam.Filter(lambda x: x[0] == "stats")
        | "ByTask" >> beam.Map(lambda x: (x[1], x[2:]))
        | "SumStats" >> beam.CombinePerKey(histogram_sum())
        | "StatsItem" >> beam.Map(lambda kv: ("stats", kv[0], kv[1]))
    )
    written = (
        encoded
        | "Records" >> beam.Filter(lambda x: x[0] != "stats")
        | "ByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.Map(lambda keyed: ("shard", *write_shard(job, keyed)))
    )
    summary_items += [stats, written]
    (
        summary_items
        | "Gather" >> beam.Flatten()
        | "Summary" >> beam.combiners.ToList()
        | "WriteSummary" >> beam.Map(lambda items: write_summary(job, items))
    )


def pipeline_options(runner: str, beam_options: str) -> tuple[Any, Any]:
    """(runner, PipelineOptions) for --beam_runner and --beam_options."""
    module()
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
    options: datagen.Options,
    runner: str,
    beam_options: str,
    usr_dirs: list[str],
    dry_run: bool = False,
) -> list[str]:
    """datagen.generate on a Beam runner: same outputs, summary lines for the log."""
    module()
    runner_obj, pipeline_opts = pipeline_options(runner, beam_options)
    validate(runner_obj, pipeline_opts, options.data_dir)
    with contextlib.nullcontext() if dry_run else datagen.holding(problem, options.data_dir):
        return _launch(problem, options, runner, runner_obj, pipeline_opts, usr_dirs, dry_run)


def _launch(
    problem: Problem,
    options: datagen.Options,
    runner: str,
    runner_obj: Any,
    pipeline_opts: Any,
    usr_dirs: list[str],
    dry_run: bool,
) -> list[str]:
    beam = module()
    work = datagen.plan(problem, options, look=not dry_run)
    summaries = work.skipped_summaries()
    if not work.pending:
        return summaries
    staging = os.path.join(options.data_dir, f".beam-{problem.name}-{uuid.uuid4().hex[:12]}")
    job = Job(
        problem.name,
        registry.code_bundles(usr_dirs),
        options,
        staging,
        {
            (task.name, split): count
            for task in work.pending
            for split, count in datagen.num_shards(task, options).items()
        },
    )
    if dry_run:
        # The graph is the runner-independent one a runner is handed (Dataflow's Runner v2
        # takes it as it is). It is built on the in-process runner: Beam's constructor for
        # Dataflow looks up the temp_location bucket over the network, for minutes offline.
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner_obj = FnApiRunner()
    pipeline = beam.Pipeline(runner=runner_obj, options=pipeline_opts)
    build(pipeline, job, work)
    if dry_run:
        head = f"dry run on {runner}: {len(work.pending)} problems, {len(work_units(job, work.pending))} source parts;"
        return summaries + [f"{head} the pipeline's steps (nothing was run):"] + graph_lines(pipeline)
    fs.makedirs(options.data_dir)
    for task in work.pending:
        datagen.remove_outputs(task, options.data_dir)
    for stale in fs.glob_in(options.data_dir, f".beam-{problem.name}-*"):  # what a killed launcher left
        fs.rmtree(stale)
    fs.makedirs(staging)
    start = time.monotonic()
    try:
        try:
            pipeline.run().wait_until_finish()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - any runner's failure becomes one line
            raise UserError(f"--beam_runner={runner}: {failure_line(exc)}") from None
        items = pickle.loads(fs.read_bytes(os.path.join(staging, _SUMMARY)))
        seconds = time.monotonic() - start
        return summaries + finish(work, job, items, seconds)
    finally:
        fs.rmtree(staging)


def finish(work: datagen.Plan, job: Job, items: list[Any], seconds: float) -> list[str]:
    """The launcher's part after the pipeline: checks of skipped rows and empty splits,
    then vocabulary, shards and meta files moved or written into data_dir, meta last."""
    options = job.options
    reports: dict[tuple[str, str], list[tuple[int, datagen.SourceReport]]] = {}
    stats: dict[str, Any] = {}
    written: dict[tuple[str, str, int], int] = {}
    vocab_proto = work.source_vocab
    for item in items:
        if item[0] == "report":
            reports.setdefault((item[1], item[2]), []).append((item[3], item[4]))
        elif item[0] == "stats":
            stats[item[1]] = item[2]
        elif item[0] == "shard":
            written[item[1:4]] = item[4]
        elif item[0] == "vocab":
            vocab_proto = item[1]
    spools = {}
    for task in work.pending:
        sources = datagen.split_sources(task, options)
        spool = datagen.Spool("", work.fingerprints[task.name])
        for source_split, source in sources.items():
            report = merged_report(source.origin, source_split, reports.get((task.name, source_split), []))
            datagen.check_skipped(task, source, report)
            spool.reports.append(report)
        spool.counts = dict(stats.get(task.name, ({}, None, None))[0])
        if not spool.counts.get("train"):
            raise UserError(f"problem '{task.name}': no train examples from {sources['train'].origin}")
        spools[task.name] = spool
    if work.need_vocab:
        write_model(vocab_proto, work.vocab_file)
    vocab_size = Vocabulary(work.vocab_file).vocab_size
    summaries = []
    for task in work.pending:
        spool = spools[task.name]
        splits_meta: dict[str, Any] = {}
        for split in _SPLITS:
            if split not in spool.counts:
                continue
            count = job.shard_counts[(task.name, split)]
            files = []
            for index in range(count):
                final = shard_path(options.data_dir, task.name, split, index, count)
                staged = shard_path(job.staging, task.name, split, index, count)
                if (task.name, split, index) in written:
                    fs.rename(staged, final)
                else:  # no pair hashed to this shard: an empty file, as the local run writes
                    atomic.write_bytes(final, b"")
                files.append(os.path.basename(final))
            sizes = [fs.getsize(os.path.join(options.data_dir, f)) for f in files]
            splits_meta[split] = {"examples": spool.counts[split], "shards": count, "files": files, "bytes": sizes}
        _, inputs, targets = stats[task.name]
        lengths = {"inputs": inputs, "targets": targets}
        meta = datagen.build_meta(task, options, work.vocab_file, vocab_size, splits_meta, spool, lengths)
        datagen.write_meta(task, options, meta)
        logging.info("%s: written by Beam", task.name)
        summaries.append(datagen.summary_line(meta, seconds))
    return summaries


def merged_report(
    origin: str, source_split: str, parts: list[tuple[int, datagen.SourceReport]]
) -> datagen.SourceReport:
    """One source's report from its parts' reports: sums, and the first skipped lines in
    reading order."""
    merged = datagen.SourceReport(origin, source_split)
    for _, report in sorted(parts, key=lambda p: p[0]):
        merged.rows += report.rows
        merged.skipped += report.skipped
        merged.filtered += report.filtered
        room = datagen.SKIPPED_LINES_REPORTED - len(merged.first_skipped_lines)
        merged.first_skipped_lines.extend(report.first_skipped_lines[:room])
    return merged
