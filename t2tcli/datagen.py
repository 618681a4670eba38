"""t2t-datagen's pipeline: raw records -> vocabulary, TFRecord shards and meta file.

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
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import glob
import hashlib
import inspect
import json
import os
import pickle
import platform
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from absl import logging
from tqdm import tqdm

from t2tcli import fs, shards
from t2tcli.errors import UserError
from t2tcli.io import atomic, lock
from t2tcli.packed_encoder import PackedTextEncoder
from t2tcli.preprocessing import ChunkPreprocessor
from t2tcli.problem import Problem, Text2TextProblem, meta_path, read_meta, shard_path, vocab_path
from t2tcli.sources import ReadOptions, Source
from t2tcli.vocab import Vocabulary, check_layout, trained_model, with_sentinels, write_model

SKIPPED_LINES_REPORTED = 10
PERCENTILES = (50, 90, 95, 99)
_DEV_BUCKETS = 1_000_000
# Rows encoded and serialized at a time, whatever --chunk_rows is: a batch's arrays hold
# several entries per word and per byte, and this keeps them to a few MiB.
ENCODE_ROWS = 8192
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@dataclasses.dataclass
class Options:
    """How to run datagen, as opposed to what the problem is."""

    data_dir: str
    tmp_dir: str | None = None
    overwrite: bool = False
    tfds_data_dir: str | None = None
    num_train_shards: int | None = None
    chunk_rows: int = 20_000
    progress: bool | None = None  # None: a bar only when stderr is a terminal
    vocab_from: str | None = None  # a SentencePiece model or HF model directory to use as the vocabulary
    vocab_extra_ids: int | None = None  # T5 sentinels to append to it (None: the problem's extra_ids)


@dataclasses.dataclass
class SourceReport:
    """What was read from one source and what was skipped, for the log and the meta file."""

    origin: str
    split: str
    rows: int = 0
    skipped: int = 0
    first_skipped_lines: list[int | str] = dataclasses.field(default_factory=list)
    filtered: int = 0


@dataclasses.dataclass
class Spool:
    """Pass 1's output for one problem: preprocessed text per split, on disk."""

    work_dir: str
    fingerprint: str
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    reports: list[SourceReport] = dataclasses.field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.reports)


class VocabSample:
    """The `limit` distinct train texts of smallest hash: a deterministic, bounded sample.

    Once full, a text is kept only if its hash is below the current cut-off, so memory
    holds about `limit` texts whatever the size of the input.
    """

    _SECOND_KEY = "t2tcli-vocab-tie"  # 16 characters: a second hash key, to break ties deterministically

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.texts = np.empty(0, dtype=object)
        self.priority = np.empty((0, 2), dtype=np.uint64)
        self._cutoff: int | None = None

    def add(self, texts: list[str]) -> None:
        values = np.asarray(list(dict.fromkeys(texts)), dtype=object)
        if not len(values):
            return
        first = pd.util.hash_array(values)
        if self._cutoff is not None:
            keep = first <= np.uint64(self._cutoff)
            values, first = values[keep], first[keep]
        second = pd.util.hash_array(values, hash_key=self._SECOND_KEY)
        self.texts = np.concatenate([self.texts, values])
        self.priority = np.concatenate([self.priority, np.stack([first, second], axis=1)])
        if len(self.texts) > self.limit + self.limit // 4:
            self._trim()

    def _trim(self) -> None:
        order = np.lexsort((self.priority[:, 1], self.priority[:, 0]))
        priority = self.priority[order]
        distinct = np.ones(len(order), dtype=bool)
        distinct[1:] = (priority[1:] != priority[:-1]).any(axis=1)
        order = order[distinct][: self.limit]
        self.texts, self.priority = self.texts[order], self.priority[order]
        if len(self.texts) >= self.limit:
            self._cutoff = int(self.priority[-1, 0])

    def merge(self, other: VocabSample) -> None:
        """Takes in another sample: the result is the sample of both inputs together."""
        self.texts = np.concatenate([self.texts, other.texts])
        self.priority = np.concatenate([self.priority, other.priority])
        self._trim()

    def sentences(self) -> list[str]:
        self._trim()
        return [t for t in self.texts.tolist() if t.strip()]


class LengthHistogram:
    """Token-length counts (EOS included), so percentiles need no per-example memory."""

    def __init__(self) -> None:
        self.counts = np.zeros(64, dtype=np.int64)

    def add(self, lengths: np.ndarray) -> None:
        if len(lengths) == 0:
            return
        top = int(lengths.max())
        if top >= len(self.counts):
            self.counts = np.pad(self.counts, (0, top + 1 - len(self.counts)))
        self.counts += np.bincount(lengths, minlength=len(self.counts))

    def merge(self, other: LengthHistogram) -> None:
        if len(other.counts) > len(self.counts):
            self.counts = np.pad(self.counts, (0, len(other.counts) - len(self.counts)))
        self.counts[: len(other.counts)] += other.counts

    def summary(self) -> dict[str, int]:
        total = int(self.counts.sum())
        if total == 0:
            return {f"p{p}": 0 for p in PERCENTILES} | {"max": 0}
        cumulative = np.cumsum(self.counts)
        out = {f"p{p}": int(np.searchsorted(cumulative, np.ceil(total * p / 100))) for p in PERCENTILES}
        out["max"] = int(np.nonzero(self.counts)[0][-1])
        return out


@dataclasses.dataclass
class Plan:
    """What a datagen run has to do: the problem's components that are not complete, and
    whether the shared vocabulary is (re)made, from a source model or by training."""

    problem: Problem
    vocab_file: str
    source_vocab: bytes | None
    need_vocab: bool
    fingerprints: dict[str, str]
    pending: list[Text2TextProblem]
    complete: list[Text2TextProblem]

    def skipped_summaries(self) -> list[str]:
        return [f"{task.name}: complete, skipped (use --overwrite to regenerate)" for task in self.complete]


def plan(problem: Problem, options: Options, look: bool = True) -> Plan:
    """Which components need generating; the same decision for the local and Beam runs.

    Without `look`, data_dir is not read (all of it is to be made): a dry run's plan.
    """
    if not look:
        tasks = [task for task, _ in problem.components()]
        fingerprints = {task.name: "" for task in tasks}
        source = vocabulary_source(problem, options.vocab_from, options.vocab_extra_ids)
        return Plan(problem, problem.vocab_file(options.data_dir), source, True, fingerprints, tasks, [])
    tasks = [task for task, _ in problem.components()]
    vocab_file = problem.vocab_file(options.data_dir)
    source_vocab = vocabulary_source(problem, options.vocab_from, options.vocab_extra_ids)
    need_vocab = (
        options.overwrite
        or not fs.exists(vocab_file)
        or _differs(vocab_file, source_vocab)
        or _vocab_described_otherwise(tasks, options)
    )
    fingerprints = {task.name: source_fingerprint(task, options) for task in tasks}
    pending = [
        task
        for task in tasks
        if need_vocab or not is_complete(task, options.data_dir, fingerprints[task.name], vocab_file)
    ]
    complete = [task for task in tasks if task not in pending]
    return Plan(problem, vocab_file, source_vocab, need_vocab, fingerprints, pending, complete)


def generate(problem: Problem, options: Options) -> list[str]:
    """Generates every component of `problem` that is not complete; returns summary lines."""
    if fs.is_remote(options.data_dir):
        raise UserError(
            f"--data_dir={options.data_dir}: the local run writes local files; a remote data_dir takes "
            "--beam_runner (FnApiRunner runs the pipeline in this process)"
        )
    with holding(problem, options.data_dir):
        work = plan(problem, options)
        for task in work.pending + work.complete:  # what a killed run left, complete components' too
            shutil.rmtree(_work_dir(task, options), ignore_errors=True)
        summaries = work.skipped_summaries()
        if not work.pending:
            return summaries
        for task in work.pending:
            remove_outputs(task, options.data_dir)
        _keep_freed_memory()
        # Millions of short-lived strings and lists, no reference cycles: the automatic
        # cyclic collector would keep rescanning them, costing a large share of the run
        # time. The chunk loops collect the young generations themselves instead.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return summaries + _generate(
                problem, options, work.pending, work.vocab_file, work.source_vocab, work.need_vocab, work.fingerprints
            )
        except OSError as exc:
            if exc.filename is None:  # a write into the work directory or a bucket: name where it went
                raise OSError(exc.errno, exc.strerror or str(exc), options.data_dir) from None
            raise
        finally:
            if gc_was_enabled:
                gc.enable()


def holding(problem: Problem, data_dir: str) -> contextlib.AbstractContextManager[None]:
    """Holds data_dir's locks of every component of `problem` and of its vocabulary, so two
    runs never write one problem's shards, work directory or vocabulary at once (both
    runners take them; `t2tcli.io.lock` says what they guarantee where)."""
    vocab_name = os.path.basename(problem.vocab_file(data_dir))
    names = [(f".{task.name}.lock", f"problem {task.name}") for task, _ in problem.components()]
    return lock.hold_all(data_dir, [*names, (f".{vocab_name}.lock", f"vocabulary {vocab_name}")])


def _keep_freed_memory() -> None:
    """Has glibc keep freed memory for reuse instead of handing it back to the system at once.

    Every batch allocates and frees several MiB of arrays. With glibc's defaults most of
    that is unmapped or trimmed when freed and faulted in again, page by page, for the
    next batch: a fifth of the run time went to the kernel. Keeping up to 64 MiB of
    freed memory removes nearly all of it and adds a few MiB to peak memory. The
    setting lasts for the process; other C libraries are left alone.
    """
    if platform.libc_ver()[0] != "glibc":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # blocks up to this size come from the reusable heap
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)  # free memory the heap keeps before shrinking


def _generate(
    problem: Problem,
    options: Options,
    pending: list[Text2TextProblem],
    vocab_file: str,
    source_vocab: bytes | None,
    need_vocab: bool,
    fingerprints: dict[str, str],
) -> list[str]:
    summaries: list[str] = []
    if not need_vocab:  # one pass: rows go from the source straight to the shards, without a spool
        for task in pending:
            start = time.monotonic()
            writer = ShardWriter(task, _work_dir(task, options), vocab_file, options)
            try:
                spool = read_task(task, options, fingerprints[task.name], None, writer)
                meta = writer.finish(spool)
            finally:
                writer.close()
                shutil.rmtree(_work_dir(task, options), ignore_errors=True)
            summaries.append(summary_line(meta, time.monotonic() - start))
        return summaries
    sample = VocabSample(problem.vocab.max_training_sentences) if source_vocab is None else None
    seconds = {task.name: 0.0 for task in pending}
    spools = {}
    try:
        for task in pending:
            start = time.monotonic()
            spools[task.name] = read_task(task, options, fingerprints[task.name], sample)
            seconds[task.name] += time.monotonic() - start
        start = time.monotonic()
        make_vocabulary(problem, vocab_file, source_vocab, sample)
        for task in pending:  # the shared vocabulary's cost, spread by share of rows
            share = spools[task.name].rows / max(1, sum(s.rows for s in spools.values()))
            seconds[task.name] += share * (time.monotonic() - start)
        for task in pending:
            start = time.monotonic()
            meta = write_task(task, spools[task.name], vocab_file, options)
            seconds[task.name] += time.monotonic() - start
            summaries.append(summary_line(meta, seconds[task.name]))
    finally:
        for spool in spools.values():
            shutil.rmtree(spool.work_dir, ignore_errors=True)
    return summaries


def source_fingerprint(task: Text2TextProblem, options: Options) -> str:
    """Changes whenever the outputs would: the input files, the problem's code and settings,
    the shard counts and the vocabulary's description."""
    sources = split_sources(task, options)
    parts = {split: src.fingerprint() for split, src in sources.items()}
    parts["problem"] = f"{task.name}:dev_fraction={task.dev_fraction}"
    parts["code"] = code_fingerprint(task)
    parts["vocab"] = vocab_description(task, options)
    parts["shards"] = json.dumps(num_shards(task, options), sort_keys=True)
    return "sha256:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def code_fingerprint(task: Text2TextProblem) -> str:
    """A hash of the source files defining the problem's class and its bases (outside
    t2tcli itself): editing `preprocess`, or a helper beside it, regenerates the data."""
    digest = hashlib.sha256()
    for cls in type(task).__mro__:
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None)
        if not path or cls.__module__.startswith("t2tcli.") or cls is object:
            continue
        try:
            digest.update(inspect.getsource(module).encode())
        except (OSError, TypeError):  # a class made at run time: its name is all there is
            digest.update(cls.__qualname__.encode())
    return digest.hexdigest()


def split_sources(task: Text2TextProblem, options: Options) -> dict[str, Source]:
    sources = task.source(options.tmp_dir)
    if isinstance(sources, Source):
        sources = {"train": sources}
    if not isinstance(sources, dict) or not all(isinstance(s, Source) for s in sources.values()):
        raise UserError(f"problem '{task.name}': source() must return a Source or a dict of them by split")
    unknown = set(sources) - {"train", "dev", "test"}
    if unknown or "train" not in sources:
        raise UserError(f"problem '{task.name}': source() splits {sorted(sources)}; expected train [, dev, test]")
    return sources


def num_shards(task: Text2TextProblem, options: Options) -> dict[str, int]:
    counts = {"train": 1, "dev": 1, "test": 1} | dict(task.num_shards)
    if options.num_train_shards:
        counts["train"] = options.num_train_shards
    return counts


def file_sha256(path: str) -> str:
    return "sha256:" + hashlib.sha256(fs.read_bytes(path)).hexdigest()


def is_complete(task: Text2TextProblem, data_dir: str, fingerprint: str, vocab_file: str) -> bool:
    if not fs.exists(meta_path(data_dir, task.name)) or not fs.exists(vocab_file):
        return False
    try:
        meta = read_meta(data_dir, task.name)
    except (json.JSONDecodeError, UserError):
        return False
    if meta.get("source_fingerprint") != fingerprint or meta.get("vocab_sha256") != file_sha256(vocab_file):
        return False
    for split in meta.get("splits", {}).values():
        sizes = split.get("bytes") or [None] * len(split.get("files", []))
        for name, size in zip(split.get("files", []), sizes, strict=True):
            path = os.path.join(data_dir, name)
            if not fs.exists(path) or (size is not None and fs.getsize(path) != size):
                return False
    return True


def remove_outputs(task: Text2TextProblem, data_dir: str) -> None:
    """Removes the meta file first (so nothing looks complete), then stale shards of any count."""
    for path in [meta_path(data_dir, task.name)] + sorted(
        fs.glob_in(data_dir, f"{glob.escape(task.name)}-*-[0-9]*-of-[0-9]*")
    ):
        if fs.exists(path):
            fs.remove(path)


def _progress(options: Options, desc: str, total: int | None = None) -> tqdm:
    enabled = sys.stderr.isatty() if options.progress is None else options.progress
    return tqdm(total=total, desc=desc, unit=" rows", unit_scale=True, disable=not enabled, leave=False)


def _blank_mask(frame: pd.DataFrame, required: tuple[str, ...]) -> np.ndarray:
    blank = np.zeros(len(frame), dtype=bool)
    for column in required:
        values = frame[column].tolist()
        blank |= np.fromiter(map(len, values), dtype=np.int64, count=len(values)) == 0
        blank |= np.fromiter(map(str.isspace, values), dtype=bool, count=len(values))
    return blank


def _failing_line(task: Text2TextProblem, frame: pd.DataFrame, lines: np.ndarray) -> str:
    """'line N' of the first record that `preprocess` fails on, to point the user at it."""
    for line, record in zip(lines.tolist(), frame.to_dict("records"), strict=True):
        try:
            task.preprocess(record)
        except Exception:  # noqa: BLE001 - looking for the culprit only
            return f"line {line}"
    return f"lines {lines[0]}-{lines[-1]}" if len(lines) else "an empty chunk"


def _pairs(
    preprocess: ChunkPreprocessor, frame: pd.DataFrame, lines: np.ndarray, origin: str
) -> tuple[np.ndarray, list[str], list[str]]:
    """Preprocessed (kept mask, inputs, targets) of a chunk; a None input drops a record.

    A failure in the problem's code becomes a one-line error naming the record's line.
    """
    task = preprocess.task
    try:
        inputs, targets = preprocess(frame)
    except UserError as exc:
        raise UserError(f"{origin}: {_failing_line(task, frame, lines)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a bug in the problem's code, reported with the record
        raise UserError(
            f"{origin}: {_failing_line(task, frame, lines)}: preprocessing for problem '{task.name}' failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    kept = np.ones(len(inputs), dtype=bool)
    if type(None) in set(map(type, inputs)):  # one C-level pass; a per-row test only when some are dropped
        kept = np.fromiter((i is not None for i in inputs), dtype=bool, count=len(inputs))
        picked = np.nonzero(kept)[0].tolist()
        inputs, targets = [inputs[i] for i in picked], [targets[i] for i in picked]
    for name, values in (("inputs", inputs), ("targets", targets)):
        types = set(map(type, values))
        if not types <= {str}:
            wrong = sorted(t.__name__ for t in types - {str})
            raise UserError(f"problem '{task.name}': preprocess gave {name} of type {', '.join(wrong)}, expected str")
    return kept, inputs, targets


def _work_dir(task: Text2TextProblem, options: Options) -> str:
    return os.path.join(options.data_dir, f".{task.name}.work")


@dataclasses.dataclass
class SplitChunk:
    """Part of a source chunk that went to one split: preprocessed pairs and where they came from."""

    split: str
    hashes: np.ndarray  # of each row's key: where it goes (split, shard)
    inputs: list[str]
    targets: list[str]
    frame: pd.DataFrame  # the raw records of the whole chunk (blank and dropped ones excluded)
    rows: np.ndarray  # the rows of `frame` that are this part's pairs, in order
    positions: np.ndarray  # each pair's record's place in its source part (file, range), for ordering


def split_chunks(task: Text2TextProblem, options: Options, reports: list[SourceReport]) -> Iterator[SplitChunk]:
    """Stages read, skip, preprocess and split of pass 1: every source chunk's pairs, each
    part tagged with its split. Skipped rows and drops are counted into `reports`."""
    read_options = read_options_of(options)
    sources = split_sources(task, options)
    preprocess = ChunkPreprocessor(task)
    with _progress(options, f"{task.name}: reading") as bar:
        for source_split, source in sources.items():
            report = SourceReport(source.origin, source_split)
            reports.append(report)
            for chunk in source.chunks(read_options):
                gc.collect(1)  # cycles from the previous chunk: young objects only, cheap
                bar.update(len(chunk.frame))
                yield from chunk_parts(task, sources, source_split, chunk, preprocess, report)
            check_skipped(task, source, report)


def read_options_of(options: Options, parts: int = 1) -> ReadOptions:
    return ReadOptions(chunk_rows=options.chunk_rows, tfds_data_dir=options.tfds_data_dir, parts=parts)


def chunk_parts(
    task: Text2TextProblem,
    sources: dict[str, Source],
    source_split: str,
    chunk: Any,
    preprocess: ChunkPreprocessor,
    report: SourceReport,
) -> list[SplitChunk]:
    """One chunk through the stages skip, preprocess and split: its pairs by split (one
    part, or train and dev when the source is split by hash), counted into `report`."""
    source = sources[source_split]
    report.rows += len(chunk.frame)
    keep = ~_blank_mask(chunk.frame, source.required)
    if not keep.all():
        skipped_lines = chunk.lines[~keep]
        report.skipped += len(skipped_lines)
        room = SKIPPED_LINES_REPORTED - len(report.first_skipped_lines)
        report.first_skipped_lines.extend(skipped_at(chunk, source, skipped_lines[:room]))
    frame = chunk.frame[keep].reset_index(drop=True)
    kept, inputs, targets = _pairs(preprocess, frame, chunk.lines[keep], chunk.origin or source.origin)
    report.filtered += int((~kept).sum())
    keys = chunk.keys[keep][kept]
    hashes = pd.util.hash_array(np.asarray(keys, dtype=object if keys.dtype == object else None))
    rows = np.flatnonzero(kept)
    positions = chunk.first_row + np.flatnonzero(keep)[rows]
    if not (source_split == "train" and "dev" not in sources):
        return [SplitChunk(source_split, hashes, inputs, targets, frame, rows, positions)]
    is_dev = (hashes % np.uint64(_DEV_BUCKETS)) < np.uint64(int(round(task.dev_fraction * _DEV_BUCKETS)))
    parts = []
    for split, mask in (("train", ~is_dev), ("dev", is_dev)):
        picked = np.flatnonzero(mask)
        part = picked.tolist()
        parts.append(
            SplitChunk(
                split,
                hashes[mask],
                [inputs[i] for i in part],
                [targets[i] for i in part],
                frame,
                rows[picked],
                positions[picked],
            )
        )
    return parts


def skipped_at(chunk: Any, source: Source, lines: np.ndarray) -> list[int | str]:
    """Where skipped records are, for reports: their lines, with the file's name when the
    source is a glob of several files."""
    if chunk.origin in ("", source.origin):
        return [int(n) for n in lines]
    return [f"{os.path.basename(chunk.origin)}:{int(n)}" for n in lines]


def split_records(task: Text2TextProblem, options: Options, split: str) -> Iterator[dict[str, str]]:
    """The raw records whose examples datagen writes to `split`, in the order it writes them
    (one shard; train shards are shuffled): what t2t-decode is given to check it formats
    lines as training did."""
    for part in split_chunks(task, options, []):
        if part.split == split:
            yield from part.frame.iloc[part.rows].to_dict("records")


def read_task(
    task: Text2TextProblem,
    options: Options,
    fingerprint: str,
    sample: VocabSample | None,
    writer: ShardWriter | None = None,
) -> Spool:
    """Pass 1: source -> skipped/filtered counts, split assignment, text spool, vocab sample.

    With a `writer` (the vocabulary exists already), rows go to it instead of the spool.
    """
    work_dir = _work_dir(task, options)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    spool = Spool(work_dir, fingerprint)
    handles: dict[str, Any] = {}
    failed = True
    try:
        for part in split_chunks(task, options, spool.reports):
            split, inputs, targets = part.split, part.inputs, part.targets
            if writer is not None:
                writer.add(split, part.hashes, inputs, targets)
            else:
                if split not in handles:
                    spool.files[split] = os.path.join(work_dir, f"{split}.spool")
                    handles[split] = open(spool.files[split], "wb")  # noqa: SIM115 - closed below
                pickle.dump((part.hashes, inputs, targets), handles[split], protocol=pickle.HIGHEST_PROTOCOL)
            spool.counts[split] = spool.counts.get(split, 0) + len(inputs)
            if split == "train" and sample is not None:
                sample.add(inputs)
                sample.add(targets)
        failed = False
    finally:
        for handle in handles.values():
            handle.close()
        if failed:  # nothing of a failed run stays behind
            shutil.rmtree(work_dir, ignore_errors=True)
    if not spool.counts.get("train"):
        raise UserError(f"problem '{task.name}': no train examples from {split_sources(task, options)['train'].origin}")
    return spool


def check_skipped(task: Text2TextProblem, source: Source, report: SourceReport) -> None:
    if not report.skipped:
        return
    lines = ", ".join(map(str, report.first_skipped_lines))
    more = ", ..." if report.skipped > len(report.first_skipped_lines) else ""
    fields = "/".join(source.required)
    message = (
        f"{report.origin}: skipped {report.skipped} of {report.rows} rows with an empty required field "
        f"({fields}) at lines {lines}{more}"
    )
    if report.skipped > task.max_skipped_fraction * report.rows:
        raise UserError(
            f"{message}; that is more than {task.max_skipped_fraction:.2%} of the rows "
            f"(max_skipped_fraction of problem '{task.name}'): fix the file or raise the limit"
        )
    logging.warning("%s: %s", task.name, message)


def vocabulary_source(problem: Problem, override: str | None = None, extra_ids: int | None = None) -> bytes | None:
    """The SentencePiece model the problem's vocabulary is copied from, as it will be
    written (sentinels included); None when it is trained on the data.

    `override` (t2t-datagen --vocab_from) replaces the problem's own source: a
    SentencePiece model file, or a Hugging Face model directory (its spiece.model and
    sentinels), so a problem can be generated for a pretrained model without editing it.
    `extra_ids` (--vocab_extra_ids) is how many T5 sentinels a model file gets: T5's
    released sentencepiece.model has none, its checkpoints' 32,128 rows need 100.
    """
    spec = problem.vocab
    if extra_ids is not None:
        spec = dataclasses.replace(spec, extra_ids=extra_ids)
    path = override or spec.source
    if path is None:
        return None
    what = "--vocab_from" if override else f"the vocabulary of problem '{problem.name}'"
    from t2tcli import hf_t5

    if "://" in path:  # e.g. T5's gs://t5-data/vocabs/...: through TensorFlow's file system
        from t2tcli.compat import tf

        if not tf.io.gfile.exists(path):
            raise UserError(f"{path} ({what}) not found")
        with tf.io.gfile.GFile(path, "rb") as f:
            proto = with_sentinels(f.read(), spec.extra_ids)
    elif not os.path.exists(path):
        raise UserError(f"{path} ({what}) not found")
    elif hf_t5.is_model_dir(path):
        proto = hf_t5.open_model(path).vocabulary_proto()
    elif os.path.isdir(path):
        raise UserError(
            f"{path} ({what}): a directory without {hf_t5.CONFIG}; "
            "expected a SentencePiece .model file or a Hugging Face model directory"
        )
    else:
        with open(path, "rb") as f:
            proto = with_sentinels(f.read(), spec.extra_ids)
    check_layout(proto, path)
    return proto


def vocab_description(problem: Problem, options: Options) -> str:
    """What the vocabulary is made from, recorded in meta.json: a change remakes it."""
    extra = f" with {options.vocab_extra_ids} extra ids" if options.vocab_extra_ids is not None else ""
    return repr(problem.vocab) + (f" from {options.vocab_from}" if options.vocab_from else "") + extra


def _vocab_described_otherwise(tasks: list[Text2TextProblem], options: Options) -> bool:
    """Whether a generated task's meta file records another vocabulary description."""
    for task in tasks:
        try:
            recorded = read_meta(options.data_dir, task.name).get("vocab_description")
        except (UserError, json.JSONDecodeError):
            continue
        if recorded is not None and recorded != vocab_description(task, options):
            return True
    return False


def _differs(vocab_file: str, proto: bytes | None) -> bool:
    """Whether an existing vocabulary file is not the one a source would write."""
    if proto is None or not fs.exists(vocab_file):
        return False
    return fs.read_bytes(vocab_file) != proto


def make_vocabulary(problem: Problem, vocab_file: str, source: bytes | None, sample: VocabSample | None) -> None:
    """Writes the problem's vocabulary: `source` as it is, or one trained on `sample`."""
    if source is None:
        assert sample is not None
        source = trained_vocabulary(problem, sample, vocab_file)
    write_model(source, vocab_file)


def trained_vocabulary(problem: Problem, sample: VocabSample, vocab_file: str) -> bytes:
    """The SentencePiece model (sentinels included) trained on `sample` for `vocab_file`."""
    spec = problem.vocab
    sentences = sample.sentences()
    logging.info(
        "training vocabulary %s on %d distinct texts (train inputs and targets, duplicates and blanks left out)",
        vocab_file,
        len(sentences),
    )
    return trained_model(
        sentences,
        vocab_file,
        vocab_size=spec.size,
        model_type=spec.model_type,
        user_defined_symbols=spec.user_defined_symbols,
        character_coverage=spec.character_coverage,
        sentinels=spec.extra_ids,
        keep_whitespace=spec.keep_whitespace,
    )


def _spool_chunks(path: str) -> Iterator[tuple[np.ndarray, list[str], list[str]]]:
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def encoded_blocks(
    text_encoder: PackedTextEncoder, inputs: list[str], targets: list[str]
) -> Iterator[tuple[slice, Any, np.ndarray, Any, np.ndarray]]:
    """`ENCODE_ROWS` pairs at a time: (their slice, packed inputs, input lengths, packed
    targets, target lengths), lengths counting the EOS the records append."""
    for start in range(0, len(inputs), ENCODE_ROWS):
        block = slice(start, start + ENCODE_ROWS)
        packed_inputs, input_lengths = text_encoder.encode(inputs[block])
        packed_targets, target_lengths = text_encoder.encode(targets[block])
        yield block, packed_inputs, input_lengths + 1, packed_targets, target_lengths + 1


class ShardWriter:
    """Pass 2 for one problem: rows -> encoded, bucketed, shuffled shards; then the meta file, last.

    Rows come split by split from the spool once the vocabulary is trained, or straight
    from pass 1 when it existed already; the output is the same either way.
    """

    def __init__(self, task: Text2TextProblem, work_dir: str, vocab_file: str, options: Options) -> None:
        self.task, self.work_dir, self.vocab_file, self.options = task, work_dir, vocab_file, options
        self.vocab = Vocabulary(vocab_file)
        self.text_encoder = PackedTextEncoder(self.vocab)
        self.example_encoder = shards.ExampleEncoder()
        self.counts = num_shards(task, options)
        self.lengths = {"inputs": LengthHistogram(), "targets": LengthHistogram()}
        self.buckets: dict[str, shards.SplitBuckets] = {}

    def add(self, split: str, hashes: np.ndarray, inputs: list[str], targets: list[str]) -> None:
        """Encodes rows into the split's buckets, `ENCODE_ROWS` at a time."""
        if split not in self.buckets:
            self.buckets[split] = shards.SplitBuckets(self.work_dir, split, self.counts[split])
        for block, packed_inputs, input_lengths, packed_targets, target_lengths in encoded_blocks(
            self.text_encoder, inputs, targets
        ):
            self.lengths["inputs"].add(input_lengths)
            self.lengths["targets"].add(target_lengths)
            # Records made in shard order land in their buckets as contiguous runs of bytes.
            shard_ids = shards.shard_of(hashes[block], self.counts[split])
            order = np.argsort(shard_ids, kind="stable")
            records = self.example_encoder.records(packed_inputs.take(order), packed_targets.take(order))
            self.buckets[split].add(shard_ids[order], records)

    def close(self) -> None:
        for buckets in self.buckets.values():
            buckets.close()

    def finish(self, spool: Spool) -> dict[str, Any]:
        """Writes every split's shards, then the meta file; returns the meta."""
        self.close()
        task, options = self.task, self.options
        splits_meta: dict[str, Any] = {}
        for split in ("train", "dev", "test"):
            if split not in self.buckets:
                continue
            count = self.counts[split]
            files = []
            for index, bucket in enumerate(self.buckets[split].paths):
                path = shard_path(options.data_dir, task.name, split, index, count)
                seed = shards.shuffle_seed(task.name, split, str(index)) if split == "train" else None
                shards.write_shard(bucket, path, seed)
                os.remove(bucket)
                files.append(os.path.basename(path))
            sizes = [os.path.getsize(os.path.join(options.data_dir, f)) for f in files]
            splits_meta[split] = {"examples": spool.counts[split], "shards": count, "files": files, "bytes": sizes}
        meta = build_meta(task, options, self.vocab_file, self.vocab.vocab_size, splits_meta, spool, self.lengths)
        write_meta(task, options, meta)
        return meta


def build_meta(
    task: Text2TextProblem,
    options: Options,
    vocab_file: str,
    vocab_size: int,
    splits_meta: dict[str, Any],
    spool: Spool,
    lengths: dict[str, LengthHistogram],
) -> dict[str, Any]:
    """The meta file's content: what was written, read, skipped and filtered, and from what."""
    return {
        "problem": task.name,
        "vocab_file": os.path.basename(vocab_path(options.data_dir, task.vocab.name)),
        "vocab_size": vocab_size,
        "vocab_sha256": file_sha256(vocab_file),
        "vocab_description": vocab_description(task, options),
        "splits": splits_meta,
        "rows_read": sum(r.rows for r in spool.reports),
        "skipped": {
            "total": sum(r.skipped for r in spool.reports),
            "sources": {
                r.split: {
                    "source": os.path.basename(r.origin),
                    "rows": r.rows,
                    "skipped": r.skipped,
                    "first_lines": r.first_skipped_lines,
                    "filtered": r.filtered,
                }
                for r in spool.reports
            },
        },
        "filtered": sum(r.filtered for r in spool.reports),
        "lengths": {name: histogram.summary() for name, histogram in lengths.items()},
        "lengths_include_eos": True,
        "metrics": list(task.metrics),
        "source_fingerprint": spool.fingerprint,
    }


def write_meta(task: Text2TextProblem, options: Options, meta: dict[str, Any]) -> None:
    atomic.write_bytes(
        meta_path(options.data_dir, task.name), (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
    )


def write_task(task: Text2TextProblem, spool: Spool, vocab_file: str, options: Options) -> dict[str, Any]:
    """Pass 2 from the spool: see `ShardWriter`."""
    writer = ShardWriter(task, spool.work_dir, vocab_file, options)
    try:
        with _progress(options, f"{task.name}: writing", total=sum(spool.counts.values())) as bar:
            for split in ("train", "dev", "test"):
                if split not in spool.files:
                    continue
                for hashes, inputs, targets in _spool_chunks(spool.files[split]):
                    gc.collect(1)
                    writer.add(split, hashes, inputs, targets)
                    bar.update(len(inputs))
        return writer.finish(spool)
    finally:
        writer.close()


def summary_line(meta: dict[str, Any], seconds: float) -> str:
    splits = ", ".join(f"{split} {info['examples']}" for split, info in meta["splits"].items())
    rows = meta["rows_read"]
    rate = rows / seconds if seconds > 0 else float("inf")
    return (
        f"{meta['problem']}: {rows} rows -> {splits}; skipped {meta['skipped']['total']}, "
        f"filtered {meta['filtered']}; {seconds:.1f} s, {rate:,.0f} rows/s"
    )
