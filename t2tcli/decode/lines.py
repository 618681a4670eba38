"""Decoding and scoring many lines with one model start-up, in input order.

Lines are read lazily and become Rows of ids (t2tcli.decode.batching batches them for
one predict call); results are put back in input order and written as soon as the
next line's result is known, so stdin -> stdout pipelines stream. Empty lines are
answered with an empty line at once, and a bad line's error names it.

Imports: core, io, data, decode (batching, stats).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

import numpy as np
from absl import logging

from t2tcli.data.vocabulary.vocab import EOS_ID, PAD_ID
from t2tcli.decode.batching import SORT_WINDOW_BATCHES, Batcher, PredictFn, Row, fit
from t2tcli.decode.stats import Stats
from t2tcli.errors import UserError
from t2tcli.io import text_files

# How many truncated lines are named one by one before only the count is kept.
MAX_TRUNCATION_WARNINGS = 5


def input_formatter(problem: Any, raw: bool) -> Callable[[str], str]:
    """How a line becomes the model's input string: through the problem's preprocess, as
    training data was made (a line holds the problem's decode fields, tab-separated, e.g.
    'question1<TAB>question2'), or as it is with --raw_inputs."""
    if raw:
        return text_files.unescape
    if problem is None:
        raise UserError(
            "this model_dir was trained on no problem: pass --raw_inputs to feed lines as they are, "
            "or --problem=NAME to format them as that problem does"
        )
    if problem.is_mixture:
        names = ", ".join(task.name for task, _ in problem.components())
        raise UserError(
            f"problem '{problem.name}' is a mixture: pass --problem=<one of {names}> to format inputs as that "
            "problem does, or --raw_inputs to feed lines as they are"
        )
    from t2tcli.data.sources.preprocessing import DecodeLines

    return DecodeLines(problem)


@dataclasses.dataclass
class LineJob:
    """How the lines of one run become ids, and how many tokens fit."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    inputs_length: int
    targets_length: int
    # Rows per batch asked for; an input of fewer rows is decoded in a batch of its own size.
    batch_size: int
    format_input: Callable[[str], str] = text_files.unescape
    source_name: str = "input"
    # Text past this many characters is cut before it is tokenized (0: never): a line of
    # megabytes would cost gigabytes to tokenize in full, and only its first tokens are kept.
    max_chars: int = 0
    # Each line answered before the next is read (--decode_interactive): no read-ahead.
    interactive: bool = False
    # tensor2tensor's output forms: a line holds every beam, tab-separated, best first
    # (return_beams), each followed by its score (write_beam_scores).
    beam_scores: bool = False
    # What ends each output record: a newline, or tensor2tensor's decode hparam delimiter.
    delimiter: str = "\n"
    # How a score is written (a format spec): tensor2tensor's decoder writes its own precisions.
    score_format: str = ".6g"
    # A batch smaller than batch_size is rounded up to a multiple of this: the ways a
    # mesh splits the batch dimension.
    batch_multiple: int = 1
    # Called with the rows of a batch once they are known, before any is decoded: it
    # refuses a batch that could not fit in memory (t2tcli.decode.memory_bound).
    check_batch: Callable[[int], None] | None = None

    def tokens(self, text: str) -> list[int]:
        """The ids of `text`, tokenized no further than `max_chars` characters.

        Whitespace runs are squeezed first in a text that long (SentencePiece's normalizer
        squeezes them anyway), so a run of spaces cannot hide the words after it.
        """
        if self.max_chars and len(text) > self.max_chars:
            text = " ".join(text.split())[: self.max_chars]
        return self.encode(text)


class OrderedWriter:
    """Writes results in input order as soon as every earlier line is done."""

    def __init__(self, out: TextIO, end: str = "\n") -> None:
        self.out = out
        self.end = end
        self.next = 0
        self.pending: dict[int, str] = {}
        self.lock = threading.Lock()

    def put(self, index: int, text: str) -> None:
        with self.lock:
            self.pending[index] = text
            wrote = False
            while self.next in self.pending:
                self.out.write(self.pending.pop(self.next) + self.end)
                self.next += 1
                wrote = True
            if wrote:
                self.out.flush()

    def close(self, total: int) -> None:
        if self.pending or self.next != total:
            missing = total - self.next
            raise RuntimeError(f"{missing} results missing at line {self.next + 1}; the model returned too few rows")


def _parse_line(line: str, index: int, job: LineJob, scoring: bool) -> tuple[str, str | None]:
    """A non-empty input line -> (the model's input text, the target text when scoring).

    Errors name the line, so the scan before decoding and the decoding itself report
    a bad line identically.
    """
    target_text = None
    if scoring:
        line, sep, target_text = line.rpartition("\t")
        if not sep:
            raise UserError(f"{job.source_name}:{index + 1}: expected 'input<TAB>target'")
    try:
        return job.format_input(line), target_text
    except (UserError, ValueError) as exc:
        raise UserError(f"{job.source_name}:{index + 1}: {exc}") from None


def _rows(lines: Iterable[str], job: LineJob, writer: OrderedWriter, stats: Stats, scoring: bool) -> Iterator[Row]:
    """Non-empty lines as Rows; empty lines are answered at once with an empty line."""
    for index, line in enumerate(lines):
        stats.lines += 1
        if not line.strip():
            stats.empty += 1
            writer.put(index, "")
            continue
        text, target_text = _parse_line(line, index, job, scoring)
        ids = job.tokens(text)
        inputs, cut = fit(ids, job.inputs_length)
        if cut:
            stats.truncated_inputs += 1
            if stats.truncated_inputs <= MAX_TRUNCATION_WARNINGS:
                logging.warning(
                    "%s:%d: input of %d%s tokens truncated to %d",
                    job.source_name,
                    index + 1,
                    len(ids) + 1,
                    " or more" if job.max_chars and len(text) > job.max_chars else "",
                    job.inputs_length,
                )
        targets = None
        if target_text is not None:
            targets, cut = fit(job.tokens(text_files.unescape(target_text)), job.targets_length)
            stats.truncated_targets += cut
        yield Row(index, inputs, targets)


def _text(prediction: dict[str, Any], job: LineJob, stats: Stats, scoring: bool) -> str:
    """A row's output line: its score when scoring, else its decoded text (escaped)."""
    if scoring:
        return f"{float(prediction['scores']):{job.score_format}}"
    outputs = np.asarray(prediction["outputs"])
    beams = outputs.reshape(-1, outputs.shape[-1])  # one row, or every beam of return_beams
    scores = np.asarray(prediction.get("scores", 0.0), dtype=np.float64).reshape(-1)
    fields = []
    for rank, row in enumerate(beams.tolist()):
        if rank == 0:
            n = row.index(EOS_ID) if EOS_ID in row else len(row)
            stats.output_tokens += sum(1 for i in row[:n] if i != PAD_ID)
        fields.append(text_files.escape(job.decode(row), tabs=len(beams) > 1 or job.beam_scores))
        if job.beam_scores:
            fields.append(f"{scores[min(rank, len(scores) - 1)]:{job.score_format}}")
    return "\t".join(fields)


def run(
    lines: Iterable[str],
    out: TextIO,
    job: LineJob,
    predict: PredictFn,
    scoring: bool = False,
    progress: Callable[[int], Any] | None = None,
) -> Stats:
    """Decodes (or, with `scoring`, scores) every line into `out`, one output line each.

    `progress`, when given, is called with the number of lines finished since its
    last call (e.g. a tqdm bar's `update`).
    """
    stats = Stats()
    writer = OrderedWriter(out, job.delimiter)
    batcher = Batcher(
        _rows(lines, job, writer, stats, scoring),
        job.batch_size,
        job.inputs_length,
        job.targets_length if scoring else None,
        window_batches=1 if job.interactive else SORT_WINDOW_BATCHES,
        batch_multiple=job.batch_multiple,
    )

    def first_batch() -> None:
        stats.first_batch = time.monotonic()

    batcher.on_first_batch = first_batch
    done_before = 0
    shapes = batcher.shapes()
    if job.check_batch is not None:
        job.check_batch(batcher.batch_size)
    for position, prediction in enumerate(predict(batcher, shapes)):
        if position % batcher.batch_size == 0:
            rows = sum(r is not None for r in itertools.islice(batcher.plan, batcher.batch_size))
            stats.count_batch(prediction, rows)
        row = batcher.plan.popleft()
        if row is None:
            continue
        writer.put(row.index, _text(prediction, job, stats, scoring))
        if progress is not None and writer.next > done_before:
            progress(writer.next - done_before)
            done_before = writer.next
    if batcher.plan and any(r is not None for r in batcher.plan):
        raise RuntimeError("the model returned fewer rows than it was given")
    writer.close(stats.lines)
    if progress is not None and writer.next > done_before:
        progress(writer.next - done_before)
    stats.finished = time.monotonic()
    stats.warn_truncated(job.inputs_length, job.targets_length)
    return stats


def bucket(length: int, multiple: int = 16) -> int:
    return max(multiple, -(-length // multiple) * multiple)


def scan_lengths(lines: Iterable[str], job: LineJob, scoring: bool) -> tuple[int, int]:
    """Longest (inputs, targets) in tokens with EOS, for a file read before decoding.

    Mesh TensorFlow needs one static input length per predict call; padding every row
    to the model's maximum (e.g. 512) when the file's longest line is 30 tokens makes
    the encoder and every decoder step's attention do many times the work (the fast
    engine also cuts each batch to its own longest row; mesh-tensorflow's decode cannot).
    Format errors surface here, with the same line-numbered messages as during decoding.
    """
    longest_inputs = longest_targets = 1
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        text, target_text = _parse_line(line, index, job, scoring)
        longest_inputs = max(longest_inputs, len(job.tokens(text)) + 1)
        if target_text is not None:
            longest_targets = max(longest_targets, len(job.tokens(text_files.unescape(target_text))) + 1)
    return longest_inputs, longest_targets


def records(lines: Iterable[str], delimiter: str = "\n", limit: int = -1) -> Iterator[str]:
    """The decode inputs of an input file's lines: records ending at `delimiter` instead of
    a newline (a newline inside one becomes a space), only the first `limit` (-1: all):
    tensor2tensor's decode hparams `delimiter` and `num_samples`."""
    if delimiter != "\n":
        lines = _split_at(lines, delimiter)
    return itertools.islice(lines, limit) if limit >= 0 else iter(lines)


def _split_at(lines: Iterable[str], delimiter: str, max_chars: int = text_files.DECODE_LINE_BYTES) -> Iterator[str]:
    """Records ending at `delimiter`; one that never ends is kept to its first `max_chars`
    characters as it is read, not held whole."""
    held = ""
    for line in lines:
        parts = (held + line + "\n").split(delimiter)
        for part in parts[:-1]:
            yield part.replace("\n", " ").strip()
        held = parts[-1][:max_chars]
    if held.strip():
        yield held.replace("\n", " ").strip()
