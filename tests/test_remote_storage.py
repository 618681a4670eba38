"""Every path a user gives may live on a remote file system: data, model, raw input, user
code, decode input and output, initial checkpoints, exports.

The whole pipeline runs in separate processes, as a user runs it, with nothing but URLs:
- `file://` is TensorFlow's own scheme for the local disk, so every remote code path runs
  (nothing under `os`), in the default suite;
- `s3://` against a local S3 server (see `remote_server.py`), a real object store with its
  semantics (no directories, no renames, HTTP errors), in the slow suite;
- `gs://` through TensorFlow's own GCS client, offline: a local HTTPS proxy and JSON-API
  server (see `gcs_server.py`); the whole pipeline in the slow suite, a missing or forbidden
  bucket, a stop signal during retries and the basic file calls in the default one.
In-process `ram://` tests (TensorFlow's memory file system) cover single functions.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, require_extra, run_binary
from gcs_server import GcsServer, GcsStore, closed_port_url, gcs_server
from remote_server import FileStore, S3Store, free_port, s3_env, s3_server

from t2tcli import registry
from t2tcli.data import layout
from t2tcli.data.datagen import run as datagen
from t2tcli.errors import UserError
from t2tcli.io import fs, preflight

USR_CODE = '''
from t2tcli.registry import register_hparams
from t2tcli.builtin.hparams.transformer import mtf_transformer_tiny


@register_hparams
def remote_tiny():
    """mtf_transformer_tiny, registered by code read from the remote store."""
    hp = mtf_transformer_tiny()
    hp.activation_dtype = "float32"
    return hp
'''


def _write(url: str, text: str) -> None:
    """In-process writes: ram:// only (see remote_server.py for why not s3://)."""
    fs.makedirs(url.rsplit("/", 1)[0])
    with fs.open_file(url, "wb") as f:
        f.write(text.encode())


def _quora_sample(rows: int) -> bytes:
    with open(REPO / "problems" / "data" / "quora" / "train.csv", encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        lines = [next(reader)] + [row for _, row in zip(range(rows), reader, strict=False)]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(lines)
    return out.getvalue().encode()


def run_pipeline(store: FileStore | S3Store | GcsStore, here: Path) -> None:
    """datagen (generated and raw-file problems) -> train with remote user code -> eval ->
    decode -> SavedModel and Hugging Face exports -> averaging -> fine-tuning from the
    exported directory; each a fresh process run from `here`, which stays empty."""
    root = store.root

    def ok(binary: str, *args: str) -> str:
        proc = run_binary(binary, *args, env=store.env, cwd=here)
        assert proc.returncode == 0, f"{binary} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        return proc.stdout

    store.write("usr/remote_sets.py", USR_CODE.encode())
    store.write("raw/train.csv", _quora_sample(1500))
    store.write("in.txt", b"3 1 4 1 5\n9 2 6\n")
    data, run, usr = f"{root}/data", f"{root}/run", f"--usr_dir={root}/usr"

    ok("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data}")
    ok("t2t-datagen", "--problem=qp_is_duplicate", f"--tmp_dir={root}/raw", f"--data_dir={data}")
    written = set(store.names("data"))
    assert {"qp_is_duplicate.meta.json", "vocab.qp.model", "copy_sequence-train-00000-of-00002"} <= written
    ok(
        "t2t-train",
        "--problem=copy_sequence",
        usr,
        "--hparams_set=remote_tiny",
        f"--data_dir={data}",
        f"--model_dir={run}",
        "--train_steps=20",
        "--save_checkpoints_steps=10",
    )
    recorded = json.loads(store.read("run/run.json"))
    assert recorded["data_dir"] == data and recorded["usr_dirs"] == [f"{root}/usr"]
    assert "model.ckpt-20.index" in store.names("run")
    ok("t2t-eval", f"--model_dir={run}", usr, "--checkpoint=all")
    assert any(name.startswith("eval_dev/") for name in store.names("run"))
    ok("t2t-decode", f"--model_dir={run}", usr, f"--decode_from_file={root}/in.txt", f"--decode_to_file={root}/out.txt")
    assert len(store.read("out.txt").decode().splitlines()) == 2
    ok("t2t-export", f"--model_dir={run}", usr, f"--export_dir={root}/export")
    assert any(name.endswith("/saved_model.pb") for name in store.names("export"))
    ok("t2t-export", f"--model_dir={run}", usr, "--export_format=hf", f"--export_dir={root}/hf")
    assert store.names("hf") == ["config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"]
    ok("t2t-avg-checkpoints", f"--model_dir={run}", usr, "--num_last=2", f"--output_dir={root}/avg")
    assert "model.ckpt-20.index" in store.names("avg")
    ok(
        "t2t-train",
        "--problem=copy_sequence",
        f"--init_checkpoint={root}/hf",
        f"--data_dir={data}",
        f"--model_dir={root}/tuned",
        "--train_steps=2",
    )
    tuned = store.names("tuned")
    assert "model.ckpt-2.index" in tuned
    assert not [n for n in tuned if n.startswith(".pretrained.")], "the converted initial weights are removed"
    assert list(here.iterdir()) == [], "nothing is written locally in place of a URL"


def test_the_pipeline_on_file_urls_never_takes_a_url_for_a_local_path(tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    run_pipeline(FileStore(tmp_path / "store"), here)


@pytest.fixture(scope="module")
def s3_endpoint():
    require_extra("moto")
    if importlib.util.find_spec("tensorflow_io") is None:  # not imported: this process never opens s3://
        pytest.fail("tensorflow-io is missing: the tests need the test extra (scripts/install test)", pytrace=False)
    with s3_server() as endpoint:
        yield endpoint


@pytest.mark.slow
def test_the_pipeline_on_an_s3_server(s3_endpoint, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    run_pipeline(S3Store(s3_endpoint, "pipeline"), here)


def _assert_one_line_failures(cases: list[tuple[str, ...]], here: Path, env: dict[str, str], named: str) -> None:
    for args in cases:
        proc = run_binary(*args, cwd=here, env=env, timeout=300)
        assert proc.returncode == 1, (args, proc.returncode, proc.stderr[-2000:])
        last = proc.stderr.strip().splitlines()[-1]
        assert named in last and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
    assert list(here.iterdir()) == [], "nothing is written locally in place of a URL"


def _unreachable_cases(root: str, local_data: Path) -> list[tuple[str, ...]]:
    if not local_data.exists():  # the trainer reads its data before it writes the model_dir
        datagen.generate(registry.problem("copy_sequence"), datagen.Options(data_dir=str(local_data)))
    return [
        ("t2t-datagen", "--problem=copy_sequence", f"--data_dir={root}/data"),
        (
            "t2t-train",
            "--problem=copy_sequence",
            "--hparams_set=mtf_transformer_tiny",
            f"--data_dir={local_data}",
            f"--model_dir={root}/run",
        ),
        ("t2t-eval", f"--model_dir={root}/run"),
        ("t2t-datagen", f"--usr_dir={root}/code", "--registry_help"),
    ]


def test_a_store_no_file_system_serves_is_one_line_and_nothing_local(tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    _assert_one_line_failures(_unreachable_cases("nosuch://bucket", tmp_path / "data"), here, {}, "nosuch://bucket/")


@pytest.mark.slow
def test_a_missing_bucket_or_a_stopped_server_is_one_line_and_nothing_local(s3_endpoint, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    missing = _unreachable_cases("s3://no-such-bucket", tmp_path / "data")
    _assert_one_line_failures(missing, here, s3_env(s3_endpoint), "s3://no-such-bucket/")
    stopped = s3_env(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    _assert_one_line_failures(_unreachable_cases("s3://pipeline", tmp_path / "data"), here, stopped, "s3://pipeline/")


# gs:// through TensorFlow's own GCS client and a local proxy (gcs_server.py).


@pytest.fixture(scope="module")
def gcs():
    require_extra("cryptography")
    with gcs_server() as server:
        yield server


def _requests_for(server: GcsServer, bucket: str) -> list[tuple[str, str, str]]:
    return [r for r in server.store.requests if f"/b/{bucket}" in r[2] or r[2].startswith(f"/{bucket}/")]


@pytest.mark.slow
def test_the_pipeline_on_a_gcs_server(gcs, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    run_pipeline(gcs.bucket("pipeline"), here)


def test_a_missing_gs_bucket_is_one_line_before_anything_is_made(gcs, tmp_path):
    """TensorFlow's makedirs asked for a missing bucket forever; the bucket is asked for first."""
    here = tmp_path / "here"
    here.mkdir()
    proc = run_binary(
        "t2t-datagen",
        "--problem=copy_sequence",
        "--data_dir=gs://no-such-bucket/data",
        env=gcs.env,
        cwd=here,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    expected = "t2t-datagen: error: --data_dir=gs://no-such-bucket/data: bucket gs://no-such-bucket does not exist"
    assert proc.stderr.strip().splitlines()[-1] == expected, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    asked = _requests_for(gcs, "no-such-bucket")
    assert asked == [("GET", "www.googleapis.com", "/storage/v1/b/no-such-bucket")], "asked once, nothing created"
    assert list(here.iterdir()) == [], "nothing is written locally in place of a URL"


def test_sigterm_stops_a_run_whose_gs_calls_keep_retrying(gcs, tmp_path):
    """A bucket that answers 503 keeps TensorFlow's client retrying in native code, where no
    Python signal handler runs; SIGTERM still ends the run with one line and status 143."""
    gcs.store.failing.add("failing-bucket")
    command = [sys.executable, str(REPO / "bin" / "t2t-datagen"), "--problem=copy_sequence"]
    proc = subprocess.Popen(
        [*command, "--data_dir=gs://failing-bucket/data"],
        env={**os.environ, **gcs.env},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_requests_for(gcs, "failing-bucket")) < 2:  # a retry: the client is in its backoff loop
            assert proc.poll() is None and time.monotonic() < deadline, "the run never reached the bucket"
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert waited < 10, waited
    expected = "t2t-datagen: stopped by SIGTERM while waiting on gs://failing-bucket, which had not answered"
    assert stderr.strip().splitlines()[-1] == expected, stderr[-2000:]
    assert "Traceback" not in stderr


def test_gfile_calls_on_gs_through_tensorflows_client(gcs, monkeypatch):
    """Write, read (ranged), list, stat, rename (copy and delete), remove and rmtree, in process."""
    for name, value in gcs.env.items():
        monkeypatch.setenv(name, value)
    store = gcs.bucket("gfile")
    root = "gs://gfile/dir"
    payload = bytes(range(256)) * 1500
    fs.makedirs(f"{root}/sub")
    with fs.open_file(f"{root}/sub/a.bin", "wb") as f:
        f.write(payload[:1000])
        f.write(payload[1000:])
    assert store.read("dir/sub/a.bin") == payload
    assert "dir/sub/" in gcs.store.buckets["gfile"], "the directory marker"
    with fs.open_file(f"{root}/sub/a.bin", "rb") as f:
        f.seek(300_000)
        assert f.read(10) == payload[300_000:300_010]
        assert f.read() == payload[300_010:]
    assert fs.read_bytes(f"{root}/sub/a.bin") == payload
    store.write("dir/b.txt", b"two\nlines\n")
    assert fs.listdir(root) == ["b.txt", "sub/"]
    assert fs.isdir(f"{root}/sub") and not fs.isdir(f"{root}/b.txt") and fs.isfile(f"{root}/b.txt")
    assert fs.getsize(f"{root}/sub/a.bin") == len(payload)
    assert fs.glob(f"{root}/*.txt") == [f"{root}/b.txt"]
    assert fs.files_under(root) == ["b.txt", "sub/a.bin"]
    with fs.open_file(f"{root}/b.txt", "rb") as f:
        assert list(f) == [b"two\n", b"lines\n"]
    fs.rename(f"{root}/b.txt", f"{root}/sub/c.txt")
    assert store.names("dir") == ["sub/a.bin", "sub/c.txt"]
    assert any("/rewriteTo/" in path for _, _, path in gcs.store.requests)
    fs.remove(f"{root}/sub/c.txt")
    assert not fs.exists(f"{root}/sub/c.txt")
    fs.rmtree(root)
    assert store.names("dir") == [] and fs.names_in(root) == []
    with pytest.raises(fs.BucketError, match=r"^gs://gone/x/y: bucket gs://gone does not exist$"):
        fs.check_bucket("gs://gone/x/y")  # what makedirs asks first (tested through a binary: it could hang here)
    gcs.store.forbidden.add("walled")
    refused = r"^--model_dir=gs://walled/run: bucket gs://walled refused access \(HTTP 403\): check the credentials$"
    with pytest.raises(UserError, match=refused):
        preflight.check_output_dir("gs://walled/run", "model_dir")
    with pytest.raises(UserError, match=r"^--decode_to_file=gs://gone/out.txt: bucket gs://gone does not exist$"):
        preflight.check_output_file("gs://gone/out.txt", "decode_to_file")
    asked = _requests_for(gcs, "gone") + _requests_for(gcs, "walled")
    assert asked and all(method == "GET" for method, _, _ in asked), "nothing is created in them"


def test_a_user_with_object_access_only_writes_to_an_existing_bucket(gcs, monkeypatch):
    """A 403 for the bucket's metadata (no storage.buckets.get, as Storage Object Admin has) is
    no refusal while its objects answer: directories are made without asking for the bucket."""
    for name, value in gcs.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(fs, "_buckets_found", set())
    store = gcs.bucket("objects-only")
    gcs.store.hidden.add("objects-only")
    preflight.check_output_dir("gs://objects-only/run/a", "model_dir")
    fs.makedirs("gs://objects-only/run/a/b")
    with fs.open_file("gs://objects-only/run/a/b/out.txt", "wb") as f:
        f.write(b"written\n")
    assert store.read("run/a/b/out.txt") == b"written\n"
    assert {"run/", "run/a/", "run/a/b/"} <= set(gcs.store.buckets["objects-only"]), "the directory markers"
    assert fs.isdir("gs://objects-only/run/a") and fs.listdir("gs://objects-only/run/a") == ["b/"]
    bucket_gets = [r for r in _requests_for(gcs, "objects-only") if r[2] == "/storage/v1/b/objects-only"]
    assert len(bucket_gets) == 1, "the bucket is asked for once, then never again"
    gcs.store.forbidden.add("objects-only")  # now its objects refuse too
    monkeypatch.setattr(fs, "_buckets_found", set())
    refused = r"^--model_dir=gs://objects-only/run: bucket gs://objects-only refused access \(HTTP 403\): check"
    with pytest.raises(UserError, match=refused):
        preflight.check_output_dir("gs://objects-only/run", "model_dir")


@pytest.mark.slow
def test_a_missing_gs_bucket_or_a_stopped_proxy_is_one_line_and_nothing_local(gcs, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    missing = _unreachable_cases("gs://no-such-bucket", tmp_path / "data")
    _assert_one_line_failures(missing, here, gcs.env, "gs://no-such-bucket/")
    gcs.store.forbidden.add("forbidden-bucket")
    forbidden = _unreachable_cases("gs://forbidden-bucket", tmp_path / "data")
    _assert_one_line_failures(forbidden, here, gcs.env, "gs://forbidden-bucket/")
    proxy = closed_port_url()  # nothing listens there; one try, without backoff
    stopped = {**gcs.env, "HTTPS_PROXY": proxy, "https_proxy": proxy, "GCS_RETRY_CONFIG_MAX_RETRIES": "1"}
    stopped["GCS_RETRY_CONFIG_INIT_DELAY_TIME_US"] = "1000"
    _assert_one_line_failures(_unreachable_cases("gs://pipeline", tmp_path / "data"), here, stopped, "gs://pipeline/")


# The fast, in-process layer: TensorFlow's memory file system.


def test_datagen_writes_a_remote_data_dir_through_local_scratch():
    data = "ram://t2t-remote-datagen/data"
    datagen.generate(registry.problem("copy_sequence"), datagen.Options(data_dir=data))
    assert len(layout.shard_files(data, "copy_sequence", "train")) == 2
    meta = json.loads(fs.read_bytes(layout.meta_path(data, "copy_sequence")))
    assert meta["splits"]["train"]["examples"] > 0
    assert not fs.exists(layout.work_dir(data, "copy_sequence")), "the local scratch is removed"


def test_user_code_imports_from_a_remote_directory():
    root = "ram://t2t-remote-usr/code"
    _write(f"{root}/sets.py", USR_CODE.replace("remote_tiny", "ram_tiny"))
    _write(f"{root}/notes.txt", "not code")
    registry.import_usr_dir(root)
    assert registry.hparams("ram_tiny").d_model == 64
    assert registry.imported(root + "/")
    _write("ram://t2t-remote-usr/broken/bad.py", "x = 1\nraise ValueError('no')\n")
    with pytest.raises(Exception, match=r"ram://t2t-remote-usr/broken/bad.py:2: ValueError: no"):
        registry.import_usr_dir("ram://t2t-remote-usr/broken")
