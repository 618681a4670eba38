"""The names of every file in a data_dir, and what makes a problem's files there complete.

t2t-datagen writes these files and training, evaluation and decoding read them; all of them
find the files through this module, so each name and each glob is spelled once, and a shard
whose size differs from the one datagen recorded is caught by one check. data_dir may be
remote, so files are reached through `t2tcli.io.fs`. Imports: core, io and data (registry).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import Any

from t2tcli import registry
from t2tcli.errors import UserError
from t2tcli.io import fs, scratch

SPLITS = ("train", "dev", "test")
_INDEX = "[0-9]" * 5  # shard_path's `{index:05d}`


def vocab_path(data_dir: str, vocab_name: str) -> str:
    return os.path.join(data_dir, f"vocab.{vocab_name}.model")


def meta_path(data_dir: str, problem_name: str) -> str:
    return os.path.join(data_dir, f"{problem_name}.meta.json")


def shard_path(data_dir: str, problem_name: str, split: str, index: int, count: int) -> str:
    return os.path.join(data_dir, f"{problem_name}-{split}-{index:05d}-of-{count:05d}")


def shard_glob(problem_name: str, split: str = "*") -> str:
    """The names `shard_path` gives a problem's shards of `split` (of every split: "*")."""
    return f"{glob.escape(problem_name)}-{split}-{_INDEX}-of-{_INDEX}"


def shard_files(data_dir: str, problem_name: str, split: str = "*") -> list[str]:
    """The shards in data_dir of a problem's `split` (of every split: "*"), sorted."""
    return fs.glob_in(data_dir, shard_glob(problem_name, split))


def work_dir(data_dir: str, problem_name: str) -> str:
    """The local run's scratch directory of one problem (spool and shard buckets).

    It is always on the local disk: its files are appended to in small pieces and read
    back, which object stores do not do, and only the finished shards need to reach a
    remote data_dir. For a local data_dir it lies inside it (one file system, so renames
    stay cheap and a killed run's leftovers stay where the next run clears them); for a
    remote one, inside this user's private temporary directory, never at a name in the
    shared one that another user could take first.
    """
    if fs.is_remote(data_dir):
        where = hashlib.sha1(data_dir.rstrip("/").encode()).hexdigest()[:16]
        return os.path.join(scratch.user_temp_dir(), f"datagen-{where}.{problem_name}.work")
    return os.path.join(data_dir, f".{problem_name}.work")


def spool_path(work: str, split: str) -> str:
    """The file in a work directory that holds one split's text until the vocabulary exists."""
    return os.path.join(work, f"{split}.spool")


def bucket_path(work: str, split: str, index: int) -> str:
    """The bucket in a work directory that collects one shard's records before it is written."""
    return os.path.join(work, f"{split}.bucket{index:05d}")


def staging_name(problem_name: str, token: str = "*") -> str:
    """The name of a Beam run's staging directory, where its workers write shards before the
    launcher moves them into place (token "*": the glob of every run's)."""
    return f".beam-{problem_name}-{token}"


def read_meta(data_dir: str, problem_name: str) -> dict[str, Any]:
    path = meta_path(data_dir, problem_name)
    if not fs.exists(path):
        raise UserError(f"{path} not found; run t2t-datagen --problem={problem_name} --data_dir={data_dir} first")
    return json.loads(fs.read_bytes(path).decode("utf-8"))


def data_files(data_dir: str, problem_name: str, split: str) -> list[str]:
    """The complete shards of one split; a clear error when datagen has not produced them."""
    files = shard_files(data_dir, problem_name, split)
    if not files:
        raise UserError(
            f"no '{split}' data for problem '{problem_name}' in {data_dir}; "
            f"run t2t-datagen --problem={problem_name} --data_dir={data_dir} first"
        )
    _check_sizes(data_dir, problem_name, split, files)
    return files


def vocab_file(data_dir: str, problem_name: str) -> str:
    """The vocabulary a problem or mixture (its first component) was encoded with: the one
    its meta.json names, else the problem's own; a clear error when it is missing."""
    first = registry.problem(problem_name).components()[0][0]
    recorded = read_meta(data_dir, first.name).get("vocab_file")
    path = os.path.join(data_dir, recorded) if isinstance(recorded, str) else first.vocab_file(data_dir)
    if not fs.exists(path):
        raise UserError(f"vocabulary {path} not found; run t2t-datagen --problem={problem_name} --data_dir={data_dir}")
    return path


def training_vocab_file(data_dir: str, problem_name: str) -> str:
    """The vocabulary a training run of the problem reads (`vocab_file`), once the train
    shards of its first component are known to be complete."""
    path = vocab_file(data_dir, problem_name)
    data_files(data_dir, registry.problem(problem_name).components()[0][0].name, "train")
    return path


def recorded_sizes(split_meta: dict[str, Any]) -> dict[str, int | None]:
    """A meta file's shard names of one split, each with the size datagen recorded (None: none)."""
    sizes = split_meta.get("bytes") or []
    return {name: sizes[i] if i < len(sizes) else None for i, name in enumerate(split_meta.get("files", []))}


def size_mismatch(path: str, expected: int | None) -> int | None:
    """The size of the shard at `path` when it is not `expected` (None: it is, or nothing was recorded)."""
    if expected is None:
        return None
    size = fs.getsize(path)
    return None if size == expected else size


def _check_sizes(data_dir: str, problem_name: str, split: str, files: list[str]) -> None:
    """Each shard must have the size datagen recorded: a truncated or replaced shard is
    named here rather than failing deep inside TensorFlow's reader."""
    if not fs.exists(meta_path(data_dir, problem_name)):
        return
    try:
        recorded = recorded_sizes(read_meta(data_dir, problem_name).get("splits", {}).get(split, {}))
    except (UserError, json.JSONDecodeError):
        return
    for path in files:
        expected = recorded.get(os.path.basename(path))
        size = size_mismatch(path, expected)
        if size is not None:
            raise UserError(
                f"{path}: {size} bytes, but t2t-datagen wrote {expected}: the shard is truncated "
                f"or was replaced; t2t-datagen --problem={problem_name} --data_dir={data_dir} regenerates it"
            )


def file_sha256(path: str) -> str:
    return "sha256:" + hashlib.sha256(fs.read_bytes(path)).hexdigest()


def is_complete(data_dir: str, problem_name: str, fingerprint: str, vocab: str) -> bool:
    """Whether a problem's meta file matches `fingerprint` and the vocabulary file `vocab`,
    and names shards that all exist with their recorded sizes."""
    if not fs.exists(meta_path(data_dir, problem_name)) or not fs.exists(vocab):
        return False
    try:
        meta = read_meta(data_dir, problem_name)
    except (json.JSONDecodeError, UserError):
        return False
    if meta.get("source_fingerprint") != fingerprint or meta.get("vocab_sha256") != file_sha256(vocab):
        return False
    for split in meta.get("splits", {}).values():
        for name, size in recorded_sizes(split).items():
            path = os.path.join(data_dir, name)
            if not fs.exists(path) or size_mismatch(path, size) is not None:
                return False
    return True
