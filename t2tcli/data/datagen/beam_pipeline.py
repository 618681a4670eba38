"""t2t-datagen's Beam pipeline: the graph, and the steps its workers run.

Workers run datagen's own stages (`stages.chunk_parts`: read a source part, skip,
preprocess, split; the `stats` sample and histograms; `writer.encoded_blocks`; shard
writing), so a problem is described once. What makes the output identical to the local
run, whatever the runner and worker count:

- every pair carries its place in the local reading order (its source part's index and
  its record's position there); a shard's records are sorted by it before the train
  split's seeded shuffle, exactly as the local run appends them to its buckets;
- the shard is picked by the same hash of the row key; file names are fixed;
- the vocabulary sample is order-free (the texts of smallest hash), so partial samples
  merge into the local one, and SentencePiece trains once, on one worker;
- counts, length histograms and skip reports are sums (first skipped lines: the first
  ones in reading order), gathered into one summary for the launcher (`beam_runner`),
  written as JSON (`beam_summary`).

Steps hand each other small typed records, which Beam pickles in transit; nothing this
module writes to a file is a pickle. Workers rebuild the problem from the registry by name
(and --usr_dir code, staged privately and checked against the launcher's digests), which is
why a Problem needs no Beam-specific code.
Imports: core, io and data.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from t2tcli import registry
from t2tcli.data import layout
from t2tcli.data.datagen import beam_summary, shards
from t2tcli.data.datagen.beam_summary import TaskStats, TrainedVocab, UnitReport, WrittenShard
from t2tcli.data.datagen.options import Options, read_options_of, split_sources
from t2tcli.data.datagen.plan import Plan
from t2tcli.data.datagen.stages import SourceReport, chunk_parts
from t2tcli.data.datagen.stats import LengthHistogram, VocabSample
from t2tcli.data.datagen.vocab_sources import trained_vocabulary
from t2tcli.data.datagen.writer import encoded_blocks
from t2tcli.data.problem import Problem, Text2TextProblem
from t2tcli.data.sources.source_base import ReadOptions
from t2tcli.data.vocabulary.packed_encoder import PackedTextEncoder, Spans
from t2tcli.data.vocabulary.vocab import Vocabulary
from t2tcli.errors import UserError
from t2tcli.io import atomic, fs

# TFDS splits are cut into this many ranges, read in parallel (file sources: one part per file).
TFDS_PARTS = 16
INSTALL_HINT = "pip install 't2tcli[beam]'"
SUMMARY = beam_summary.NAME


def module() -> Any:
    try:
        import apache_beam
    except ImportError:
        raise UserError(f"--beam_runner needs Apache Beam: {INSTALL_HINT}") from None
    return apache_beam


@dataclasses.dataclass(frozen=True)
class BeamJob:
    """What workers need to rebuild the problem and its options: names, not objects."""

    problem: str
    code: tuple[registry.CodeBundle, ...]  # the built-in problems and --usr_dir code, sources included
    code_digests: tuple[str, ...]  # of each bundle, as the launcher read it: workers import nothing else
    options: Options
    staging: str
    shard_counts: dict[tuple[str, str], int]


@dataclasses.dataclass(frozen=True)
class Part:
    """One chunk's pairs of one split, with each pair's place in the local reading order."""

    task: str
    split: str
    unit: int
    positions: np.ndarray
    hashes: np.ndarray
    inputs: list[str]
    targets: list[str]


@dataclasses.dataclass(frozen=True)
class PartStats:
    """A Part's example count and token lengths, once encoded."""

    task: str
    split: str
    count: int
    input_lengths: np.ndarray
    target_lengths: np.ndarray


@dataclasses.dataclass(frozen=True)
class ShardBlock:
    """A Part's records that go to one shard, with their places in the reading order."""

    unit: int
    positions: np.ndarray
    data: bytes
    sizes: np.ndarray


_PROBLEMS: dict[tuple[str, tuple[str, ...]], Problem] = {}
_IMPORTING = threading.Lock()  # a worker process runs steps on several threads


def problem_of(job: BeamJob) -> Problem:
    """The job's problem in this worker process, built once from the registry, with the
    job's user code staged privately and checked against the launcher's digests."""
    key = (job.problem, tuple(path for path, _ in job.code))
    with _IMPORTING:
        if key not in _PROBLEMS:
            registry.import_code_bundles(job.code, job.code_digests)
            _PROBLEMS[key] = registry.problem(job.problem)
    return _PROBLEMS[key]


def task_of(job: BeamJob, name: str) -> Text2TextProblem:
    return next(task for task, _ in problem_of(job).components() if task.name == name)


def read_options(options: Options) -> ReadOptions:
    return read_options_of(options, parts=TFDS_PARTS)


def work_units(job: BeamJob, tasks: list[Text2TextProblem]) -> list[tuple[str, str, int, Any]]:
    """(task, source split, part index, part) of every source part, in the local reading order."""
    units = []
    for task in tasks:
        for source_split, source in split_sources(task, job.options).items():
            for index, unit in enumerate(source.units(read_options(job.options))):
                units.append((task.name, source_split, index, unit))
    return units


def read_unit(job: BeamJob, element: tuple[str, str, int, Any]) -> Iterator[Part | UnitReport]:
    """Reads one source part through skip, preprocess and split: its Parts, then its report."""
    from t2tcli.data.sources.preprocessing import ChunkPreprocessor

    name, source_split, index, unit = element
    task = task_of(job, name)
    sources = split_sources(task, job.options)
    report = SourceReport(sources[source_split].origin, source_split)
    preprocess = ChunkPreprocessor(task)
    for chunk in sources[source_split].unit_chunks(unit, read_options(job.options)):
        for part in chunk_parts(task, sources, source_split, chunk, preprocess, report):
            yield Part(name, part.split, index, part.positions, part.hashes, part.inputs, part.targets)
    yield UnitReport(name, source_split, index, report)


def sample_combine(limit: int) -> Any:
    beam = module()

    class SampleTexts(beam.CombineFn):
        """The vocabulary sample of every train pair; partial samples merge exactly."""

        def create_accumulator(self) -> VocabSample:
            return VocabSample(limit)

        def add_input(self, sample: VocabSample, part: Part) -> VocabSample:
            sample.add(part.inputs)
            sample.add(part.targets)
            return sample

        def merge_accumulators(self, samples: Any) -> VocabSample:
            merged = VocabSample(limit)
            for sample in samples:
                merged.merge(sample)
            return merged

        def extract_output(self, sample: VocabSample) -> VocabSample:
            return sample

    return SampleTexts()


def train_vocabulary(job: BeamJob, sample: VocabSample) -> bytes:
    problem = problem_of(job)
    return trained_vocabulary(problem, sample, problem.vocab_file(job.options.data_dir))


class Encoder:
    """Pairs -> framed records, by the vocabulary the pipeline made (one per worker)."""

    def __init__(self, proto: bytes, supplied: bool = False) -> None:
        with tempfile.NamedTemporaryFile(suffix=".model", delete=False) as f:
            f.write(proto)
        try:
            vocab = Vocabulary(f.name)
        finally:
            os.remove(f.name)
        self.text_encoder = PackedTextEncoder(vocab, supplied)
        self.example_encoder = shards.ExampleEncoder()


_ENCODERS: dict[int, Encoder] = {}


def encode_part(
    job: BeamJob, part: Part, proto: bytes
) -> Iterator[tuple[tuple[str, str, int], ShardBlock] | PartStats]:
    """A Part -> ((task, split, shard), its ShardBlock) per shard it touches, then its PartStats."""
    encoder = _ENCODERS.get(id(proto))
    if encoder is None:
        _ENCODERS.clear()
        supplied = bool(job.options.vocab_from or problem_of(job).vocab.source)
        encoder = _ENCODERS[id(proto)] = Encoder(proto, supplied)
    input_lengths = target_lengths = np.zeros(0, dtype=np.int64)
    count = job.shard_counts[(part.task, part.split)]
    for block, packed_inputs, in_lengths, packed_targets, tg_lengths in encoded_blocks(
        encoder.text_encoder, part.inputs, part.targets
    ):
        input_lengths = np.concatenate([input_lengths, in_lengths])
        target_lengths = np.concatenate([target_lengths, tg_lengths])
        records = encoder.example_encoder.records(packed_inputs, packed_targets)
        shard_ids = shards.shard_of(part.hashes[block], count)
        positions = part.positions[block]
        for shard in np.unique(shard_ids).tolist():
            picked = np.flatnonzero(shard_ids == shard)
            taken = records.take(picked)
            value = ShardBlock(part.unit, positions[picked], taken.joined().tobytes(), taken.sizes)
            yield (part.task, part.split, shard), value
    yield PartStats(part.task, part.split, len(part.inputs), input_lengths, target_lengths)


def write_shard(job: BeamJob, keyed: tuple[tuple[str, str, int], Any]) -> WrittenShard:
    """One shard's records, put in the local reading order (then shuffled as locally for
    train), written to the staging directory under its final name."""
    (name, split, shard), blocks = keyed
    blocks = list(blocks)
    units = np.concatenate([np.full(len(b.positions), b.unit, dtype=np.int64) for b in blocks])
    positions = np.concatenate([b.positions for b in blocks])
    sizes = np.concatenate([b.sizes for b in blocks]).astype(np.int64)
    data = np.frombuffer(b"".join(b.data for b in blocks), dtype=np.uint8)
    records = Spans(data, np.cumsum(sizes) - sizes, sizes).take(np.lexsort((positions, units)))
    final = layout.shard_path(job.staging, name, split, shard, job.shard_counts[(name, split)])
    written = shards.write_records(records, final, shards.shard_seed(name, split, shard))
    return WrittenShard(name, split, shard, written)


def histogram_sum() -> Any:
    beam = module()

    class StatsSum(beam.CombineFn):
        """Per task: examples per split and the length histograms of inputs and targets."""

        def create_accumulator(self) -> tuple[dict[str, int], LengthHistogram, LengthHistogram]:
            return {}, LengthHistogram(), LengthHistogram()

        def add_input(self, acc: Any, stats: PartStats) -> Any:
            acc[0][stats.split] = acc[0].get(stats.split, 0) + stats.count
            acc[1].add(stats.input_lengths)
            acc[2].add(stats.target_lengths)
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


def write_summary(job: BeamJob, items: list[Any]) -> None:
    atomic.write_bytes(os.path.join(job.staging, SUMMARY), beam_summary.encode(items))


def build(pipeline: Any, job: BeamJob, plan: Plan) -> None:
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
    reports = parts_and_reports | "SkipReports" >> beam.Filter(lambda x: isinstance(x, UnitReport))
    summary_items = [reports]
    if plan.need_vocab and plan.source_vocab is None:
        limit = plan.problem.vocab.max_training_sentences
        vocab = (
            parts
            | "TrainPairs" >> beam.Filter(lambda part: part.split == "train")
            | "VocabSample" >> beam.CombineGlobally(sample_combine(limit))
            | "TrainSentencePiece" >> beam.Map(lambda sample: train_vocabulary(job, sample))
        )
        summary_items.append(vocab | "VocabItem" >> beam.Map(TrainedVocab))
    else:
        # the source's model, or the existing vocabulary, which stays
        proto = plan.source_vocab if plan.source_vocab is not None else fs.read_bytes(plan.vocab_file)
        vocab = pipeline | "Vocabulary" >> beam.Create([proto])
    encoded = parts | "Encode" >> beam.FlatMap(
        lambda part, proto: encode_part(job, part, proto), proto=beam.pvalue.AsSingleton(vocab)
    )
    stats = (
        encoded
        | "Stats" >> beam.Filter(lambda x: isinstance(x, PartStats))
        | "ByTask" >> beam.Map(lambda x: (x.task, x))
        | "SumStats" >> beam.CombinePerKey(histogram_sum())
        | "StatsItem" >> beam.Map(lambda kv: TaskStats(kv[0], *kv[1]))
    )
    written = (
        encoded
        | "Records" >> beam.Filter(lambda x: not isinstance(x, PartStats))
        | "ByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.Map(lambda keyed: write_shard(job, keyed))
    )
    summary_items += [stats, written]
    (
        summary_items
        | "Gather" >> beam.Flatten()
        | "Summary" >> beam.combiners.ToList()
        | "WriteSummary" >> beam.Map(lambda items: write_summary(job, items))
    )
