"""Checkpoint listing, selection and averaging on hand-made checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from toy_model import toy_model  # noqa: F401  (session fixture)

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.model import averaging, checkpoints


def make_checkpoint(model_dir: str, step: int, w: np.ndarray, b: float) -> str:
    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf.compat.v1.Variable(w.astype(np.float32), name="layer/w"),
            tf.compat.v1.Variable(np.float32(b), name="layer/b"),
            tf.compat.v1.Variable(np.int64(step), name="global_step"),
        ]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, os.path.join(model_dir, "model.ckpt"), global_step=step, write_meta_graph=False)


@pytest.fixture
def two_checkpoints(tmp_path):
    model_dir = str(tmp_path / "m")
    os.makedirs(model_dir)
    make_checkpoint(model_dir, 10, np.array([[1.0, 2.0], [3.0, 4.0]]), 1.0)
    make_checkpoint(model_dir, 20, np.array([[3.0, 6.0], [5.0, 0.0]]), 2.0)
    for name, text in (
        ("run.json", json.dumps({"problem": "p", "hparams_set": "h", "data_dir": "d"})),
        ("hparams.json", "{}"),
        ("vocab.model", "v"),
    ):
        (tmp_path / "m" / name).write_text(text)
    return model_dir


def test_list_select_and_resolve(two_checkpoints):
    model_dir = two_checkpoints
    assert [s for s, _ in checkpoints.list_checkpoints(model_dir)] == [10, 20]
    assert checkpoints.resolve(model_dir, "latest")[0] == 20
    assert checkpoints.resolve(model_dir, "10")[0] == 10
    assert [s for s, _ in checkpoints.select(model_dir, "all")] == [10, 20]
    assert [s for s, _ in checkpoints.select(model_dir, "20,10")] == [20, 10]
    with pytest.raises(UserError, match="no checkpoint of step 15"):
        checkpoints.select(model_dir, "15")
    with pytest.raises(UserError, match="expected latest, all"):
        checkpoints.select(model_dir, "newest")


def test_a_checkpoint_whose_index_is_still_being_written_is_not_listed(two_checkpoints, caplog):
    # A sharded save writes its merged index in place: a reader beside the trainer can
    # see the newest index before its last bytes are written.
    index = Path(two_checkpoints) / "model.ckpt-20.index"
    whole = index.read_bytes()
    for cut in (0, len(whole) // 2, len(whole) - 1):
        index.write_bytes(whole[:cut])
        assert [s for s, _ in checkpoints.list_checkpoints(two_checkpoints)] == [10]
        assert checkpoints.select(two_checkpoints, "all")[-1][0] == 10
    assert "model.ckpt-20 left out: its index is being written or was cut short" in caplog.text
    index.write_bytes(whole)
    assert [s for s, _ in checkpoints.list_checkpoints(two_checkpoints)] == [10, 20]


def test_average_two_known_checkpoints(two_checkpoints, tmp_path):
    out_dir = str(tmp_path / "avg")
    path, steps = averaging.average(two_checkpoints, 2, out_dir)
    assert steps == [10, 20]
    assert tf.train.latest_checkpoint(out_dir) == path
    reader = tf.train.load_checkpoint(path)
    np.testing.assert_allclose(reader.get_tensor("layer/w"), [[2.0, 4.0], [4.0, 2.0]])
    assert reader.get_tensor("layer/b") == pytest.approx(1.5)
    assert reader.get_tensor("layer/w").dtype == np.float32
    assert reader.get_tensor("global_step") == 20
    assert checkpoints.resolve(out_dir, None)[0] == 20
    for name in ("run.json", "hparams.json", "vocab.model"):
        assert os.path.exists(os.path.join(out_dir, name))


def test_average_binary(two_checkpoints, tmp_path, binary):
    out_dir = str(tmp_path / "avg1")
    proc = binary("t2t-avg-checkpoints", f"--model_dir={two_checkpoints}", "--num_last=1", f"--output_dir={out_dir}")
    assert proc.returncode == 0, proc.stderr
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(out_dir))
    np.testing.assert_allclose(reader.get_tensor("layer/w"), [[3.0, 6.0], [5.0, 0.0]])
    bad = binary("t2t-avg-checkpoints", f"--model_dir={tmp_path}", "--num_last=2", f"--output_dir={tmp_path / 'avg2'}")
    assert bad.returncode == 1
    assert "error: no checkpoint" in bad.stderr and "Traceback" not in bad.stderr


def test_averaged_toy_model_decodes(binary, toy_model, tmp_path):  # noqa: F811
    out_dir = str(tmp_path / "avg")
    proc = binary(
        "t2t-avg-checkpoints", f"--model_dir={toy_model['model_dir']}", "--num_last=2", f"--output_dir={out_dir}"
    )
    assert proc.returncode == 0, proc.stderr
    assert checkpoints.resolve(out_dir, None)[0] == 400
    proc = binary("t2t-decode", f"--model_dir={out_dir}", "--decode_from_file=-", stdin="a b\n\n")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split("\n")) == 3 and proc.stdout.split("\n")[1] == ""
    assert "(step 400)" in proc.stderr


def _files(directory: str) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(Path(directory).iterdir())}


def test_averaging_checkpoints_of_other_shapes_names_both_as_the_user_does(two_checkpoints, tmp_path):
    make_checkpoint(two_checkpoints, 30, np.zeros([3, 2]), 1.0)
    with pytest.raises(UserError) as refused:
        averaging.average(two_checkpoints, 2, str(tmp_path / "avg"))
    # The paths in model_dir, not the private ones the checkpoints were read at.
    model_dir = two_checkpoints
    assert str(refused.value) == (
        f"checkpoint {model_dir}/model.ckpt-20 does not match {model_dir}/model.ckpt-30 at variable 'layer/w'"
    )


def test_averaging_never_writes_over_a_run_trained_on_from_it(two_checkpoints, tmp_path, binary):
    """Average M1 into A1, fine-tune A1 on to step 30, average M1 into A1 again: refused in
    one line, A1 as it was, whether M1's newest step is behind, equal to or past A1's (the
    two runs count their steps apart). Averaged again before any training, it is written."""
    averaged = str(tmp_path / "a1")
    assert averaging.average(two_checkpoints, 2, averaged)[1] == [10, 20]
    assert averaging.average(two_checkpoints, 2, averaged)[1] == [10, 20], "the same average again"
    make_checkpoint(averaged, 30, np.array([[9.0, 9.0], [9.0, 9.0]]), 9.0)  # fine-tuned on in A1
    before = _files(averaged)
    refused = r"holds checkpoint model.ckpt-30, which no average wrote"
    with pytest.raises(UserError, match=refused):
        averaging.average(two_checkpoints, 2, averaged)
    make_checkpoint(two_checkpoints, 30, np.array([[1.0, 1.0], [1.0, 1.0]]), 1.0)  # M1 at A1's own step
    with pytest.raises(UserError, match=refused):
        averaging.average(two_checkpoints, 2, averaged)
    with pytest.raises(UserError, match=refused):
        averaging.average(two_checkpoints, 1, averaged, ending_at=30)
    make_checkpoint(two_checkpoints, 40, np.array([[1.0, 1.0], [1.0, 1.0]]), 1.0)  # M1 past it
    with pytest.raises(UserError, match=refused):
        averaging.average(two_checkpoints, 2, averaged)
    with pytest.raises(UserError, match=refused):
        averaging.average(two_checkpoints, 1, averaged, ending_at=40)
    proc = binary("t2t-avg-checkpoints", f"--model_dir={two_checkpoints}", "--num_last=1", f"--output_dir={averaged}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"t2t-avg-checkpoints: error: --output_dir={averaged} holds")
    assert _files(averaged) == before
    assert checkpoints.resolve(averaged, None)[0] == 30
    np.testing.assert_allclose(tf.train.load_checkpoint(f"{averaged}/model.ckpt-30").get_tensor("layer/w"), 9.0)


def test_averaging_refuses_checkpoint_files_and_state_no_average_wrote(two_checkpoints, tmp_path):
    """Stray model.ckpt-N files, a `checkpoint` state naming a step no average wrote, and an
    averaged_from.json whose record is not a list of steps all count as another run's."""
    averaged = tmp_path / "a1"
    averaging.average(two_checkpoints, 1, str(averaged), ending_at=10)
    averaging.average(two_checkpoints, 1, str(averaged), ending_at=20)
    record = json.loads((averaged / "averaged_from.json").read_text())
    assert record["written"] == [10, 20] and record["steps"] == [20]
    averaging.average(two_checkpoints, 2, str(averaged))  # unchanged: written again
    (averaged / "model.ckpt-20.meta").write_text("x")
    (averaged / "model.ckpt-20.index").unlink()
    averaging.average(two_checkpoints, 2, str(averaged))  # one of its own, cut short: written again
    (averaged / "model.ckpt-25.data-00000-of-00001").write_text("x")
    with pytest.raises(UserError, match="holds checkpoint model.ckpt-25, which no average wrote"):
        averaging.average(two_checkpoints, 2, str(averaged))
    (averaged / "model.ckpt-25.data-00000-of-00001").unlink()
    state = averaged / "checkpoint"
    state.write_text('model_checkpoint_path: "model.ckpt-50"\n')
    with pytest.raises(UserError, match="holds checkpoint model.ckpt-50, which no average wrote"):
        averaging.average(two_checkpoints, 2, str(averaged))
    state.write_text('model_checkpoint_path: "model.ckpt-20"\n')
    for written in (["20"], [True], "20", [-1], None):
        record["written"] = written
        (averaged / "averaged_from.json").write_text(json.dumps(record if written is not None else [record]))
        with pytest.raises(UserError, match="holds (checkpoint model.ckpt-|another run)"):
            averaging.average(two_checkpoints, 2, str(averaged))


def test_an_older_window_of_avg_all_leaves_the_latest_checkpoint_alone(two_checkpoints, tmp_path):
    averaged = str(tmp_path / "windows")
    averaging.average(two_checkpoints, 1, averaged, ending_at=20)
    averaging.average(two_checkpoints, 1, averaged, ending_at=10)
    assert [s for s, _ in checkpoints.list_checkpoints(averaged)] == [10, 20]
    assert checkpoints.resolve(averaged, None)[0] == 20


def test_averaging_into_a_directory_another_process_writes_is_refused(two_checkpoints, tmp_path):
    from t2tcli.io import lock

    averaged = tmp_path / "busy"
    with lock.hold(str(averaged), "a training run"):
        with pytest.raises(UserError, match=f"{averaged} is in use: .*\\(pid {os.getpid()} on "):
            averaging.average(two_checkpoints, 2, str(averaged))
    assert not checkpoints.list_checkpoints(str(averaged))
