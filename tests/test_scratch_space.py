"""Scratch space another user of the machine cannot plant: datagen's work directories, its
spool and bucket files, and the copies of user code a Beam worker imports.

Where ownership is what is checked, the attack is made as another user (uid 65534, by a
forked child that drops its privileges, so only as root), as it would be on a shared login
node; a FIFO or symlink planted inside a work directory is refused for what it is, so those
are planted as this user and run everywhere. Each test asserts what the run did instead: a
one-line refusal, no code run, the victim's files unchanged.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import signal
import stat
import subprocess
import tempfile
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import run_binary
from test_faults import assert_fails_in_one_line

from t2tcli import registry
from t2tcli.data import layout
from t2tcli.data.datagen import run as datagen
from t2tcli.data.datagen import shards
from t2tcli.data.datagen.spool import Spool, spool_chunks
from t2tcli.errors import UserError
from t2tcli.io import scratch

OTHER_UID = 65534  # nobody
_CANNOT_DROP = 77


def as_other_user(action: Callable[[], None]) -> None:
    """Runs `action` in a forked child as uid/gid 65534; skips the test where this process
    cannot change user (it must run as root to become someone else)."""
    if os.getuid() != 0:
        pytest.skip(f"planting files as another user needs root to switch to uid {OTHER_UID}; running as {os.getuid()}")
    pid = os.fork()
    if pid == 0:  # the other user: only system calls, then out
        code = 1
        try:
            try:
                os.setgroups([])
                os.setgid(OTHER_UID)
                os.setuid(OTHER_UID)
            except OSError:
                code = _CANNOT_DROP
                raise
            os.umask(0)
            action()
            code = 0
        except BaseException:  # noqa: BLE001 - reported by the exit code, the trace on stderr
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == _CANNOT_DROP:
        pytest.skip(f"this process may not switch to uid {OTHER_UID} (no CAP_SETUID here)")
    assert code == 0, f"the other user's planting failed (exit {code})"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory everyone may write to, sticky like /tmp, that uid 65534 can reach."""
    path = Path(tempfile.mkdtemp(prefix="t2t-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def victim(shared: Path) -> Path:
    """A file of the user running t2tcli that nobody else may read or write."""
    path = shared / "victim.txt"
    path.write_text("precious")
    path.chmod(0o600)
    return path


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fails the test instead of hanging it, should a FIFO be opened for reading."""

    def fail(*_):
        raise TimeoutError("blocked: a FIFO was opened")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def group_writable_dir(path: Path) -> Path:
    """A directory of this user's that others may write to (mode 0777, as a team's data_dir)."""
    path.mkdir()
    path.chmod(0o777)
    return path


def loosened_work_dir(data: Path) -> Path:
    """A work directory as datagen makes it, then opened up to other users: what is left
    to stop a planted file is how its files are opened."""
    work = data / ".copy_sequence.work"
    scratch.fresh_dir(str(work))
    work.chmod(0o777)
    return work


def hashes(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


# --- the work directory -----------------------------------------------------------------


@pytest.mark.parametrize("planted", ["symlink", "directory"])
def test_a_work_directory_planted_in_a_shared_data_dir_is_refused_in_one_line(shared, victim, planted):
    data = group_writable_dir(shared / "data")
    theirs = shared / "theirs"
    work = data / ".copy_sequence.work"

    def plant() -> None:
        os.mkdir(theirs, 0o777)
        if planted == "symlink":
            os.symlink(theirs, work)
        else:
            os.mkdir(work, 0o777)
            os.mkfifo(work / "train.spool")
            os.symlink(victim, work / "train.bucket00000")

    as_other_user(plant)
    proc = run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data}", timeout=300)
    reason = "a symbolic link" if planted == "symlink" else f"owned by uid {OTHER_UID}"
    assert_fails_in_one_line(proc, f"{work}: {reason}")
    assert os.listdir(theirs) == [] and victim.read_text() == "precious"
    assert not list(data.glob("*.meta.json")) and not list(data.glob("copy_sequence-*"))
    assert work.is_symlink() if planted == "symlink" else stat.S_ISFIFO(os.lstat(work / "train.spool").st_mode)


def test_a_remote_data_dir_works_in_a_private_directory_and_a_planted_one_is_refused(shared, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    data_dir = f"ram://{uuid.uuid4().hex}/data"
    base = shared / f"t2tcli-{os.getuid()}"
    work = Path(layout.work_dir(data_dir, "copy_sequence"))  # made private by asking
    assert work.parent == base
    assert base.stat().st_uid == os.getuid() and stat.S_IMODE(base.stat().st_mode) == 0o700
    shutil.rmtree(base)

    def plant() -> None:
        os.makedirs(work, 0o777)
        os.mkfifo(work / "train.spool")

    as_other_user(plant)
    options = datagen.Options(data_dir=data_dir)
    with pytest.raises(UserError, match=f"^{base}: owned by uid {OTHER_UID}, .* set TMPDIR"):
        datagen.generate(registry.problem("copy_sequence"), options)
    assert stat.S_ISFIFO(os.lstat(work / "train.spool").st_mode)

    shutil.rmtree(base)
    os.symlink(shared, base)  # a symlink of anyone's under the name is refused too
    with pytest.raises(UserError, match=f"^{base}: a symbolic link"):
        datagen.generate(registry.problem("copy_sequence"), options)
    base.unlink()
    assert datagen.generate(registry.problem("copy_sequence"), options)[0].startswith("copy_sequence: 21000 rows")
    assert os.listdir(base) == [] and stat.S_IMODE(base.stat().st_mode) == 0o700


# --- the files in it --------------------------------------------------------------------


def test_a_planted_fifo_spool_is_refused_without_blocking(shared, no_hang):
    data = group_writable_dir(shared / "data")
    work = loosened_work_dir(data)
    os.mkfifo(work / "train.spool")  # refused for what it is, whoever planted it
    spool = Spool("fingerprint", work_dir=str(work))
    with pytest.raises(UserError, match="train.spool: something is there already"):
        spool.append("train", hashes(1), ["a"], ["b"])
    with pytest.raises(UserError, match="train.spool: not a regular file"):
        next(spool_chunks(str(work / "train.spool")))


def test_a_symlinked_spool_or_bucket_leaves_the_victims_file_unchanged(shared, victim):
    data = group_writable_dir(shared / "data")
    work = loosened_work_dir(data)

    def plant() -> None:
        os.symlink(victim, work / "train.spool")
        os.symlink(victim, work / "train.bucket00001")

    plant()  # refused for what it is, whoever planted it
    with pytest.raises(UserError, match="train.spool: something is there already"):
        Spool("fingerprint", work_dir=str(work)).append("train", hashes(1), ["a"], ["b"])
    with pytest.raises(UserError, match="train.bucket00001: something is there already"):
        shards.SplitBuckets(str(work), "train", 2)
    with pytest.raises(UserError, match="train.spool: a symbolic link"):
        next(spool_chunks(str(work / "train.spool")))
    assert victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    scratch.remove_dir(str(work))  # the links go, not what they point at
    assert not work.exists() and victim.read_text() == "precious"


class _Payload:
    """Pickled, it runs code when loaded: what a planted spool chunk could carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_the_spool_round_trips_any_text_without_pickle(tmp_path):
    work = tmp_path / ".p.work"
    scratch.fresh_dir(str(work))
    chunks = [
        (hashes(4), ["plain", "", "ünïcödé \0 nul", "\ud800 lone surrogate"], ["t1", "t2 " * 200, "", "\n\r\t"]),
        (hashes(0), [], []),
        (hashes(2), ["x" * 70_000, "🙂"], ["y", "z"]),
    ]
    spool = Spool("fingerprint", work_dir=str(work))
    for chunk in chunks:
        spool.append("train", *chunk)
    spool.close()
    read = list(spool_chunks(spool.files["train"]))
    assert len(read) == len(chunks)
    for (h, inputs, targets), (h2, inputs2, targets2) in zip(chunks, read, strict=True):
        assert h2.dtype == np.uint64 and np.array_equal(h, h2) and inputs2 == inputs and targets2 == targets
    assert b"\x80\x05" not in Path(spool.files["train"]).read_bytes()[:2]  # no pickle header

    marker = tmp_path / "ran"
    planted = work / "dev.spool"
    planted.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(UserError, match="dev.spool: the spool is cut short or damaged"):
        list(spool_chunks(str(planted)))
    assert not marker.exists(), "a pickle in a spool file ran"
    (work / "cut.spool").write_bytes(Path(spool.files["train"]).read_bytes()[:-3])
    with pytest.raises(UserError, match="cut.spool: the spool is cut short"):
        list(spool_chunks(str(work / "cut.spool")))


# --- user code on Beam workers ------------------------------------------------------------

SHIPPED = """
import pathlib
from t2tcli import registry
from t2tcli.registry import register_problem

pathlib.Path({marker!r}).write_text("shipped")


@register_problem({name!r})
class Shipped(type(registry.problem("copy_sequence"))):
    pass
"""


def test_a_worker_imports_only_the_code_the_launcher_shipped(shared, tmp_path, monkeypatch):
    pytest.importorskip("apache_beam")
    from t2tcli.data.datagen import beam_pipeline

    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    name = f"shipped_{uuid.uuid4().hex[:8]}"
    shipped, planted = tmp_path / "shipped", tmp_path / "planted"
    # As a worker on another machine gets it: the launcher's directory does not exist here.
    bundle = (f"/nonexistent/{name}/usr", (("problem.py", SHIPPED.format(marker=str(shipped), name=name).encode()),))
    old_name = hashlib.sha1(repr(bundle).encode()).hexdigest()[:12]  # where copies were once looked for

    def plant() -> None:
        os.makedirs(shared / f"t2t_code_{old_name}" / "usr", 0o777)
        (shared / f"t2t_code_{old_name}" / "usr" / "evil.py").write_text(f"open({str(planted)!r}, 'w').write('ran')")

    as_other_user(plant)

    def job(digest: str) -> beam_pipeline.BeamJob:
        return beam_pipeline.BeamJob(name, (bundle,), (digest,), datagen.Options(data_dir=str(tmp_path)), "", {})

    altered = registry.code_digest((bundle[0], (("problem.py", b"pass\n"),)))
    with pytest.raises(UserError, match=f"--usr_dir={bundle[0]}: its copy at .* is not the code the job carries"):
        beam_pipeline.problem_of(job(altered))
    assert not shipped.exists() and not planted.exists(), "code that did not match its digest ran"

    assert beam_pipeline.problem_of(job(registry.code_digest(bundle))).name == name
    assert shipped.read_text() == "shipped" and not planted.exists(), "the planted copy was imported"


# --- a full disk --------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    """A data_dir on a small file system (tmpfs) that a file all but fills; skipped where nothing can be mounted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small file system here ({proc.stderr.decode().strip()[:100]})")
    try:
        (disk / "data").mkdir()
        fd = os.open(disk / "data" / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            os.ftruncate(fd, os.fstat(fd).st_size - (16 << 10))  # room for the lock file, not for the spool
        finally:
            os.close(fd)
        yield disk / "data"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_leaves_no_work_directory(full_disk):
    proc = run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={full_disk}", timeout=300)
    assert_fails_in_one_line(proc, f"{full_disk}: No space left on device")
    assert sorted(os.listdir(full_disk)) == ["filler"]


def test_the_beam_summary_is_json_read_with_types(tmp_path):
    from t2tcli.data.datagen import beam_summary
    from t2tcli.data.datagen.stages import SourceReport
    from t2tcli.data.datagen.stats import LengthHistogram

    lengths = LengthHistogram()
    lengths.add(np.array([3, 3, 70]))
    items = [
        beam_summary.UnitReport("p", "train", 2, SourceReport("a.csv", "train", 9, 2, [4, "b.csv:7"], 1)),
        beam_summary.TaskStats("p", {"train": 5, "dev": 1}, lengths, LengthHistogram()),
        beam_summary.WrittenShard("p", "train", 1, 5),
        beam_summary.TrainedVocab(b"\0\xffproto"),
    ]
    unit, task_stats, shard, vocab = beam_summary.decode(beam_summary.encode(items), "summary.json")
    assert unit == items[0] and shard == items[2] and vocab == items[3]
    assert task_stats.counts == {"train": 5, "dev": 1} and task_stats.inputs.summary() == lengths.summary()
    assert np.array_equal(task_stats.inputs.counts, lengths.counts) and not task_stats.targets.counts.any()

    marker = tmp_path / "ran"
    with pytest.raises(UserError, match="^summary.json: not the summary .*: not JSON"):
        beam_summary.decode(pickle.dumps([_Payload(marker)]), "summary.json")
    assert not marker.exists()
    for hostile, what in (
        (b'{"kind": "shard"}', "not a list"),
        (b'[{"kind": "shard", "task": "p", "split": "train", "shard": -1, "records": 5}]', "'shard' .* valid int"),
        (b'[{"kind": "stats", "task": "p", "counts": {}, "inputs": [1, "x"], "targets": []}]', "'inputs' holds"),
        (b'[{"kind": "code", "source": "import os"}]', "unknown kind 'code'"),
    ):
        with pytest.raises(UserError, match=what):
            beam_summary.decode(hostile, "summary.json")


# --- failures on the way --------------------------------------------------------------------


def test_buckets_opened_before_one_that_is_refused_are_closed(tmp_path, monkeypatch):
    work = tmp_path / ".copy_sequence.work"
    scratch.fresh_dir(str(work))
    Path(layout.bucket_path(str(work), "train", 2)).write_bytes(b"")
    opened = []
    create_file = scratch.create_file

    def recorded(path: str):
        opened.append(create_file(path))
        return opened[-1]

    monkeypatch.setattr(scratch, "create_file", recorded)
    with pytest.raises(UserError, match="train.bucket00002: something is there already"):
        shards.SplitBuckets(str(work), "train", 4)
    assert len(opened) == 2 and all(f.closed for f in opened)


def test_a_work_directory_that_cannot_be_removed_does_not_hide_the_failure(tmp_path, monkeypatch):
    """The failure that stopped the run is the line the user sees; the refusal to remove its
    work directory, which came after, is only logged."""
    from t2tcli.data.datagen import local_runner

    remove_dir = scratch.remove_dir
    failed = []

    def fail(*args, **kwargs):
        failed.append("write_task")
        raise UserError("the failure that stopped the run")

    def refuse(path: str) -> None:
        if not failed:  # removals before the failure go as usual
            return remove_dir(path)
        raise UserError(f"{path}: refused")

    monkeypatch.setattr(local_runner, "write_task", fail)
    monkeypatch.setattr(scratch, "remove_dir", refuse)
    with pytest.raises(UserError, match="^the failure that stopped the run$"):
        datagen.generate(registry.problem("copy_sequence"), datagen.Options(data_dir=str(tmp_path / "data")))
    assert failed == ["write_task"]
