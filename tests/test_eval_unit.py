"""Eval orchestration with a fake model: metrics per problem, results files, --wait."""

from __future__ import annotations

import json
import math
import os

import pytest

from t2tcli.data.vocabulary.vocab import EOS_ID
from t2tcli.errors import UserError
from t2tcli.evaluate import evaluation, following, results
from t2tcli.model import checkpoints


class FakeModel:
    """Decodes by echoing the input, except inputs starting with id 9 (decoded as [5]).

    Every target token gets log-probability log(0.5).
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def decode(self, checkpoint_path, inputs):
        self.calls.append(checkpoint_path)
        return [[5, EOS_ID] if x[0] == 9 else list(x) for x in inputs]

    def score(self, checkpoint_path, inputs, targets):
        return [len(t) * math.log(0.5) for t in targets]


def text(ids):
    return " ".join(str(i) for i in ids if i != EOS_ID)


def make_evaluator(tmp_path, tasks):
    sink = results.ResultsSink(str(tmp_path / "eval_dev"), tensorboard=True)
    return evaluation.Evaluator(FakeModel(), tasks, text, 8, 8, sink, "dev"), sink


def test_per_problem_metrics_loss_and_files(tmp_path):
    ex = evaluation.Example
    tasks = [
        evaluation.Task("copy", [ex([3, 4], [3, 4]), ex([9, 4], [9, 4]), ex([6], [6])], ("sequence_accuracy",), str),
        evaluation.Task("label", [ex([5], [5]), ex([9], [7])], ("accuracy", "f1"), str),
    ]
    evaluator, sink = make_evaluator(tmp_path, tasks)
    records = evaluator.evaluate(100, "/m/model.ckpt-100")
    assert [r["problem"] for r in records] == ["copy", "label"]
    copy, label = (r["metrics"] for r in records)
    assert copy["sequence_accuracy"] == pytest.approx(200 / 3)
    assert copy["loss"] == pytest.approx(math.log(2)) and copy["perplexity"] == pytest.approx(2.0)
    # label: "5" == "5" right, "5" vs "7" wrong -> accuracy 50; F1 over {5, 7}: 5 -> 2/3, 7 -> 0.
    assert label["accuracy"] == pytest.approx(50.0)
    assert label["f1"] == pytest.approx(100 * (2 / 3) / 2)
    lines = [json.loads(x) for x in open(sink.path)]
    assert [(r["step"], r["problem"], r["split"], r["examples"]) for r in lines] == [
        (100, "copy", "dev", 3),
        (100, "label", "dev", 2),
    ]
    assert sink.evaluated_steps("dev") == {100} and sink.evaluated_steps("test") == set()
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "eval_dev"))
    table = results.table(records).splitlines()
    assert table[0].split() == ["step", "problem", "n", "sequence_accuracy", "loss", "perplexity", "accuracy", "f1"]
    assert table[2].split()[:3] == ["100", "label", "2"]


def test_inputs_and_targets_are_written_beside_the_predictions_line_for_line(tmp_path):
    ex = evaluation.Example
    task = evaluation.Task("copy", [ex([3, 4], [3, 4]), ex([9, 4], [7]), ex([6], [8])], ("sequence_accuracy",), str)
    evaluator, _ = make_evaluator(tmp_path, [task])
    record = evaluator.evaluate(100, "/m/model.ckpt-100")[0]
    names = {kind: record[kind] for kind in ("inputs", "targets", "predictions")}
    assert names == {kind: f"copy-100.{kind}.txt" for kind in names}
    lines = {kind: (tmp_path / "eval_dev" / name).read_text().splitlines() for kind, name in names.items()}
    assert lines == {"inputs": ["3 4", "9 4", "6"], "targets": ["3 4", "7", "8"], "predictions": ["3 4", "5", "6"]}
    # Written whole (atomically): no temporary file is left beside them.
    assert sorted(n for n in os.listdir(tmp_path / "eval_dev") if not n.startswith("events.")) == sorted(
        [*names.values(), results.RESULTS_FILE]
    )


def test_postprocess_is_applied_to_both_sides(tmp_path):
    task = evaluation.Task("p", [evaluation.Example([9], [5, 5])], ("sequence_accuracy",), lambda s: s.split()[0])
    evaluator, _ = make_evaluator(tmp_path, [task])
    assert evaluator.evaluate(1, "c")[0]["metrics"]["sequence_accuracy"] == 100.0


def test_unknown_metric_fails_before_decoding(tmp_path):
    with pytest.raises(UserError, match="problem 'p': unknown metric 'blue'"):
        make_evaluator(tmp_path, [evaluation.Task("p", [], ("blue",), str)])


def write_checkpoint(model_dir, step):
    """A stand-in checkpoint: an index that ends as a whole one does, an empty data file."""
    with open(os.path.join(model_dir, f"model.ckpt-{step}.index"), "wb") as f:
        f.write(checkpoints.INDEX_END)
    open(os.path.join(model_dir, f"model.ckpt-{step}.data-00000-of-00001"), "w").close()


def write_run(model_dir, train_steps):
    with open(os.path.join(model_dir, "run.json"), "w") as f:
        json.dump({"problem": "p", "hparams_set": "h", "data_dir": "d", "flags": {"train_steps": train_steps}}, f)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        if self.on_sleep:
            self.on_sleep.pop(0)()


def test_wait_follows_new_checkpoints_until_training_finishes(tmp_path):
    model_dir = str(tmp_path)
    write_run(model_dir, 300)
    write_checkpoint(model_dir, 100)
    fake = FakeTime()
    fake.on_sleep = [lambda: None, lambda: write_checkpoint(model_dir, 200), lambda: write_checkpoint(model_dir, 300)]
    seen = []
    outcome = following.follow(
        model_dir, lambda s, p: seen.append(s), set(), 100, poll_seconds=10, clock=fake.clock, sleep=fake.sleep
    )
    assert outcome.reason == "finished" and seen == [100, 200, 300] == outcome.evaluated


def test_wait_times_out_when_training_stalls_and_skips_done_steps(tmp_path):
    model_dir = str(tmp_path)
    write_run(model_dir, 10_000)
    write_checkpoint(model_dir, 100)
    write_checkpoint(model_dir, 200)
    fake = FakeTime()
    seen = []
    outcome = following.follow(
        model_dir, lambda s, p: seen.append(s), {100}, 60, poll_seconds=7, clock=fake.clock, sleep=fake.sleep
    )
    assert outcome.reason == "timeout" and seen == [200]
    assert 60 <= fake.now < 61


def test_wait_skips_a_checkpoint_deleted_before_its_turn(tmp_path):
    from t2tcli.compat import tf

    model_dir = str(tmp_path)
    write_run(model_dir, 200)
    write_checkpoint(model_dir, 100)
    write_checkpoint(model_dir, 200)

    def evaluate(step, path):
        if step == 100:
            raise tf.errors.NotFoundError(None, None, "gone")

    outcome = following.follow(model_dir, evaluate, set(), 5, clock=FakeTime().clock, sleep=lambda s: None)
    assert outcome.evaluated == [200] and outcome.reason == "finished"


def test_read_examples_strips_eos(tmp_path):
    from t2tcli.compat import tf

    path = tmp_path / "toy-dev-00000-of-00001"
    with tf.io.TFRecordWriter(str(path)) as w:
        for x, y in (([4, 5, EOS_ID], [6, EOS_ID]), ([7, EOS_ID], [8, 9, EOS_ID])):
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=x)),
                        "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=y)),
                    }
                )
            )
            w.write(ex.SerializeToString())
    got = evaluation.read_examples(str(tmp_path), "toy", "dev")
    assert [(e.inputs, e.targets) for e in got] == [([4, 5], [6]), ([7], [8, 9])]
    assert len(evaluation.read_examples(str(tmp_path), "toy", "dev", limit=1)) == 1
    with pytest.raises(UserError, match="no 'test' data"):
        evaluation.read_examples(str(tmp_path), "toy", "test")


def test_wait_for_a_run_that_never_starts_is_bounded(tmp_path):
    fake = FakeTime()
    with pytest.raises(UserError, match="no training run appeared"):
        following.wait_for_run(str(tmp_path), 30, poll_seconds=4, clock=fake.clock, sleep=fake.sleep)
    assert 30 <= fake.now < 31
    fake = FakeTime()
    fake.on_sleep = [lambda: None, lambda: write_run(str(tmp_path), 10)]
    following.wait_for_run(str(tmp_path), 30, poll_seconds=4, clock=fake.clock, sleep=fake.sleep)
    assert fake.now == 8


def test_a_model_dir_whose_results_cannot_be_written_points_to_eval_dir(tmp_path, monkeypatch):
    """A read-only model_dir (no write permission in it) is evaluated with --eval_dir: the
    one-line error says so. Checked before anything is read or written."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    real_access = os.access

    def read_only(path, mode, *args, **kwargs):
        if os.path.abspath(path) == str(model_dir) and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", read_only)
    with pytest.raises(UserError) as refused:
        results.writable_results_dir(str(model_dir), "dev", None)
    message = str(refused.value)
    assert message.startswith(f"--model_dir={model_dir / 'eval_dev'}: no permission to write in {model_dir}")
    assert "--eval_dir" in message and "\n" not in message
    elsewhere = tmp_path / "results"
    assert results.writable_results_dir(str(model_dir), "dev", str(elsewhere)) == str(elsewhere)
    assert not elsewhere.exists() and not (model_dir / "eval_dev").exists(), "nothing made yet"


def test_t2t_eval_says_eval_dir_is_the_way_when_the_results_cannot_go_in_the_model_dir(tmp_path):
    from conftest import run_binary
    from test_faults import assert_fails_in_one_line

    (tmp_path / "eval_dev").write_text("a file where the results would go\n")
    proc = run_binary("t2t-eval", f"--model_dir={tmp_path}")
    assert_fails_in_one_line(proc, f"--model_dir={tmp_path / 'eval_dev'}: exists and is not a directory", "--eval_dir")
