"""A model_dir from elsewhere, two runs at once, a stop signal, a full disk: the fault suite's
second half. Each test repeats one way a careful user broke t2tcli and asserts the exit
status, the one line, no traceback, and the bytes of every file that must not change.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, run_binary
from test_faults import assert_fails_in_one_line, model_copy, snapshot  # noqa: F401  (fixture)
from toy_model import toy_model  # noqa: F401  (session fixture)

PAYLOAD = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from t2tcli.model import config as model_config
from t2tcli import registry
from t2tcli.registry import register_problem


@register_problem("payload_copy")
class PayloadCopy(type(registry.problem("copy_sequence"))):
    pass
"""


def _plant_payload(model_dir: Path, marker: Path) -> Path:
    """User code shipped inside a model_dir, as a downloaded one could carry it."""
    payload = model_dir / "payload"
    payload.mkdir()
    (payload / "evil.py").write_text(PAYLOAD.format(marker=str(marker)))
    return payload


def _edit_json(path: Path, drop: tuple[str, ...] = (), **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    for key in drop:
        del data[key]
    path.write_text(json.dumps(data))


# --- 1, 13: code named by a model_dir runs only with consent -----------------------------


def test_code_a_model_dir_names_is_not_imported_without_consent(model_copy, tmp_path):  # noqa: F811
    model_dir, _ = model_copy
    marker = tmp_path / "imported"
    payload = _plant_payload(model_dir, marker)
    lines = tmp_path / "in.txt"
    lines.write_text("a b\n")
    # As earlier versions recorded it: comma-joined, relative to the cwd of training.
    _edit_json(model_dir / "run.json", drop=("usr_dirs",), usr_dir="payload", problem="payload_copy")
    before = snapshot(model_dir)
    for binary, extra in (
        ("t2t-decode", [f"--decode_from_file={lines}"]),
        ("t2t-eval", ["--max_examples=4"]),
        ("t2t-export", [f"--export_dir={tmp_path / 'export'}"]),
    ):
        proc = subprocess.run(
            [sys.executable, str(REPO / "bin" / binary), f"--model_dir={model_dir}", *extra],
            cwd=model_dir,  # where the relative path would find the payload
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert_fails_in_one_line(proc, "asks to import user code payload", "--usr_dir=payload", "--trust_usr_dir")
    # Recorded as t2t-train records it now: absolute paths.
    _edit_json(model_dir / "run.json", drop=("usr_dir",), usr_dirs=[str(payload)])
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}")
    assert_fails_in_one_line(proc, f"asks to import user code {payload}", "problem 'payload_copy' is defined there")
    assert not marker.exists(), "nothing was imported"
    # A built-in problem needs none of it: decoded, the code left alone, one warning says so.
    _edit_json(model_dir / "run.json", problem="copy_sequence")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr[-2000:]
    assert f"asks to import user code {payload} (not needed here)" in proc.stderr
    assert not marker.exists()
    # Consent, either way, imports it.
    _edit_json(model_dir / "run.json", problem="payload_copy")
    for consent in ("--trust_usr_dir", f"--usr_dir={payload}"):
        marker.unlink(missing_ok=True)
        proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}", consent)
        assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr[-2000:]
        assert marker.exists()
    changed = {k for k, v in snapshot(model_dir).items() if before.get(k) != v and not k.startswith("ctranslate2/")}
    assert changed == {"run.json"}, changed  # (and CTranslate2's cache of the checkpoint, where it decoded)


@pytest.mark.slow
def test_usr_dir_is_recorded_as_a_list_of_absolute_paths(toy_model, tmp_path):  # noqa: F811
    work = tmp_path / "work"
    code = work / "my,code"  # a comma no longer splits it
    code.mkdir(parents=True)
    marker = tmp_path / "imported"
    (code / "noop.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n")
    model_dir = tmp_path / "model"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bin" / "t2t-train"),
            "--usr_dir=my,code",
            "--problem=copy_sequence",
            "--hparams_set=mtf_transformer_tiny",
            f"--data_dir={toy_model['data_dir']}",
            f"--model_dir={model_dir}",
            "--train_steps=2",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((model_dir / "run.json").read_text())["usr_dirs"] == [str(code)]
    marker.unlink()
    lines = tmp_path / "in.txt"
    lines.write_text("a b\n")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}", "--trust_usr_dir")
    assert proc.returncode == 0 and marker.exists(), proc.stderr[-2000:]


# --- 2: hparams.json is typed, and gin gets only literals --------------------------------


@pytest.mark.parametrize("engine", ["mesh", "fast", "ctranslate2"])
def test_hparams_json_cannot_add_gin_bindings_or_imports(model_copy, tmp_path, engine):  # noqa: F811
    model_dir, _ = model_copy
    module_dir = tmp_path / "modules"
    module_dir.mkdir()
    marker = tmp_path / "imported"
    (module_dir / "gin_payload.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    _edit_json(model_dir / "hparams.json", num_encoder_layers="2\nimport gin_payload")
    lines = tmp_path / "in.txt"
    lines.write_text("a b\n")
    proc = run_binary(
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={lines}",
        f"--decode_hparams=engine={engine}",
        env={"PYTHONPATH": str(module_dir)},
    )
    assert_fails_in_one_line(proc, f"{model_dir / 'hparams.json'}: unreadable hparams", "'num_encoder_layers'")
    assert not marker.exists()


def test_hparams_json_types_follow_the_built_in_defaults(tmp_path):
    from t2tcli import registry
    from t2tcli.errors import UserError
    from t2tcli.model import run_records

    good = registry.hparams("mtf_transformer_tiny").values()
    assert run_records.typed_hparams(dict(good, my_own_setting=[1, 2]), "h.json").d_model == good["d_model"]
    cases = {
        "d_model": "512",
        "pack": 1,
        "dropout_rate": True,
        "layout": ["batch:batch"],
        "mesh_shape": {"model": 2},
        "my_own_setting": {"nested": 1},
    }
    for key, bad in cases.items():
        with pytest.raises(UserError, match=f"h.json: unreadable hparams \\('{key}'"):
            run_records.typed_hparams(dict(good, **{key: bad}), "h.json")
    without = {k: v for k, v in good.items() if k != "d_ff"}
    with pytest.raises(UserError, match="no 'd_ff'"):
        run_records.typed_hparams(without, "h.json")


def test_gin_bindings_are_literals_on_one_line():
    from t2tcli import registry
    from t2tcli.errors import UserError
    from t2tcli.model import config as model_config
    from t2tcli.model import gin_bindings, hardware, kernel_layout
    from t2tcli.model import mesh as meshlib

    def unchecked(hp):
        """A config made without build()'s checks: the bindings must hold on their own."""
        spec = meshlib.MeshSpec([], meshlib.parse_layout(hp.layout))
        return model_config.ModelConfig(hp, 40, spec, "float32", hardware.Machine("cpu"), kernel_layout.KernelLayout())

    hp = registry.hparams("mtf_transformer_tiny")
    hp.ffn_activation = "relu'\nimport os"
    assert all("\n" not in binding for binding in gin_bindings.bindings(unchecked(hp)))
    with pytest.raises(UserError, match="ffn_activation"):
        model_config.build(hp, 40)
    hp = registry.hparams("mtf_transformer_tiny")
    hp._values["d_ff"] = "64\nimport os"  # past HParams' own checks, as a bad file would be
    with pytest.raises(UserError, match="hparam 'd_ff': expected int"):
        gin_bindings.bindings(unchecked(hp))


# --- 3, 4, 5: outputs never destroy inputs, and temporary names cannot be planted --------


def test_averaging_into_the_model_dir_or_another_run_is_refused(model_copy, toy_model, tmp_path):  # noqa: F811
    model_dir, _ = model_copy
    link = tmp_path / "link"
    link.symlink_to(model_dir)
    before = snapshot(model_dir)
    proc = run_binary("t2t-avg-checkpoints", f"--model_dir={model_dir}", "--num_last=2", f"--output_dir={link}")
    assert_fails_in_one_line(proc, f"--output_dir={link} is --model_dir={model_dir}")
    other = tmp_path / "other"
    shutil.copytree(toy_model["model_dir"], other)
    other_before = snapshot(other)
    proc = run_binary("t2t-avg-checkpoints", f"--model_dir={model_dir}", "--num_last=2", f"--output_dir={other}")
    assert_fails_in_one_line(proc, f"--output_dir={other} holds another run")
    assert snapshot(model_dir) == before and snapshot(other) == other_before
    averaged = tmp_path / "averaged"
    for _ in range(2):  # an average may be written again over an earlier one of the same model_dir
        proc = run_binary("t2t-avg-checkpoints", f"--model_dir={model_dir}", "--num_last=2", f"--output_dir={averaged}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((averaged / "averaged_from.json").read_text())["model_dir"] == str(model_dir.resolve())
    assert snapshot(model_dir) == before


def test_decoding_a_file_into_itself_is_refused(toy_model, tmp_path):  # noqa: F811
    lines = tmp_path / "in.txt"
    lines.write_text("a b\nc d\n")
    link = tmp_path / "link.txt"
    link.symlink_to(lines)
    for target in (lines, link):
        proc = run_binary(
            "t2t-decode",
            f"--model_dir={toy_model['model_dir']}",
            f"--decode_from_file={lines}",
            f"--decode_to_file={target}",
        )
        assert_fails_in_one_line(proc, f"--decode_to_file={target} is the same file as --decode_from_file={lines}")
        assert lines.read_text() == "a b\nc d\n"


def test_outputs_never_write_through_a_planted_temporary_name(tmp_path):
    """Every writer goes through t2tcli.io.atomic, whose temporary names nobody can guess
    or plant: symlinks at the names the earlier scheme used (target.tmpPID,
    .target.tmpPID) are neither followed nor removed."""
    import numpy as np

    from t2tcli import registry
    from t2tcli.data.datagen import shards
    from t2tcli.data.vocabulary.packed_encoder import Spans
    from t2tcli.hparams import HParams
    from t2tcli.io import atomic, text_files
    from t2tcli.model import run_records

    victim = tmp_path / "victim"
    victim.write_text("precious")
    outputs = [
        tmp_path / name for name in ("hparams.json", "run.json", "vocab.model", "vocab.vocab", "out.txt", "shard")
    ]
    for out in outputs:
        for planted in (out.with_name(f"{out.name}.tmp{os.getpid()}"), out.with_name(f".{out.name}.tmp{os.getpid()}")):
            planted.symlink_to(victim)
    from t2tcli.data.vocabulary import vocab

    proto = vocab.trained_model([f"w{i} x{i % 7}" for i in range(200)], str(tmp_path / "v.model"), 40)
    info = run_records.RunInfo(problem="copy_sequence", hparams_set="mtf_transformer_tiny", data_dir="")
    run_records.save(str(tmp_path), info, HParams(**registry.hparams("mtf_transformer_tiny").values()), proto)
    with text_files.atomic_output(str(tmp_path / "out.txt"), "decode_to_file") as f:
        f.write("line\n")
    records = Spans(np.frombuffer(b"abc", np.uint8), np.array([0]), np.array([3]))
    shards.write_records(records, str(tmp_path / "shard"), None)
    assert victim.read_text() == "precious"
    assert (tmp_path / "out.txt").read_text() == "line\n" and (tmp_path / "run.json").exists()
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o666 & ~umask
    planted_left = [p for p in tmp_path.iterdir() if p.is_symlink()]
    assert len(planted_left) == 2 * len(outputs)
    with pytest.raises(OSError) as failed:  # a failed write names the output, leaves no temporary
        with atomic.output(str(tmp_path / "never.txt"), "w") as f:
            f.write("half")
            raise OSError(28, "No space left on device")
    assert failed.value.filename is None or "never.txt" in failed.value.filename
    assert not [p for p in tmp_path.iterdir() if "never.txt" in p.name]


# --- 6, 7: one writer per model_dir and per datagen problem ------------------------------


def _train_args(model_dir: Path, data_dir: str, steps: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "bin" / "t2t-train"),
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        f"--train_steps={steps}",
        *extra,
    ]


def _wait_for(predicate, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_second_trainer_is_refused_and_sigterm_saves_the_step_reached(toy_model, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    # A lock left by a run killed long ago (a pid that no longer runs) is taken over.
    (model_dir / ".t2tcli.lock").write_text(
        json.dumps({"pid": 2**22 + 11, "host": os.uname().nodename, "started": "earlier", "program": "t2t-train"})
    )
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        _train_args(
            model_dir, toy_model["data_dir"], 100_000, "--save_checkpoints_steps=100000", "--log_every_steps=5"
        ),
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        _wait_for(lambda: "step 10 " in (tmp_path / "first.log").read_text() or first.poll() is not None)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-2000:]
        before = snapshot(model_dir)
        second = run_binary(
            "t2t-train",
            "--problem=copy_sequence",
            "--hparams_set=mtf_transformer_tiny",
            f"--data_dir={toy_model['data_dir']}",
            f"--model_dir={model_dir}",
            "--train_steps=50",
        )
        message = assert_fails_in_one_line(second, f"{model_dir} is in use: t2t-train (pid {first.pid} on ")
        assert "is writing a training run" in message
        after = snapshot(model_dir)
        assert {k: v for k, v in after.items() if "events" not in k} == {
            k: v for k, v in before.items() if "events" not in k
        }
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=300) == 128 + signal.SIGTERM
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    stderr = (tmp_path / "first.log").read_text()
    assert "taking over the lock of t2t-train (pid 4194315" in stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("t2t-train: stopped by SIGTERM at step ") and "the same command resumes" in last, last
    step = int(last.split(" at step ")[1].split(",")[0])
    assert step > 10
    from t2tcli.compat import tf

    assert tf.train.latest_checkpoint(str(model_dir)).endswith(f"model.ckpt-{step}")
    assert not (model_dir / ".t2tcli.lock").exists()
    resumed = run_binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={toy_model['data_dir']}",
        f"--model_dir={model_dir}",
        f"--train_steps={step + 5}",
    )
    assert resumed.returncode == 0 and f"resuming {model_dir} from step {step}" in resumed.stderr
    assert tf.train.latest_checkpoint(str(model_dir)).endswith(f"model.ckpt-{step + 5}")


def test_a_second_datagen_of_a_problem_is_refused(tmp_path):
    from t2tcli.io import lock

    data_dir = tmp_path / "data"
    with lock.hold(str(data_dir), "problem qp_is_duplicate", ".qp_is_duplicate.lock"):
        proc = run_binary("t2t-datagen", "--problem=qp_all", f"--data_dir={data_dir}")
        assert_fails_in_one_line(proc, f"{data_dir} is in use: ", f"(pid {os.getpid()} on", "problem qp_is_duplicate")
        assert sorted(p.name for p in data_dir.iterdir()) == [".qp_is_duplicate.lock"]
    # Another problem of the same data_dir is not held up.
    assert run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data_dir}").returncode == 0
    proc = run_binary("t2t-datagen", "--problem=qp_all", f"--data_dir={data_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not list(data_dir.glob(".*.lock"))


def test_two_datagens_started_together_write_one_problem_once(tmp_path):
    """The race as users hit it: two runs at once on one data_dir. One writes, the other
    says who holds the problem (or, started after the first finished, finds it complete)."""
    data_dir = tmp_path / "data"
    args = [sys.executable, str(REPO / "bin" / "t2t-datagen"), "--problem=qp_all", f"--data_dir={data_dir}"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in results) in ([0, 0], [0, 1]), results
    for code, _, stderr in results:
        assert "Traceback" not in stderr
        if code == 1:
            assert "is in use: t2t-datagen (pid" in stderr.strip().splitlines()[-1]
    whole = tmp_path / "whole"
    assert run_binary("t2t-datagen", "--problem=qp_all", f"--data_dir={whole}").returncode == 0
    assert snapshot(data_dir) == snapshot(whole)


# --- 8: readers survive the trainer deleting checkpoints ---------------------------------


def test_a_pinned_checkpoint_stays_readable_after_its_deletion(model_copy):  # noqa: F811
    from t2tcli.compat import tf
    from t2tcli.model import checkpoints

    model_dir, _ = model_copy
    step, path = checkpoints.list_checkpoints(str(model_dir))[0]
    with checkpoints.pinned(path) as readable:
        for f in model_dir.glob(f"model.ckpt-{step}.*"):
            f.unlink()  # what the trainer's keep_checkpoint_max does
        assert int(tf.train.load_checkpoint(readable).get_tensor("global_step")) == step
    assert not list(model_dir.glob(".reading.*")), "the pin goes with the reader"
    with pytest.raises(checkpoints.CheckpointGone, match=f"model.ckpt-{step} was deleted before it could be read"):
        with checkpoints.pinned(path):
            pass


def test_eval_all_takes_the_checkpoints_saved_in_place_of_deleted_ones(tmp_path):
    """keep_checkpoint_max=1: every listed checkpoint can be gone before it is read."""
    from t2tcli.cli import eval as eval_cli
    from t2tcli.model import checkpoints

    def save(step):
        (tmp_path / f"model.ckpt-{step}.index").write_bytes(checkpoints.INDEX_END)  # as a whole index ends
        (tmp_path / f"model.ckpt-{step}.data-00000-of-00001").write_bytes(b"")

    def delete(step):
        for f in tmp_path.glob(f"model.ckpt-{step}.*"):
            f.unlink()

    save(4)
    evaluated = []

    def evaluate(step, path):
        if step < 12:  # the trainer deletes it and saves step + 4 before the reader pins it
            delete(step)
            save(step + 4)
            raise checkpoints.CheckpointGone(path)
        evaluated.append(step)

    eval_cli._evaluate_every(str(tmp_path), checkpoints.list_checkpoints(str(tmp_path)), evaluate)
    assert evaluated == [12]


@pytest.mark.slow
def test_readers_survive_a_trainer_deleting_checkpoints(toy_model, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    trainer = subprocess.Popen(
        _train_args(
            model_dir,
            toy_model["data_dir"],
            400,
            "--save_checkpoints_steps=4",
            "--keep_checkpoint_max=1",
            "--hparams=activation_dtype=float32",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: (model_dir / "checkpoint").exists())
        lines = tmp_path / "in.txt"
        lines.write_text("a b c\n" * 50)
        follower = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "bin" / "t2t-eval"),
                f"--model_dir={model_dir}",
                "--wait",
                "--max_examples=8",
                "--wait_poll_seconds=0.2",
                "--wait_timeout=120",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        runs = [run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}") for _ in range(4)]
        # The follower holds eval_dev (one writer per results directory): this one writes elsewhere.
        every = ["--checkpoint=all", "--max_examples=8", f"--eval_dir={tmp_path / 'all'}"]
        runs.append(run_binary("t2t-eval", f"--model_dir={model_dir}", *every))
        for proc in runs:
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert all(len(proc.stdout.splitlines()) == 50 for proc in runs[:4])
        assert trainer.wait(timeout=600) == 0
        _, stderr = follower.communicate(timeout=600)
        assert follower.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    finally:
        for proc in (trainer,):
            if proc.poll() is None:
                proc.kill()


# --- 9: datagen stops cleanly on SIGTERM -------------------------------------------------


def test_sigterm_stops_datagen_and_clears_its_work(tmp_path):
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bin" / "t2t-datagen"), "--problem=qp_all", f"--data_dir={data_dir}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: bool(list(data_dir.glob(".*.work/*"))) or proc.poll() is not None, timeout=120)
    assert proc.poll() is None, "the run ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "t2t-datagen: stopped by SIGTERM"
    assert not list(data_dir.glob(".*.work")) and not list(data_dir.glob("*.meta.json"))
    assert not list(data_dir.glob(".*.tmp*")) and not list(data_dir.glob(".*.lock"))


# --- 10: a full disk is one line naming the path, and nothing that looks complete --------


@pytest.fixture
def small_disk(tmp_path):
    """A file system of a few MiB (tmpfs), filled by the test; skipped where nothing can be mounted."""

    def mount(size: str) -> Path:
        path = tmp_path / f"disk{size}"
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a small file system here ({proc.stderr.decode().strip()[:100]})")
        mounted.append(path)
        return path

    mounted: list[Path] = []
    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_line_naming_the_path(toy_model, tmp_path, small_disk):  # noqa: F811
    disk = small_disk("7m")
    model_dir = disk / "model"
    proc = run_binary(
        "t2t-train",
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={toy_model['data_dir']}",
        f"--model_dir={model_dir}",
        "--train_steps=20",
        "--save_checkpoints_steps=10",
    )
    assert_fails_in_one_line(proc, f"--model_dir={model_dir}: no space left on device while training")
    assert not list(model_dir.glob("*_temp*")) and not list(model_dir.glob("*.tmp*"))
    assert not list(model_dir.glob("*.index")), "no checkpoint that looks complete"

    disk = small_disk("300k")
    proc = run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={disk / 'data'}")
    assert_fails_in_one_line(proc, f"{disk / 'data'}: No space left on device")
    assert not (disk / "data").exists() or not list((disk / "data").glob("*.meta.json"))

    disk = small_disk("200k")
    (disk / "filler").write_bytes(b"\0" * 190_000)
    lines = tmp_path / "in.txt"
    lines.write_text("a b c\n" * 20_000)
    out = disk / "out.txt"
    proc = run_binary(
        "t2t-decode", f"--model_dir={toy_model['model_dir']}", f"--decode_from_file={lines}", f"--decode_to_file={out}"
    )
    assert_fails_in_one_line(proc, f"{out}: No space left on device")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


# --- 11, 12: decode input read once, and bounded per line --------------------------------


def test_decode_reads_pipes_fifos_and_dev_stdin_once(toy_model, tmp_path):  # noqa: F811
    model_dir = toy_model["model_dir"]
    text = "a b\nc d\ne\n"
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", "--decode_from_file=/dev/stdin", stdin=text)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3, proc.stderr[-2000:]
    substituted = subprocess.run(
        [
            "bash",
            "-c",
            f'"{sys.executable}" "{REPO}/bin/t2t-decode" --model_dir="{model_dir}" '
            "--decode_from_file=<(printf 'a b\\nc d\\ne\\n')",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert substituted.returncode == 0 and substituted.stdout == proc.stdout, substituted.stderr[-2000:]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    from_fifo = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={fifo}", timeout=600)
    writer.join(timeout=60)
    assert from_fifo.returncode == 0 and from_fifo.stdout == proc.stdout, from_fifo.stderr[-2000:]


def test_a_long_line_is_cut_before_it_is_tokenized():
    from t2tcli.decode.lines import LineJob

    seen: list[int] = []

    def encode(text: str) -> list[int]:
        seen.append(len(text))
        return [5] * len(text.split())

    job = LineJob(encode=encode, decode=str, inputs_length=32, targets_length=8, batch_size=4, max_chars=400)
    assert job.tokens("a b c") == [5, 5, 5] and seen == [5]
    long = " " * 1_000_000 + "w " * 2_000_000
    assert len(job.tokens(long)) == 200 and seen[-1] == 400, "whitespace runs squeezed, then cut"


def test_a_5_mb_line_decodes_in_bounded_memory(toy_model, tmp_path):  # noqa: F811
    lines = tmp_path / "in.txt"
    lines.write_text("a b\n" + "c " * 2_500_000 + "\nd e\n")
    out = tmp_path / "out.txt"
    measure = (
        "import resource, subprocess, sys; "
        "rc = subprocess.call(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            measure,
            sys.executable,
            str(REPO / "bin" / "t2t-decode"),
            f"--model_dir={toy_model['model_dir']}",
            f"--decode_from_file={lines}",
            f"--decode_to_file={out}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(out.read_text().splitlines()) == 3
    assert "in.txt:2: input of" in proc.stderr and "truncated to" in proc.stderr
    peak_mib = int(proc.stdout.strip()) / 1024
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # TensorFlow loaded here too
    assert peak_mib < baseline + 600, (peak_mib, baseline)


# --- 14: a read-only model_dir is evaluated into --eval_dir ------------------------------


@pytest.mark.slow
def test_a_read_only_model_dir_evaluates_into_eval_dir(model_copy, tmp_path):  # noqa: F811
    model_dir, _ = model_copy
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(model_dir), str(model_dir)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here ({mounted.stderr.decode().strip()[:100]})")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(model_dir)], check=True, capture_output=True)
        before = snapshot(model_dir)
        proc = run_binary("t2t-eval", f"--model_dir={model_dir}", "--max_examples=8")
        assert_fails_in_one_line(proc, f"--model_dir={model_dir / 'eval_dev'}", "--eval_dir")
        results = tmp_path / "results"
        proc = run_binary("t2t-eval", f"--model_dir={model_dir}", "--max_examples=8", f"--eval_dir={results}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert (results / "metrics.jsonl").exists()
        lines = tmp_path / "in.txt"
        lines.write_text("a b\n")
        for engine in ("fast", "ctranslate2"):
            proc = run_binary(
                "t2t-decode",
                f"--model_dir={model_dir}",
                f"--decode_from_file={lines}",
                f"--decode_hparams=engine={engine}",
                env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
            )
            assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr[-2000:]
        assert snapshot(model_dir) == before
    finally:
        subprocess.run(["umount", str(model_dir)], check=False)


def test_a_lock_on_a_file_system_without_flock_goes_by_its_holder(tmp_path, monkeypatch):
    """Where flock is not supported, the holder the file names decides: none, or one that no
    longer runs on this host, leaves the lock free; a live one holds it."""
    import errno
    import fcntl as fcntl_module

    from t2tcli.errors import UserError
    from t2tcli.io import lock

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl_module, "flock", no_flock)
    with lock.hold(str(tmp_path), "a test"):
        assert json.loads((tmp_path / ".t2tcli.lock").read_text())["pid"] == os.getpid()
    host = os.uname().nodename
    holder = {"host": host, "started": "then", "program": "t2t-train"}
    (tmp_path / ".t2tcli.lock").write_text(json.dumps({**holder, "pid": 2**22 + 11}))
    with lock.hold(str(tmp_path), "a test"):
        pass
    (tmp_path / ".t2tcli.lock").write_text(json.dumps({**holder, "pid": os.getppid()}))
    with pytest.raises(UserError, match=f"is in use: t2t-train \\(pid {os.getppid()} on {host}"):
        with lock.hold(str(tmp_path), "a test"):
            pass
