"""t2t-bleu --translations_dir: BLEU of each checkpoint's decode, as TensorBoard events.

A file named `*-STEP` in the directory is the decode of the checkpoint of that step. They
are scored oldest step first; each score goes to --event_dir as an event at that step
(tags BLEU_uncased / BLEU_cased plus --tag_suffix) and the step to
last_evaluated_step.txt there, so a rerun (or a run following a training with
--wait_minutes) scores only what is new.
"""

from __future__ import annotations

import dataclasses
import os
import time

from absl import logging

from t2tcli.errors import UserError

LAST_STEP_FILE = "last_evaluated_step.txt"
POLL_SECONDS = 10.0


@dataclasses.dataclass
class Settings:
    translations_dir: str
    event_dir: str
    variants: tuple[str, ...] = ("uncased", "cased")
    tag_suffix: str = ""
    min_steps: int = -1  # -1: the step after the last one event_dir recorded
    wait_minutes: float = 0
    report_zero: bool | None = None  # None: when scoring starts from step 0


def step_files(directory: str) -> list[tuple[int, str]]:
    """(step, path) of the files of `directory` named *-STEP, by step."""
    from t2tcli.io import fs

    found = []
    for name in fs.names_in(directory):
        head, dash, tail = name.rpartition("-")
        path = f"{directory.rstrip('/')}/{name}"
        if dash and head and tail.isdigit() and not fs.isdir(path):
            found.append((int(tail), path))
    return sorted(found)


def first_step(event_dir: str, min_steps: int) -> int:
    """--min_steps, or for -1 the step after the one last_evaluated_step.txt holds (0 without it)."""
    from t2tcli.io import fs

    if min_steps >= 0:
        return min_steps
    path = os.path.join(event_dir, LAST_STEP_FILE)
    if not fs.exists(path):
        return 0
    text = fs.read_bytes(path).decode("utf-8", "replace").strip()
    if not text.isdigit():
        raise UserError(f"{path}: expected the last evaluated step (a number), found {text[:40]!r}")
    return int(text) + 1


def _wait_for_dir(directory: str, wait_minutes: float) -> None:
    from t2tcli.io import fs

    deadline = time.monotonic() + wait_minutes * 60
    while not fs.isdir(directory):
        if time.monotonic() >= deadline:
            raise UserError(f"--translations_dir={directory}: no such directory")
        time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))


def score_dir(settings: Settings, reference: list[str]) -> int:
    """Scores every new translated file (waiting up to wait_minutes for each next one);
    returns how many were scored."""
    from t2tcli.compat import tf
    from t2tcli.evaluate import metrics
    from t2tcli.io import atomic, fs, text_files

    _wait_for_dir(settings.translations_dir, settings.wait_minutes)
    fs.makedirs(settings.event_dir)
    min_steps = first_step(settings.event_dir, settings.min_steps)
    report_zero = settings.report_zero if settings.report_zero is not None else min_steps == 0
    writer = tf.summary.create_file_writer(settings.event_dir)
    tags = {variant: f"BLEU_{variant}{settings.tag_suffix}" for variant in settings.variants}
    scored = 0
    deadline = time.monotonic() + settings.wait_minutes * 60
    with writer.as_default():
        while True:
            pending = [(step, path) for step, path in step_files(settings.translations_dir) if step >= min_steps]
            if not pending:
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
                continue
            if report_zero:
                for tag in tags.values():
                    tf.summary.scalar(tag, 0.0, step=0)
                report_zero = False
            step, path = pending[0]
            translation = list(text_files.read_lines(path, "translations_dir"))
            try:
                lines = metrics.t2t_bleu_lines(translation, reference)
            except UserError as exc:
                raise UserError(f"{path}: {exc}") from None
            for line in lines:
                name, _, value = line.partition("=")
                variant = name.strip()[len("BLEU_") :]
                if variant in tags:
                    tf.summary.scalar(tags[variant], float(value), step=step)
                    logging.info("%s: %s", path, line)
                    print(f"{path}: {line}", flush=True)
            writer.flush()
            with atomic.output(os.path.join(settings.event_dir, LAST_STEP_FILE), "w") as out:
                out.write(f"{step}\n")
            scored += 1
            min_steps = step + 1
            deadline = time.monotonic() + settings.wait_minutes * 60
    if not scored:
        logging.info("no translated file of step %d or later in %s", min_steps, settings.translations_dir)
    return scored
