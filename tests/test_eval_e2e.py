"""t2t-eval on a trained toy model: all checkpoints, results files, --wait."""

from __future__ import annotations

import json
import os
import shutil

from toy_model import SAVE_EVERY, TRAIN_STEPS, toy_model  # noqa: F401  (session fixture)


def copy_model(toy_model, tmp_path):  # noqa: F811
    """A private copy, so results written by one test never show up in another."""
    target = tmp_path / "model"
    shutil.copytree(toy_model["model_dir"], target)
    shutil.rmtree(target / "eval_dev", ignore_errors=True)
    return str(target)


def test_eval_all_checkpoints(binary, toy_model, tmp_path):  # noqa: F811
    model_dir = copy_model(toy_model, tmp_path)
    proc = binary("t2t-eval", f"--model_dir={model_dir}", "--checkpoint=all", "--max_examples=40")
    assert proc.returncode == 0, proc.stderr
    steps = list(range(0, TRAIN_STEPS + 1, SAVE_EVERY))
    records = [json.loads(x) for x in open(os.path.join(model_dir, "eval_dev", "metrics.jsonl"))]
    assert [r["step"] for r in records] == steps
    for r in records:
        assert r["problem"] == "copy_sequence" and r["split"] == "dev" and r["examples"] == 40
        assert set(r["metrics"]) == {"accuracy", "sequence_accuracy", "loss", "perplexity"}
    last = records[-1]["metrics"]
    assert last["loss"] < records[0]["metrics"]["loss"]
    assert last["sequence_accuracy"] > 50
    assert any(n.startswith("events.out.tfevents") for n in os.listdir(os.path.join(model_dir, "eval_dev")))
    table = proc.stdout.strip().splitlines()
    assert table[0].split()[:3] == ["step", "problem", "n"]
    assert [row.split()[0] for row in table[1:]] == [str(s) for s in steps]


def test_wait_exits_when_training_is_done_or_stalls(binary, toy_model, tmp_path):  # noqa: F811
    model_dir = copy_model(toy_model, tmp_path)
    # Training reached train_steps: evaluate each checkpoint once, then stop by itself.
    proc = binary("t2t-eval", f"--model_dir={model_dir}", "--wait", "--max_examples=8", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "stopped following: finished" in proc.stderr
    records = [json.loads(x) for x in open(os.path.join(model_dir, "eval_dev", "metrics.jsonl"))]
    assert sorted(r["step"] for r in records) == list(range(0, TRAIN_STEPS + 1, SAVE_EVERY))

    # A run that will never reach its train_steps: nothing new to evaluate, stop after the timeout.
    run_file = os.path.join(model_dir, "run.json")
    run = json.load(open(run_file))
    run["flags"]["train_steps"] = 10**9
    json.dump(run, open(run_file, "w"))
    proc = binary(
        "t2t-eval",
        f"--model_dir={model_dir}",
        "--wait",
        "--wait_timeout=2",
        "--wait_poll_seconds=0.5",
        "--max_examples=8",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stopped following: timeout" in proc.stderr
    assert proc.stdout.strip() == "no checkpoint evaluated"


def test_eval_errors(binary, toy_model, tmp_path):  # noqa: F811
    proc = binary("t2t-eval", f"--model_dir={toy_model['model_dir']}", "--checkpoint=123")
    assert proc.returncode == 1 and "no checkpoint of step 123" in proc.stderr
    assert "Traceback" not in proc.stderr
