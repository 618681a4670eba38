"""Incremental datagen: which of a problem's components a run (re)generates, and clearing
what it replaces.

A component is skipped when its meta file matches a fingerprint of everything its outputs
depend on (`source_fingerprint`) and the vocabulary; the vocabulary is remade when it is
missing, differs from its source or is described otherwise. The local and Beam runners
make the same decision here and hold the same locks. Imports: core, io and data
(layout, options, problem, vocab_sources and vocabulary.vocab).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import sys

from t2tcli.data import layout
from t2tcli.data.datagen.options import Options, num_shards, split_sources
from t2tcli.data.datagen.vocab_sources import differs, vocab_description, vocabulary_source
from t2tcli.data.problem import Problem, Text2TextProblem
from t2tcli.data.vocabulary.vocab import sentinel_count
from t2tcli.errors import UserError
from t2tcli.io import fs, lock


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

    Without `look`, neither data_dir nor the sources are read (all of it is to be made): a
    dry run's plan.
    """
    tasks = [task for task, _ in problem.components()]
    vocab_file = problem.vocab_file(options.data_dir)
    source_vocab = vocabulary_source(problem, options.vocab_from, options.vocab_extra_ids)
    _check_sentinels(tasks, problem, options, source_vocab)
    need_vocab = (
        not look
        or options.overwrite
        or not fs.exists(vocab_file)
        or differs(vocab_file, source_vocab)
        or _vocab_described_otherwise(tasks, options)
    )
    fingerprints = {task.name: source_fingerprint(task, options) if look else "" for task in tasks}
    pending = [
        task
        for task in tasks
        if need_vocab or not layout.is_complete(options.data_dir, task.name, fingerprints[task.name], vocab_file)
    ]
    complete = [task for task in tasks if task not in pending]
    return Plan(problem, vocab_file, source_vocab, need_vocab, fingerprints, pending, complete)


def _check_sentinels(tasks: list[Text2TextProblem], problem: Problem, options: Options, proto: bytes | None) -> None:
    """A self-supervised problem's vocabulary must end in T5's sentinels (its objective
    writes spans as <extra_id_N>); found out before anything is read."""
    corrupted = [task.name for task in tasks if task.objective is not None]
    if not corrupted:
        return
    if proto is not None:
        sentinels, origin = sentinel_count(proto), options.vocab_from or problem.vocab.source
    else:
        extra = options.vocab_extra_ids
        sentinels, origin = (problem.vocab.extra_ids if extra is None else extra), f"vocabulary '{problem.vocab.name}'"
    if sentinels <= 0:
        raise UserError(
            f"{origin}: no room for T5's sentinels (<extra_id_N>), which problem '{corrupted[0]}' writes noise "
            "spans as: pass --vocab_extra_ids=100 or give its VocabSpec extra_ids=100"
        )


def holding(problem: Problem, data_dir: str) -> contextlib.AbstractContextManager[None]:
    """Holds data_dir's locks of every component of `problem` and of its vocabulary, so two
    runs never write one problem's shards, work directory or vocabulary at once (both
    runners take them; `t2tcli.io.lock` says what they guarantee where)."""
    vocab_name = os.path.basename(problem.vocab_file(data_dir))
    names = [(f".{task.name}.lock", f"problem {task.name}") for task, _ in problem.components()]
    return lock.hold_all(data_dir, [*names, (f".{vocab_name}.lock", f"vocabulary {vocab_name}")])


def remove_outputs(task: Text2TextProblem, data_dir: str) -> None:
    """Removes the meta file first (so nothing looks complete), then stale shards of any count."""
    for path in [layout.meta_path(data_dir, task.name), *layout.shard_files(data_dir, task.name)]:
        if fs.exists(path):
            fs.remove(path)


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


def _vocab_described_otherwise(tasks: list[Text2TextProblem], options: Options) -> bool:
    """Whether a generated task's meta file records another vocabulary description."""
    for task in tasks:
        try:
            recorded = layout.read_meta(options.data_dir, task.name).get("vocab_description")
        except (UserError, json.JSONDecodeError):
            continue
        if recorded is not None and recorded != vocab_description(task, options):
            return True
    return False
