"""--tmp_dir as tensor2tensor's scratch: where a problem's raw files would be downloaded.

T2T scripts always pass --tmp_dir (often an empty /tmp/t2t_datagen). A built-in
problem that ships its raw data reads it from there only when its files are there;
otherwise it reads the copy it ships, and says so once, instead of failing on a file
the user was never asked to provide.
"""

from __future__ import annotations

from absl import logging

from t2tcli.data.datagen.options import Options, split_sources
from t2tcli.errors import UserError
from t2tcli.io import fs

BUILTIN_PREFIX = "t2tcli.builtin."


def _raw_files(sources: dict) -> list[str]:
    """The files or glob patterns the sources read (generated and TFDS sources read none)."""
    found = []
    for source in sources.values():
        found.extend(getattr(source, "patterns", ()) or ())
        path = getattr(source, "path", None)
        if path and not getattr(source, "patterns", None):
            found.append(path)
    return found


def _present(pattern: str) -> bool:
    if any(c in pattern for c in "*?["):
        return bool(fs.glob(pattern))
    return fs.exists(pattern)


def _falls_back(task, tmp_dir: str) -> str | None:
    """The raw file this built-in task misses in tmp_dir when the data it ships can stand
    in for it; None when tmp_dir serves (or nothing can stand in)."""
    if not type(task).__module__.startswith(BUILTIN_PREFIX):
        return None
    try:
        wanted = _raw_files(split_sources(task, Options(data_dir="", tmp_dir=tmp_dir)))
    except UserError:
        wanted = []
    missing = [path for path in wanted if not _present(path)]
    if not missing or len(missing) < len(wanted):
        return None  # every file is there, or some are: the user's own scratch, read as it is
    try:
        shipped = _raw_files(split_sources(task, Options(data_dir="", tmp_dir=None)))
    except UserError:
        return None  # nothing shipped: the error about tmp_dir stands
    return missing[0] if shipped and all(_present(path) for path in shipped) else None


def _reads_tmp_dir(task, tmp_dir: str) -> bool:
    try:
        return bool(_raw_files(split_sources(task, Options(data_dir="", tmp_dir=tmp_dir))))
    except UserError:
        return True


def raw_dir_for(problem, tmp_dir: str | None) -> str | None:
    """The tmp_dir datagen should read `problem`'s raw files from: `tmp_dir`, or None (the
    problem's shipped data) when tmp_dir holds none of a built-in problem's files and no
    other component of it reads tmp_dir."""
    if not tmp_dir:
        return tmp_dir
    misses = []
    for task, _ in problem.components():
        path = _falls_back(task, tmp_dir)
        if path:
            misses.append((task.name, path))
        elif _reads_tmp_dir(task, tmp_dir):
            return tmp_dir
    if not misses:
        return tmp_dir
    name, path = misses[0]
    logging.info(
        "problem %s: %s is not in --tmp_dir=%s; reading the data the problem ships instead",
        name,
        path.rsplit("/", 1)[-1],
        tmp_dir,
    )
    return None
