"""Decoding and scoring many lines with one model start-up, in input order.

Starting an Estimator and building the Mesh TensorFlow graph costs far more than a
batch of decoding, so every line goes through ONE `predict` call fed by a generator.
The generator reads lines lazily, sorts a window of them by length (rows of similar
length finish decoding together), pads to static batches and remembers where each row
came from; results are put back in input order and written as soon as the next
line's result is known, so stdin -> stdout pipelines stream.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

import numpy as np
from absl import logging

from t2tcli import textio
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.vocab import EOS_ID, PAD_ID

Features = dict[str, np.ndarray]
# predict(batches, feature_shapes) -> one dict per row ({"outputs": ids, "scores": float}).
PredictFn = Callable[[Callable[[], Iterator[Features]], dict[str, tuple[int, int]]], Iterable[dict[str, Any]]]

# Rows sorted together: large enough that batches are of similar length, small enough
# that a stdin pipeline sees its first outputs early and memory stays flat.
SORT_WINDOW_BATCHES = 32
# How many truncated lines are named one by one before only the count is kept.
MAX_TRUNCATION_WARNINGS = 5


DECODE_KEYS = ("beam_size", "alpha", "temperature", "top_k", "max_decode_length")
# Which engine decodes (t2tcli.engines); the TF ones are the model_fn's (t2tcli.model).
ENGINES = ("auto", "fast", "mesh", "ctranslate2")
TF_ENGINES = ("auto", "fast", "mesh")


def default_decode_hparams(model_hparams: HParams | None = None) -> HParams:
    """Settings of --decode_hparams, starting from the model's own decode hparams.

    0 for a length means: the model's own length (targets_length / inputs_length).
    """
    hp = HParams(
        beam_size=1,
        alpha=0.6,
        temperature=0.0,
        top_k=0,
        batch_size=64,
        max_decode_length=0,
        max_input_length=0,
        # auto: CTranslate2 on a CPU where it is installed and decodes alike, else
        # t2tcli.fast_decode on one CPU / GPU, mesh-tensorflow's decode on TPUs and meshes
        # of several devices; fast, mesh or ctranslate2 ask for one (t2tcli.engines).
        engine="auto",
        # CTranslate2's weight type: float32 (the TF engines' results), int8, bfloat16, ...
        quantization="float32",
    )
    for key in DECODE_KEYS:
        if model_hparams is not None and key in model_hparams:
            hp.set_hparam(key, model_hparams.get(key))
    return hp


def parse_decode_hparams(text: str, model_hparams: HParams | None = None) -> HParams:
    """--decode_hparams over the model's decode settings, checked for contradictions."""
    hp = default_decode_hparams(model_hparams).parse(text)
    if hp.beam_size < 1:
        raise UserError(f"--decode_hparams: beam_size={hp.beam_size} must be >= 1")
    if hp.batch_size < 1:
        raise UserError(f"--decode_hparams: batch_size={hp.batch_size} must be >= 1")
    if hp.temperature < 0 or hp.top_k < 0:
        raise UserError("--decode_hparams: temperature and top_k must be >= 0")
    if hp.beam_size > 1 and (hp.temperature > 0 or hp.top_k > 0):
        raise UserError("--decode_hparams: beam search (beam_size > 1) does not sample; drop temperature/top_k")
    if hp.engine not in ENGINES:
        raise UserError(f"--decode_hparams: engine={hp.engine} is not one of {', '.join(ENGINES)}")
    from t2tcli.ct2_engine import QUANTIZATIONS

    if hp.quantization not in QUANTIZATIONS:
        raise UserError(f"--decode_hparams: quantization={hp.quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    return hp


def estimator_params(hp: HParams) -> dict[str, Any]:
    """The decode settings the engines read, from --decode_hparams."""
    return {k: hp.get(k) for k in (*DECODE_KEYS, "engine", "quantization")}


def input_formatter(problem: Any, raw: bool) -> Callable[[str], str]:
    """How a line becomes the model's input string: through the problem's preprocess, as
    training data was made (a line holds the problem's decode fields, tab-separated, e.g.
    'question1<TAB>question2'), or as it is with --raw_inputs."""
    if raw:
        return textio.unescape
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
    from t2tcli.preprocessing import DecodeLines

    return DecodeLines(problem)


@dataclasses.dataclass
class Row:
    """One non-empty input: its position in the input and its token ids."""

    index: int
    inputs: list[int]
    targets: list[int] | None = None


@dataclasses.dataclass
class Stats:
    lines: int = 0
    empty: int = 0
    output_tokens: int = 0
    truncated_inputs: int = 0
    truncated_targets: int = 0
    batches: int = 0
    # Steps the decode loops ran, summed over batches (None: the engine does not say).
    decode_steps: int | None = None
    # Rows those steps computed, and rows x steps had every row run every step (None:
    # the engine does not say).
    row_steps: int | None = None
    full_row_steps: int | None = None
    # Seconds the engine itself computed, summed over batches (None: the engine does not
    # say; one whose batches overlap could not): the rest of the decode time is
    # t2t-decode's own work around it.
    engine_seconds: float | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)
    first_batch: float | None = None
    last_batch: float | None = None
    finished: float | None = None

    def summary(self) -> str:
        end = self.finished or time.monotonic()
        total = end - self.started
        busy = end - (self.first_batch or self.started)
        rate = self.lines / busy if busy > 0 else 0.0
        tok_rate = self.output_tokens / busy if busy > 0 else 0.0
        steps = "" if self.decode_steps is None else f", {self.decode_steps} decode steps"
        if self.row_steps is not None and self.full_row_steps:
            # What finished lines leaving the loop saved.
            steps += f", {self.row_steps / self.full_row_steps:.0%} of their rows computed"
        if self.engine_seconds is not None and busy > 0:
            steps += f"; {self.engine_seconds:.2f} s of the {busy:.2f} s in the engine"
        return (
            f"{self.lines} lines ({self.empty} empty), {self.output_tokens} output tokens in {total:.1f} s "
            f"({total - busy:.1f} s start-up): {rate:.1f} sentences/s, {tok_rate:.1f} tokens/s; "
            f"{self.batches} batch{'' if self.batches == 1 else 'es'}{steps}"
        )

    def count_batch(self, prediction: dict[str, Any], rows: int) -> None:
        """Called with the first prediction of each batch. The time logged is since the
        previous batch's results, not the batch's own: an engine with two batches in
        flight (engines.session_predict) computed part of this one beside the last."""
        now = time.monotonic()
        seconds = now - (self.last_batch or self.first_batch or now)
        self.last_batch = now
        number = self.batches
        self.batches += 1
        if "engine_seconds" in prediction:
            self.engine_seconds = (self.engine_seconds or 0.0) + float(prediction["engine_seconds"])
        if "decode_steps" not in prediction:
            logging.debug("batch %d: %d rows, %.3f s after the previous batch's results", number, rows, seconds)
            return
        steps = int(prediction["decode_steps"])
        self.decode_steps = (self.decode_steps or 0) + steps
        if "decode_row_steps" in prediction:
            self.row_steps = (self.row_steps or 0) + int(prediction["decode_row_steps"])
            self.full_row_steps = (self.full_row_steps or 0) + steps * int(prediction["decode_loop_rows"])
        logging.debug(
            "batch %d: %d rows, %d decode steps, %.3f s after the previous batch's results",
            number,
            rows,
            steps,
            seconds,
        )


def fit(ids: list[int], length: int) -> tuple[list[int], bool]:
    """ids + EOS, cut to `length` (keeping the EOS); second value: whether it was cut."""
    if length and len(ids) + 1 > length:
        return ids[: length - 1] + [EOS_ID], True
    return ids + [EOS_ID], False


def _pad(rows: list[list[int]], length: int) -> np.ndarray:
    out = np.full((len(rows), length), PAD_ID, dtype=np.int32)
    for i, ids in enumerate(rows):
        out[i, : len(ids)] = ids
    return out


class Batcher:
    """Turns a stream of Rows into static-shape batches, remembering each row's origin.

    `plan` receives, for every yielded batch row, its Row (or None for padding) in the
    order the model sees them, so predictions can be matched back without the model
    carrying indices through its graph.
    """

    def __init__(self, rows: Iterable[Row], batch_size: int, inputs_length: int, targets_length: int | None) -> None:
        self.rows = rows
        self.batch_size = batch_size
        self.inputs_length = inputs_length
        self.targets_length = targets_length
        self.plan: collections.deque[Row | None] = collections.deque()
        self.on_first_batch: Callable[[], None] | None = None

    def shapes(self) -> dict[str, tuple[int, int]]:
        shapes = {"inputs": (self.batch_size, self.inputs_length)}
        if self.targets_length is not None:
            shapes["targets"] = (self.batch_size, self.targets_length)
        return shapes

    def __call__(self) -> Iterator[Features]:
        window: list[Row] = []
        for row in self.rows:
            window.append(row)
            if len(window) == self.batch_size * SORT_WINDOW_BATCHES:
                yield from self._batches(window)
                window = []
        yield from self._batches(window)

    def _batches(self, window: list[Row]) -> Iterator[Features]:
        window.sort(key=lambda r: (len(r.inputs), len(r.targets or ())), reverse=True)
        for start in range(0, len(window), self.batch_size):
            chunk: list[Row | None] = list(window[start : start + self.batch_size])
            chunk += [None] * (self.batch_size - len(chunk))
            self.plan.extend(chunk)
            if self.on_first_batch is not None:
                self.on_first_batch()
                self.on_first_batch = None
            features = {"inputs": _pad([r.inputs if r else [EOS_ID] for r in chunk], self.inputs_length)}
            if self.targets_length is not None:
                features["targets"] = _pad([r.targets if r else [EOS_ID] for r in chunk], self.targets_length)
            yield features


class OrderedWriter:
    """Writes results in input order as soon as every earlier line is done."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.next = 0
        self.pending: dict[int, str] = {}
        self.lock = threading.Lock()

    def put(self, index: int, text: str) -> None:
        with self.lock:
            self.pending[index] = text
            wrote = False
            while self.next in self.pending:
                self.out.write(self.pending.pop(self.next) + "\n")
                self.next += 1
                wrote = True
            if wrote:
                self.out.flush()

    def close(self, total: int) -> None:
        if self.pending or self.next != total:
            missing = total - self.next
            raise RuntimeError(f"{missing} results missing at line {self.next + 1}; the model returned too few rows")


@dataclasses.dataclass
class Job:
    """What to run: how lines become ids, and how many tokens fit."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    inputs_length: int
    targets_length: int
    batch_size: int
    format_input: Callable[[str], str] = textio.unescape
    source_name: str = "input"
    # Text past this many characters is cut before it is tokenized (0: never): a line of
    # megabytes would cost gigabytes to tokenize in full, and only its first tokens are kept.
    max_chars: int = 0

    def tokens(self, text: str) -> list[int]:
        """The ids of `text`, tokenized no further than `max_chars` characters.

        Whitespace runs are squeezed first in a text that long (SentencePiece's normalizer
        squeezes them anyway), so a run of spaces cannot hide the words after it.
        """
        if self.max_chars and len(text) > self.max_chars:
            text = " ".join(text.split())[: self.max_chars]
        return self.encode(text)


def _parse_line(line: str, index: int, job: Job, scoring: bool) -> tuple[str, str | None]:
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


def _rows(lines: Iterable[str], job: Job, writer: OrderedWriter, stats: Stats, scoring: bool) -> Iterator[Row]:
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
            targets, cut = fit(job.tokens(textio.unescape(target_text)), job.targets_length)
            stats.truncated_targets += cut
        yield Row(index, inputs, targets)


def run(lines: Iterable[str], out: TextIO, job: Job, predict: PredictFn, scoring: bool = False, progress=None) -> Stats:
    """Decodes (or, with `scoring`, scores) every line into `out`, one output line each.

    `progress`, when given, is called with the number of lines finished since its
    last call (e.g. a tqdm bar's `update`).
    """
    stats = Stats()
    writer = OrderedWriter(out)
    batcher = Batcher(
        _rows(lines, job, writer, stats, scoring),
        job.batch_size,
        job.inputs_length,
        job.targets_length if scoring else None,
    )

    def first_batch() -> None:
        stats.first_batch = time.monotonic()

    batcher.on_first_batch = first_batch
    done_before = 0
    for position, prediction in enumerate(predict(batcher, batcher.shapes())):
        if position % job.batch_size == 0:
            rows = sum(r is not None for r in itertools.islice(batcher.plan, job.batch_size))
            stats.count_batch(prediction, rows)
        row = batcher.plan.popleft()
        if row is None:
            continue
        if scoring:
            text = f"{float(prediction['scores']):.6g}"
        else:
            ids = [int(i) for i in np.asarray(prediction["outputs"]).reshape(-1)]
            n = ids.index(EOS_ID) if EOS_ID in ids else len(ids)
            stats.output_tokens += sum(1 for i in ids[:n] if i != PAD_ID)
            text = textio.escape(job.decode(ids))
        writer.put(row.index, text)
        if progress is not None and writer.next > done_before:
            progress(writer.next - done_before)
            done_before = writer.next
    if batcher.plan and any(r is not None for r in batcher.plan):
        raise RuntimeError("the model returned fewer rows than it was given")
    writer.close(stats.lines)
    if progress is not None and writer.next > done_before:
        progress(writer.next - done_before)
    stats.finished = time.monotonic()
    if stats.truncated_inputs:
        logging.warning(
            "%d of %d inputs were longer than %d tokens and were truncated",
            stats.truncated_inputs,
            stats.lines - stats.empty,
            job.inputs_length,
        )
    if stats.truncated_targets:
        logging.warning(
            "%d of %d targets were longer than %d tokens and were truncated (their scores cover the kept part)",
            stats.truncated_targets,
            stats.lines - stats.empty,
            job.targets_length,
        )
    return stats


def bucket(length: int, multiple: int = 16) -> int:
    return max(multiple, -(-length // multiple) * multiple)


def scan_lengths(lines: Iterable[str], job: Job, scoring: bool) -> tuple[int, int]:
    """Longest (inputs, targets) in tokens with EOS, for a file read before decoding.

    Mesh TensorFlow needs one static input length per predict call; padding every row
    to the model's maximum (e.g. 512) when the file's longest line is 30 tokens makes
    the encoder and every decoder step's attention do many times the work (fast_decode
    also cuts each batch to its own longest row; mesh-tensorflow's decode cannot). Format
    errors surface here, with the same line-numbered messages as during decoding.
    """
    longest_inputs = longest_targets = 1
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        text, target_text = _parse_line(line, index, job, scoring)
        longest_inputs = max(longest_inputs, len(job.tokens(text)) + 1)
        if target_text is not None:
            longest_targets = max(longest_targets, len(job.tokens(textio.unescape(target_text))) + 1)
    return longest_inputs, longest_targets


def predict_rows(
    rows: list[Row], predict: PredictFn, batch_size: int, inputs_length: int, targets_length: int | None = None
) -> list[dict[str, Any]]:
    """Runs `rows` (already id lists) through one predict call; results in `rows` order.

    Row.index must be the row's position in `rows`. With `targets_length`, the rows'
    targets are fed too (scoring).
    """
    batcher = Batcher(iter(rows), batch_size, inputs_length, targets_length)
    results: list[dict[str, Any] | None] = [None] * len(rows)
    for prediction in predict(batcher, batcher.shapes()):
        row = batcher.plan.popleft()
        if row is not None:
            results[row.index] = prediction
    missing = sum(r is None for r in results)
    if missing:
        raise RuntimeError(f"the model returned no result for {missing} of {len(rows)} rows")
    return results  # type: ignore[return-value]
