"""t2t-decode on a trained toy model: alignment, pipes, scoring, greedy vs beam."""

from __future__ import annotations

import re

import pytest
from toy_model import toy_model  # noqa: F401  (session fixture)


def test_stdin_stdout_alignment_with_empty_lines(binary, toy_model):  # noqa: F811
    lines = ["a b c", "", "d e f g h", "   ", "c d e", "a b\\nc d", ""]
    proc = binary(
        "t2t-decode",
        f"--model_dir={toy_model['model_dir']}",
        "--decode_from_file=-",
        "--decode_to_file=-",
        "--decode_hparams=batch_size=4",
        stdin="\n".join(lines) + "\n",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines), proc.stdout
    out = out[:-1]
    assert [o == "" for o in out] == [not line.strip() for line in lines]
    assert out[0] == "a b c" and out[2] == "d e f g h" and out[4] == "c d e"
    assert "\n" not in out[5]
    assert "(step 400)" in proc.stderr
    assert "sentences/s" in proc.stderr and "tokens/s" in proc.stderr
    # Which engine auto took depends on the extras installed; the fast engine adds the
    # share of rows its loop computed, CTranslate2 the seconds t2t-decode waited on it.
    assert re.search(r"decode engine: (fast|ctranslate2) ", proc.stderr), proc.stderr[-500:]
    waited = r"[\d.]+ s of the [\d.]+ s waiting on the engine"
    summary = rf"1 batch, \d+ decode steps(, \d+% of their rows computed|; {waited})?\n"
    assert re.search(summary, proc.stderr), proc.stderr[-500:]


def test_file_to_file_and_scores(binary, toy_model, tmp_path):  # noqa: F811
    src = tmp_path / "in.txt"
    # No repeated tokens: the toy copy model, trained on 2 threads, is not always sure of
    # how many times to repeat one ("e e a" came back once as "e e e a").
    src.write_text("b c d\n\ne f a\n")
    dst = tmp_path / "out.txt"
    proc = binary(
        "t2t-decode",
        f"--model_dir={toy_model['model_dir']}",
        f"--decode_from_file={src}",
        f"--decode_to_file={dst}",
        "--decode_hparams=beam_size=2,batch_size=2",
    )
    assert proc.returncode == 0, proc.stderr
    assert dst.read_text() == "b c d\n\ne f a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b c\ta b c\na b c\tj j j j j j\n\n")
    proc = binary("t2t-decode", f"--model_dir={toy_model['model_dir']}", f"--score_file={pairs}", "--decode_to_file=-")
    assert proc.returncode == 0, proc.stderr
    right, wrong, empty = proc.stdout.split("\n")[:3]
    assert empty == ""
    assert float(wrong) < float(right) <= 0.0


def test_bad_input_is_one_line_error(binary, toy_model, tmp_path):  # noqa: F811
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a\tb\nno tab here\n")
    out = tmp_path / "scores.txt"
    proc = binary(
        "t2t-decode", f"--model_dir={toy_model['model_dir']}", f"--score_file={pairs}", f"--decode_to_file={out}"
    )
    assert proc.returncode == 1
    assert f"error: {pairs}:2: expected 'input<TAB>target'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    proc = binary("t2t-decode", f"--model_dir={tmp_path}", "--decode_from_file=-")
    assert proc.returncode == 1 and "is --model_dir" in proc.stderr


def test_beam_scores_at_least_greedy(toy_model):  # noqa: F811
    from t2tcli.decode import batching, engines
    from t2tcli.model import loading
    from t2tcli.model.checkpoints import resolve

    # float32: in bfloat16 the same sequence scores differently by ~1e-4 in a batch of
    # 4 rows (greedy) and of 16 (4 beams), which is numerics, not search.
    model = loading.load(toy_model["model_dir"], hparams="activation_dtype=float32")
    _, path = resolve(toy_model["model_dir"], None)
    lines = ["a b c d e", "j i h g", "a a a b b b", "c", "e d c b a j i h g f"]
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 32)[0]) for i, x in enumerate(lines)]
    scores = {}
    for beam in (1, 4):
        decode = {"beam_size": beam, "alpha": 0.0, "temperature": 0.0, "top_k": 0, "max_decode_length": 0}
        results = batching.predict_rows(rows, engines.predictor(model, decode, path), 4, 32)
        scores[beam] = [float(r["scores"]) for r in results]
    for greedy, beam in zip(scores[1], scores[4], strict=True):
        assert beam >= greedy - 1e-4
    assert all(s <= 0 for s in scores[4])


def test_batches_in_flight_keep_each_row_its_own_result(toy_model):  # noqa: F811
    """Several batches decode at once and come back in batch order: every row gets the
    result it gets when decoded alone, and the Estimator's own predict loop agrees."""
    from t2tcli.decode import batching, engines, settings, tf_predict
    from t2tcli.model import loading
    from t2tcli.model.checkpoints import resolve

    # float32, so batch shape cannot move a bfloat16 rounding (see the test above).
    model = loading.load(toy_model["model_dir"], hparams="activation_dtype=float32")
    _, path = resolve(toy_model["model_dir"], None)
    decode = settings.parse_decode_hparams("", model.hparams)
    estimator = tf_predict.estimator_for(model, decode.replace(engine="fast"))
    lines = ["a b c", "j", "d e f g h", "c c", "a b c d e f", "h g", "i", "b d f h j", "e e e"]
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 16)[0]) for i, x in enumerate(lines)]

    def outputs(predict, batch_size: int) -> list[list[int]]:
        results = batching.predict_rows(rows, predict, batch_size, 16)
        return [[int(i) for i in r["outputs"]] for r in results]

    alone = outputs(engines.session_predict(estimator, path, in_flight=1), 1)
    assert outputs(engines.session_predict(estimator, path, in_flight=3), 2) == alone
    assert outputs(engines.estimator_predict(estimator, path), 4) == alone
    # Distinct results, so a row given another row's result cannot pass unnoticed.
    assert len({tuple(ids) for ids in alone}) >= len(lines) - 2


def _count_rows_fed(monkeypatch) -> list[int]:
    """The rows each session run is fed from here on, in order."""
    from t2tcli.compat import tf

    rows_fed: list[int] = []

    class RowsFed(tf.compat.v1.Session):
        def run(self, fetches, feed_dict=None, **kwargs):
            feeds = (feed_dict or {}).items()
            rows_fed.extend(len(v) for k, v in feeds if str(getattr(k, "name", k)).startswith("inputs"))
            return super().run(fetches, feed_dict, **kwargs)

    monkeypatch.setattr(tf.compat.v1, "Session", RowsFed)
    return rows_fed


@pytest.mark.parametrize(
    ("read_ahead", "count", "fed"),
    [(True, 10, [4, 4, 1, 1]), (True, 8, [4, 4]), (False, 10, [2, 2, 2, 2, 1, 1])],
)
def test_fast_engine_splits_a_batch_no_other_batch_runs_beside(toy_model, monkeypatch, read_ahead, count, fed):  # noqa: F811
    """With a batch on each of 2 workers, the input's last batch is fed in a part per
    worker where it would run alone (an odd number of batches), and whole beside the
    batch before it; with no read-ahead, as an interactive decode runs, every batch is
    split. Padding rows are not fed; rows keep their own results, and the batch's counts
    are whole."""
    from t2tcli.decode import batching, engines, settings, tf_predict
    from t2tcli.model import loading
    from t2tcli.model.checkpoints import resolve

    model = loading.load(toy_model["model_dir"], hparams="activation_dtype=float32")
    _, path = resolve(toy_model["model_dir"], None)
    estimator = tf_predict.estimator_for(model, settings.parse_decode_hparams("engine=fast", model.hparams))
    lines = ["a b c", "j", "d e f g h", "c c", "a b c d e f", "h g", "i", "b d f h j", "e e e", "f a"][:count]
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 16)[0]) for i, x in enumerate(lines)]
    alone = batching.predict_rows(rows, engines.session_predict(estimator, path, in_flight=1), 1, 16)

    rows_fed = _count_rows_fed(monkeypatch)
    predict = engines.session_predict(estimator, path, in_flight=2 if read_ahead else 1, workers=2)
    results = batching.predict_rows(rows, predict, 4, 16)
    # Batches of 4 rows; of 10 lines, the last batch holds 2 and 2 rows of padding.
    assert rows_fed == fed
    assert [[int(i) for i in r["outputs"]] for r in results] == [[int(i) for i in r["outputs"]] for r in alone]
    assert sorted(int(r["decode_loop_rows"]) for r in results) == [2] * (count % 4) + [4] * (count - count % 4)


def test_fast_engine_answers_inputs_with_no_tokens_with_nothing_whatever_their_batch(toy_model, monkeypatch):  # noqa: F811
    """An input with no tokens looks like padding and gets zeros back, beside lines or in
    a batch of its own; such a batch runs one row, not all of them."""
    from t2tcli.decode import batching, engines, settings, tf_predict
    from t2tcli.model import loading
    from t2tcli.model.checkpoints import resolve

    model = loading.load(toy_model["model_dir"], hparams="activation_dtype=float32")
    _, path = resolve(toy_model["model_dir"], None)
    estimator = tf_predict.estimator_for(model, settings.parse_decode_hparams("engine=fast", model.hparams))
    # Longest first, in batches of 4: three lines and an empty input, then four empty inputs.
    lines = ["a b c d", "", "b c d", "", "c d", "", "", ""]
    rows = [batching.Row(i, batching.fit(model.vocab.encode(x), 16)[0]) for i, x in enumerate(lines)]
    rows_fed = _count_rows_fed(monkeypatch)
    results = batching.predict_rows(rows, engines.session_predict(estimator, path, workers=2), 4, 16)
    assert rows_fed == [3, 1]
    assert [r["outputs"].any() or r["scores"].any() for r in results] == [bool(line) for line in lines]


@pytest.mark.parametrize("flag", ["--decode_hparams=beam_size=0", "--decode_hparams=beam=4"])
def test_bad_decode_hparams(binary, toy_model, flag):  # noqa: F811
    proc = binary("t2t-decode", f"--model_dir={toy_model['model_dir']}", "--decode_from_file=-", flag, stdin="a\n")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "beam" in proc.stderr.splitlines()[-1]
