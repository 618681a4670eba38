"""t2t-datagen on Apache Beam writes the bytes the local run writes, on every runner here."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow_datasets as tfds
from conftest import require_extra, run_binary
from test_datagen import tree, write_quora
from test_datagen_cli import assert_one_line_error

from t2tcli import registry
from t2tcli.data.datagen import run as datagen
from t2tcli.data.datagen import stages
from t2tcli.data.layout import read_meta

require_extra("apache_beam")

from t2tcli.data.datagen import beam_runner  # noqa: E402

GLOB_PROBLEM = '''
from t2tcli.data.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import CsvSource, JsonlSource, raw_dir
from t2tcli.data.sources.text import squash_spaces


@register_problem("beam_notes")
class BeamNotes(Text2TextProblem):
    """Notes in several CSV files -> their topic."""

    vocab = VocabSpec(name="beam_notes", size=300)
    max_skipped_fraction = 0.2
    num_shards = {"train": 3}

    def source(self, tmp_dir):
        return CsvSource(f"{raw_dir(tmp_dir)}/notes-*.csv", columns=("note", "topic"))

    def preprocess(self, record):
        return {"inputs": "topic: " + squash_spaces(record["note"]), "targets": record["topic"]}


@register_problem("beam_notes_jsonl")
class BeamNotesJsonl(BeamNotes):
    """The same notes as JSON lines."""

    def source(self, tmp_dir):
        return JsonlSource(f"{raw_dir(tmp_dir)}/notes-*.jsonl", columns=("note", "topic"))
'''

WORDS = "river stone light garden winter letter market engine violin harbour".split()


def write_notes(raw: Path, files: int = 3, rows: int = 150, blank_every: int = 31) -> None:
    """CSV files with quoted newlines and commas, and rows lacking a required field."""
    raw.mkdir(parents=True)
    for f in range(files):
        lines = ["note,topic"]
        for i in range(rows):
            words = " ".join(WORDS[(i * 7 + f + j) % len(WORDS)] for j in range(2 + i % 6))
            note = f'"{words},\nsecond line {i}"' if i % 9 == 0 else words
            topic = "" if i % blank_every == 4 % blank_every else WORDS[(i + f) % 4]
            lines.append(f"{note},{topic}")
        (raw / f"notes-{f}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def usr_dir(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("usr")
    (directory / "beam_notes.py").write_text(GLOB_PROBLEM)
    registry.import_usr_dir(str(directory))
    return str(directory)


def local_and_beam(name: str, tmp_path: Path, runner: str, beam_options: str = "", usr_dirs=(), **options):
    """(local output, Beam output) of problem `name` as {file name: bytes}."""
    problem = registry.problem(name)
    datagen.generate(problem, datagen.Options(data_dir=str(tmp_path / "local"), **options))
    beam_options_ = datagen.Options(data_dir=str(tmp_path / "beam"), **options | {"chunk_rows": 37})
    beam_runner.generate(problem, beam_options_, runner, beam_options, list(usr_dirs))
    return tree(tmp_path / "local"), tree(tmp_path / "beam")


def test_in_process_runner_writes_the_local_bytes_for_a_csv_glob_with_quoted_newlines_and_skipped_rows(
    usr_dir, tmp_path
):
    write_notes(tmp_path / "raw")
    local, beam = local_and_beam("beam_notes", tmp_path, "InProcess", usr_dirs=[usr_dir], tmp_dir=str(tmp_path / "raw"))
    assert sorted(beam) == sorted(local) and len(local) == 7  # 3 train + 1 dev shards, meta, vocab + listing
    assert beam == local
    meta = read_meta(str(tmp_path / "beam"), "beam_notes")
    assert meta["rows_read"] == 450 and meta["skipped"]["total"] == 15
    first = meta["skipped"]["sources"]["train"]["first_lines"]
    assert first[:3] == ["notes-0.csv:7", "notes-0.csv:41", "notes-0.csv:76"]  # a quoted newline every 9th row
    assert len(first) == stages.SKIPPED_LINES_REPORTED
    assert not list((tmp_path / "beam").glob(".beam-*"))


def test_json_lines_in_several_files_give_the_local_bytes(usr_dir, tmp_path):
    import json

    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(3):
        records = [{"note": f"{WORDS[(i + f) % 10]} {WORDS[i % 7]}\n{i}", "topic": WORDS[i % 4]} for i in range(80)]
        records[5]["topic"] = ""
        (raw / f"notes-{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    local, beam = local_and_beam("beam_notes_jsonl", tmp_path, "InProcess", usr_dirs=[usr_dir], tmp_dir=str(raw))
    assert beam == local and len(local) == 7


@pytest.mark.parametrize("workers", [1, 2])
def test_a_mixture_on_the_direct_runner_with_1_or_2_workers_writes_the_local_bytes(tmp_path, workers):
    raw = write_quora(tmp_path / "raw", rows=400, blank_ids=(3, 250))
    local, beam = local_and_beam(
        "qp_all", tmp_path, "DirectRunner", f"--direct_num_workers={workers}", tmp_dir=str(raw)
    )
    assert beam == local
    assert {"qp_is_duplicate.meta.json", "generate_similar_question.meta.json", "vocab.qp.model"} <= set(beam)


def test_a_tfds_problem_read_in_ranges_writes_the_local_bytes(tmp_path):
    with tfds.testing.mock_data(num_examples=40):
        local, beam = local_and_beam("glue_qqp", tmp_path, "InProcess", tfds_data_dir=str(tmp_path / "tfds"))
    assert beam == local and "glue_qqp-test-00000-of-00001" in beam


def test_a_remote_data_dir_gets_the_local_bytes_and_a_rerun_sees_them_complete(tmp_path):
    """TensorFlow's in-memory file system (ram://) stands in for GCS: the same code paths."""
    from t2tcli.compat import tf

    problem = registry.problem("qp_is_duplicate")
    datagen.generate(problem, datagen.Options(data_dir=str(tmp_path / "local")))
    remote = f"ram://{tmp_path.name}/data"
    beam_runner.generate(problem, datagen.Options(data_dir=remote), "InProcess", "", [])
    local = tree(tmp_path / "local")
    assert sorted(tf.io.gfile.listdir(remote)) == sorted(local)
    for name, data in local.items():
        with tf.io.gfile.GFile(f"{remote}/{name}", "rb") as f:
            assert f.read() == data, name
    again = beam_runner.generate(problem, datagen.Options(data_dir=remote), "InProcess", "", [])
    assert again == ["qp_is_duplicate: complete, skipped (use --overwrite to regenerate)"]


def quora_with_bom_crlf(raw: Path) -> Path:
    """The Kaggle CSV as a spreadsheet saves it: a BOM, CRLF line ends; blank fields; test.csv beside."""
    write_quora(raw, rows=500, blank_ids=(11, 400))
    train = raw / "train.csv"
    train.write_bytes(b"\xef\xbb\xbf" + train.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    return raw


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def job_service():
    """Beam's local job service: a real portable runner, reached over loopback."""
    port = free_port()
    service = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main", f"--port={port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("localhost", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("the local job service did not start within 60 s")
        yield f"localhost:{port}"
    finally:
        service.kill()
        service.wait()


def test_the_command_line_on_direct_and_portable_runners_writes_the_local_bytes(tmp_path, job_service):
    raw = quora_with_bom_crlf(tmp_path / "raw")
    common = ("t2t-datagen", "--problem=qp_all", f"--tmp_dir={raw}")
    run_binary(*common, f"--data_dir={tmp_path / 'local'}", check=True)
    direct = run_binary(
        *common,
        f"--data_dir={tmp_path / 'direct'}",
        "--beam_runner=DirectRunner",
        "--beam_options=--direct_num_workers=2",
        check=True,
    )
    portable = run_binary(
        *common,
        f"--data_dir={tmp_path / 'portable'}",
        "--beam_runner=PortableRunner",
        f"--beam_options=--job_endpoint={job_service} --environment_type=LOOPBACK",
        check=True,
    )
    local = tree(tmp_path / "local")
    assert tree(tmp_path / "direct") == local and tree(tmp_path / "portable") == local
    assert "qp_is_duplicate: 520 rows -> train " in direct.stdout and "skipped 2" in portable.stdout
    meta = read_meta(str(tmp_path / "portable"), "qp_is_duplicate")
    assert meta["splits"]["test"]["examples"] == 20


def test_the_dataflow_job_graph_builds_offline_with_dry_run(tmp_path):
    options = "--project=my-project --region=us-central1 --temp_location=gs://my-bucket/tmp --num_workers=8"
    proc = run_binary(
        "t2t-datagen",
        "--problem=qp_all",
        "--data_dir=gs://my-bucket/data",
        "--beam_runner=DataflowRunner",
        f"--beam_options={options}",
        "--dry_run",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = proc.stdout.strip().splitlines()
    assert steps[0].startswith("dry run on DataflowRunner: 2 problems, 3 source parts;")
    for step in ("ReadPreprocessSplit", "VocabSample", "TrainSentencePiece", "Encode", "ByShard", "WriteShards"):
        assert step in steps
    proc = run_binary(
        "t2t-datagen",
        "--problem=qp_all",
        f"--data_dir={tmp_path / 'out'}",
        "--beam_runner=DataflowRunner",
        "--beam_options=--project=my-project",
        "--dry_run",
    )
    assert_one_line_error(proc, "--region, --temp_location missing")
    assert not (tmp_path / "out").exists()


def test_a_failing_pipeline_is_one_line_and_leaves_nothing_that_looks_complete(usr_dir, tmp_path):
    raw = tmp_path / "raw"
    write_notes(raw, blank_every=2)
    out = tmp_path / "out"
    proc = run_binary(
        "t2t-datagen",
        f"--usr_dir={usr_dir}",
        "--problem=beam_notes",
        f"--tmp_dir={raw}",
        f"--data_dir={out}",
        "--beam_runner=InProcess",
    )
    assert_one_line_error(proc, "skipped 225 of 450 rows", "max_skipped_fraction")
    assert not out.exists(), "the data_dir it made is removed again, empty"


@pytest.mark.parametrize(
    "runner,options,fragment",
    [
        ("FlinkRunner", "", "job server jar could not be fetched"),
        ("SparkRunner", "", "--spark_job_server_jar=PATH"),
        ("Dataflow", "", "--beam_runner=Dataflow: use one of DirectRunner, DataflowRunner"),
        ("DirectRunner", "--direct_num_workers='2", "--beam_options: No closing quotation"),
    ],
)
def test_a_runner_that_cannot_start_is_one_line(tmp_path, runner, options, fragment):
    proc = run_binary(
        "t2t-datagen",
        "--problem=qp_is_duplicate",
        f"--data_dir={tmp_path / 'out'}",
        f"--beam_runner={runner}",
        f"--beam_options={options}",
        timeout=300,
    )
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_beam_flags_need_a_runner(tmp_path):
    proc = run_binary("t2t-datagen", "--problem=qp_is_duplicate", f"--data_dir={tmp_path}", "--dry_run")
    assert_one_line_error(proc, "--dry_run needs --beam_runner")


def test_a_remote_tmp_dir_is_read_whole_test_split_included(tmp_path):
    """Raw files on ram:// (GCS's code path): the unlabeled test.csv beside train.csv counts."""
    from t2tcli.compat import tf

    raw = write_quora(tmp_path / "raw")
    remote_raw = f"ram://{tmp_path.name}/raw"
    tf.io.gfile.makedirs(remote_raw)
    for name in ("train.csv", "test.csv"):
        tf.io.gfile.copy(str(raw / name), f"{remote_raw}/{name}")
    problem = registry.problem("qp_is_duplicate")
    datagen.generate(problem, datagen.Options(data_dir=str(tmp_path / "local"), tmp_dir=str(raw)))
    beam_runner.generate(
        problem, datagen.Options(data_dir=str(tmp_path / "beam"), tmp_dir=remote_raw), "InProcess", "", []
    )
    beam, local = tree(tmp_path / "beam"), tree(tmp_path / "local")
    assert "qp_is_duplicate-test-00000-of-00001" in beam
    # The same bytes, but for the fingerprint of where the raw files were read from.
    meta = "qp_is_duplicate.meta.json"
    beam_meta, local_meta = json.loads(beam.pop(meta)), json.loads(local.pop(meta))
    assert beam_meta.pop("source_fingerprint") != local_meta.pop("source_fingerprint")
    assert beam == local and beam_meta == local_meta


def test_a_job_carries_its_problem_code_to_a_worker_that_lacks_it(usr_dir, tmp_path):
    """On a cluster only t2tcli is installed, its built-in problems with it: --usr_dir code
    travels inside the job. A fresh process without it imports it from the job alone."""
    import pickle

    copied = tmp_path / "usr"
    copied.mkdir()
    (copied / "beam_notes.py").write_text(Path(usr_dir, "beam_notes.py").read_text())
    bundles = registry.code_bundles([str(copied)])
    (copied / "beam_notes.py").unlink()
    copied.rmdir()
    # As the worker sees it: no directory of the launcher's exists there.
    gone = tuple((f"/nonexistent{path}", files) for path, files in bundles)
    (tmp_path / "job.pkl").write_bytes(pickle.dumps((gone, tuple(map(registry.code_digest, bundles)))))
    script = (
        "import pickle, sys\n"
        "from t2tcli import registry\n"
        "registry.import_code_bundles(*pickle.load(open(sys.argv[1], 'rb')))\n"
        "print(registry.problem('beam_notes').name, registry.problem('qp_all').name,"
        " registry.hparams('mtf_transformer_tiny').d_model)\n"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "job.pkl")],
        capture_output=True,
        text=True,
        env=dict(os.environ, TMPDIR=str(scratch)),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["beam_notes", "qp_all", "64"]
    assert not list(scratch.iterdir()), "the worker's private copy goes when it exits"


def test_a_worker_that_has_the_launchers_usr_dir_still_imports_its_verified_copy(tmp_path):
    """Where the launcher's directory exists on the worker, what is beside its sources (an
    extension module, a compiled file) is in no digest: the worker imports the copy it checked."""
    import pickle

    usr = tmp_path / "usr"
    usr.mkdir()
    (usr / "__init__.py").write_text("from . import helper\nprint(helper.SHIPPED, flush=True)\n")
    (usr / "helper.py").write_text("SHIPPED = 'shipped'\n")
    bundles = registry.code_bundles([str(usr)])
    (usr / "helper.so").write_bytes(b"not the code the job carries")  # found before helper.py
    (tmp_path / "job.pkl").write_bytes(pickle.dumps((bundles, tuple(map(registry.code_digest, bundles)))))
    script = (
        "import pickle, sys\n"
        "from t2tcli import registry\n"
        "registry.import_code_bundles(*pickle.load(open(sys.argv[1], 'rb')))\n"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "job.pkl")],
        capture_output=True,
        text=True,
        env=dict(os.environ, TMPDIR=str(scratch)),
    )
    assert (proc.returncode, proc.stdout) == (0, "shipped\n"), proc.stderr[-2000:]


def test_pretraining_text_that_leaves_out_dev_texts_gives_the_local_bytes(usr_dir, tmp_path):
    raw = tmp_path / "raw"
    write_notes(raw, files=1, rows=120)
    notes = [" ".join(row["note"].split()) for row in read_notes(raw / "notes-0.csv")]
    (raw / "corpus.txt").write_text("\n".join(notes) + "\n", encoding="utf-8")
    local, beam = local_and_beam(
        "span_corruption",
        tmp_path,
        "InProcess",
        usr_dirs=[usr_dir],
        tmp_dir=str(raw),
        leave_out_dev_of=("beam_notes",),
    )
    assert beam == local
    read = read_meta(str(tmp_path / "beam"), "span_corruption")["rows_read"]
    assert 0 < read < len(notes), "the notes in beam_notes' dev split are left out"


def read_notes(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))
