"""A directory staged through t2tcli.io.atomic appears whole, with the mode mkdir gives, or
not at all; what a failed or killed writer staged does not stay behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from t2tcli.io import atomic


def _names(directory) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_a_staged_directory_appears_whole_with_the_umasks_mode(tmp_path, umask_027):
    target = tmp_path / "out"
    with atomic.staged_directory(str(target)) as staging:
        assert not target.exists()
        with open(os.path.join(staging, "a.bin"), "wb") as f:
            f.write(b"x")
    assert _names(tmp_path) == ["out"] and (target / "a.bin").read_bytes() == b"x"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


def test_a_private_directory_keeps_its_mode(tmp_path, umask_027):
    with atomic.staged_directory(str(tmp_path / "code"), mode=0o700):
        pass
    assert stat.S_IMODE((tmp_path / "code").stat().st_mode) == 0o700


def test_a_failure_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic.staged_directory(str(tmp_path / "out")) as staging:
        open(os.path.join(staging, "half"), "wb").close()
        raise RuntimeError("interrupted")
    assert _names(tmp_path) == []


def test_an_empty_target_is_replaced_and_a_full_one_kept(tmp_path):
    (tmp_path / "empty").mkdir()
    with atomic.staged_directory(str(tmp_path / "empty")) as staging:
        open(os.path.join(staging, "new"), "wb").close()
    assert _names(tmp_path / "empty") == ["new"]
    with pytest.raises(FileExistsError), atomic.staged_directory(str(tmp_path / "empty")) as staging:
        open(os.path.join(staging, "other"), "wb").close()
    assert _names(tmp_path / "empty") == ["new"] and _names(tmp_path) == ["empty"]


def test_what_a_killed_writer_staged_is_cleared_by_the_next_one(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".out.tmp{int(dead.stdout)}.abc"
    running = tmp_path / f".out.tmp{os.getpid()}.abc"
    left.mkdir()
    running.mkdir()
    with atomic.staged_directory(str(tmp_path / "out")):
        pass
    assert _names(tmp_path) == [running.name, "out"]


def test_a_remote_directory_is_not_staged():
    with pytest.raises(ValueError, match="only a local directory"), atomic.staged_directory("gs://bucket/out"):
        pass
