"""Several machines, proven on loopback: a TF_CONFIG cluster (chief, worker, parameter server)
trains one model, as docs/training.md says to run it: the same command everywhere, only the task
changing."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest
from conftest import REPO, run_binary

from t2tcli.compat import tf


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_chief_worker_and_parameter_server_train_one_model(tmp_path):
    data, model_dir = tmp_path / "data", tmp_path / "model"
    assert run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data}").returncode == 0
    chief, worker, ps = (f"127.0.0.1:{p}" for p in _free_ports(3))
    cluster = {"chief": [chief], "worker": [worker], "ps": [ps]}
    args = [
        sys.executable,
        str(REPO / "bin" / "t2t-train"),
        "--problem=copy_sequence",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={data}",
        f"--model_dir={model_dir}",
        "--train_steps=400",
        "--save_checkpoints_steps=200",
        "--log_every_steps=1",
    ]

    def start(kind: str) -> subprocess.Popen:
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}}))
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    server = start("ps")
    try:
        trainers = {kind: start(kind) for kind in ("worker", "chief")}
        logs = {kind: proc.communicate(timeout=600)[1] for kind, proc in trainers.items()}
    finally:
        server.kill()
        server.wait()
    for kind, proc in trainers.items():
        assert proc.returncode == 0, (kind, logs[kind][-3000:])
    steps = {
        kind: {int(s): float(v) for s, v in re.findall(r"step (\d+)  loss ([\d.]+)  lr \S+  [\d.]+ steps/s", log)}
        for kind, log in logs.items()
    }
    worker_steps = sorted(int(s) for s in re.findall(r"worker 0: step (\d+)  loss", logs["worker"]))
    # Both trained the one model. Each logs every step it ran of the shared global step; its
    # share, and which numbers it lands, is a race. train_and_evaluate starts worker 0 five
    # seconds after the chief (the estimator's default), so the run is long enough for a
    # fast CPU's chief not to finish alone; a trainer then keeps going until the global step
    # reaches --train_steps, so the worker's last step is near the end.
    assert steps["chief"] and len(worker_steps) >= 10 and worker_steps[-1] >= 390, logs
    losses = {**steps["chief"], **steps["worker"]}
    assert losses[max(losses)] < losses[min(losses)], losses
    final = tf.train.latest_checkpoint(str(model_dir))
    assert 400 <= int(final.rsplit("-", 1)[1]) <= 402, final
    # One set of variables, saved by the chief, that t2t-decode uses.
    lines = tmp_path / "in.txt"
    lines.write_text("a b c\n")
    proc = run_binary("t2t-decode", f"--model_dir={model_dir}", f"--decode_from_file={lines}")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr
