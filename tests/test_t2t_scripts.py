"""tensor2tensor's binaries, flag names and decode hparams, as its users' scripts use them."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, require_extra, run_binary
from test_faults import assert_fails_in_one_line
from toy_model import toy_model  # noqa: F401  (session fixture)

# In the shape of tensor2tensor's README walkthrough and the decode scripts its users
# publish; only the problem and hparams set are ones t2tcli registers.
T2T_SCRIPT = r"""
set -euo pipefail
PROBLEM=copy_sequence
MODEL=transformer
HPARAMS=mtf_transformer_tiny
DATA_DIR=$PWD/t2t_data
TMP_DIR=$PWD/t2t_datagen
TRAIN_DIR=$PWD/t2t_train/$PROBLEM/$MODEL-$HPARAMS
USR_DIR=$PWD/usr
mkdir -p $DATA_DIR $TMP_DIR $TRAIN_DIR $USR_DIR
touch $USR_DIR/__init__.py

t2t-datagen --data_dir=$DATA_DIR --tmp_dir=$TMP_DIR --problem=$PROBLEM

t2t-trainer --data_dir=$DATA_DIR --problems=$PROBLEM --model=$MODEL --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR --t2t_usr_dir=$USR_DIR --train_steps=40 --save_checkpoints_steps=10 \
  --keep_checkpoint_max=10 --worker_gpu=1 --eval_steps=2 --schedule=train_and_evaluate

printf 'a b c\nd e f g\nh i\n' > decode_this.txt
BEAM_SIZE=4
ALPHA=0.6
t2t-decoder --data_dir=$DATA_DIR --problem=$PROBLEM --model=$MODEL --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR --t2t_usr_dir=$USR_DIR \
  --decode_hparams="beam_size=$BEAM_SIZE,alpha=$ALPHA,return_beams=False,write_beam_scores=False" \
  --decode_from_file=decode_this.txt --decode_to_file=translation.txt
t2t-decoder --data_dir=$DATA_DIR --problem=$PROBLEM --model=$MODEL --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR --decode_hparams="beam_size=$BEAM_SIZE,alpha=$ALPHA,return_beams=True" \
  --decode_from_file=decode_this.txt --decode_to_file=beams.txt

t2t-bleu --translation=translation.txt --reference=decode_this.txt > bleu.txt
t2t-avg-all --model_dir=$TRAIN_DIR --output_dir=$PWD/averaged --n=2 --min_steps=20
t2t-exporter --model=$MODEL --hparams_set=$HPARAMS --problem=$PROBLEM --data_dir=$DATA_DIR --output_dir=$TRAIN_DIR \
  --t2t_usr_dir=$USR_DIR
"""


def test_a_tensor2tensor_script_runs_unchanged(tmp_path):
    env = dict(
        os.environ, PATH=os.pathsep.join([str(REPO / "bin"), os.path.dirname(sys.executable), os.environ["PATH"]])
    )
    done = subprocess.run(
        ["bash", "-c", T2T_SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    train_dir = tmp_path / "t2t_train" / "copy_sequence" / "transformer-mtf_transformer_tiny"
    run = json.loads((train_dir / "run.json").read_text())
    assert run["flags"]["model_dir"] == str(train_dir) and run["flags"]["usr_dir"] == [str(tmp_path / "usr")]
    assert len((tmp_path / "translation.txt").read_text().splitlines()) == 3
    beams = [line.split("\t") for line in (tmp_path / "beams.txt").read_text().splitlines()]
    assert [len(row) for row in beams] == [4, 4, 4], "every beam, tab-separated"
    assert re.fullmatch(r"BLEU_uncased = +\d+\.\d\d\nBLEU_cased = +\d+\.\d\d\n", (tmp_path / "bleu.txt").read_text())
    averaged = sorted(p.name for p in (tmp_path / "averaged").glob("model.ckpt-*.index"))
    assert averaged == ["model.ckpt-20.index", "model.ckpt-30.index", "model.ckpt-40.index"]
    assert json.loads((tmp_path / "averaged" / "averaged_from.json").read_text())["steps"] == [30, 40]
    assert list((train_dir / "export").glob("*/saved_model.pb")), "the exporter's default place: model_dir/export"


def test_a_flag_under_both_names_or_an_unknown_model_is_one_line(tmp_path):
    both = run_binary("t2t-train", f"--output_dir={tmp_path / 'a'}", f"--model_dir={tmp_path / 'b'}")
    assert_fails_in_one_line(both, "--output_dir and --model_dir are one flag (--model_dir)")
    model = run_binary("t2t-trainer", "--model=lstm_seq2seq", f"--output_dir={tmp_path / 'a'}", "--problem=x")
    assert_fails_in_one_line(model, "--model=lstm_seq2seq", "--model=transformer or --model=mtf_transformer")
    gpus = run_binary("t2t-trainer", "--worker_gpu=2", "--mesh_shape=batch:4", f"--output_dir={tmp_path / 'c'}")
    assert_fails_in_one_line(gpus, "--worker_gpu=2 and --mesh_shape=batch:4 disagree")
    assert not any((tmp_path / name).exists() for name in "abc")


def test_help_lists_the_aliases_under_their_flags():
    shown = run_binary("t2t-trainer", "--help").stdout
    model_dir = re.search(r"\n  --model_dir +(.*?)\n  --", shown, re.S)
    assert model_dir and "Also --output_dir (tensor2tensor's name)" in " ".join(model_dir.group(1).split())
    assert "--t2t_usr_dir" in shown and "--schedule" in shown and "continuous_eval" in shown
    own = run_binary("t2t-avg-checkpoints", "--help").stdout
    assert "Also --output_dir" not in " ".join(own.split()), "its own --output_dir is no alias"


def test_bleu_prints_t2t_lines_cased_and_uncased(tmp_path):
    (tmp_path / "hyp.txt").write_text("The cat sat on the mat.\nIt rained, all day.\n")
    (tmp_path / "ref.txt").write_text("the cat sat on the mat.\nIt rained, all day.\n")
    shown = run_binary("t2t-bleu", f"--translation={tmp_path / 'hyp.txt'}", f"--reference={tmp_path / 'ref.txt'}")
    assert shown.returncode == 0, shown.stderr
    uncased, cased = (float(line.split("=")[1]) for line in shown.stdout.splitlines())
    assert uncased == 100.0 and 0 < cased < 100.0
    (tmp_path / "short.txt").write_text("one line\n")
    bad = run_binary("t2t-bleu", f"--translation={tmp_path / 'short.txt'}", f"--reference={tmp_path / 'ref.txt'}")
    assert_fails_in_one_line(bad, "1 translated lines but 2 reference lines")


def test_t2t_decode_hparams(toy_model, tmp_path):  # noqa: F811
    lines = tmp_path / "in.txt"
    lines.write_text("a b c d e\nf g h i j\nf g h\ni\n")
    out = tmp_path / "out.txt"
    base = [f"--output_dir={toy_model['model_dir']}", f"--decode_from_file={lines}", f"--decode_to_file={out}"]
    assert run_binary("t2t-decoder", *base, "--decode_hparams=num_samples=2,max_input_size=16").returncode == 0
    assert out.read_text().split("\n")[:-1] == ["a b c d e", "f g h i j"], "the first two lines, copied"
    (tmp_path / "ref.txt").write_text("a b c d e\nf g h i j\n")
    scored = run_binary(
        "t2t-decoder", *base, "--decode_hparams=num_samples=2", f"--decode_reference={tmp_path / 'ref.txt'}"
    )
    assert scored.returncode == 0 and "BLEU_uncased = 100.00" in scored.stderr, scored.stderr[-2000:]
    records = tmp_path / "records.txt"
    # Every record 3-10 letters long, as the toy model was trained on: shorter ones it
    # may not copy exactly (one CPU's model wrote "f" back as "f f").
    records.write_text("a b c|d e\nf g|h i j\n")
    split = [f"--output_dir={toy_model['model_dir']}", f"--decode_from_file={records}", f"--decode_to_file={out}"]
    assert run_binary("t2t-decoder", *split, "--decode_hparams=delimiter=|").returncode == 0
    assert out.read_text() == "a b c|d e f g|h i j|", "records end at the delimiter, in and out"
    (tmp_path / "in.txt001").write_text("h i j\n")
    shard = [f"--output_dir={toy_model['model_dir']}", f"--decode_from_file={lines}", f"--decode_to_file={out}"]
    assert run_binary("t2t-decoder", *shard, "--decode_shards=2", "--worker_id=1").returncode == 0
    assert (tmp_path / "out.txt001").read_text() == "h i j\n", "shard 1 of 2: in.txt001 -> out.txt001"
    beams = run_binary("t2t-decoder", *base, "--decode_hparams=beam_size=3,return_beams=True,num_samples=2")
    assert beams.returncode == 0, beams.stderr[-2000:]
    texts = [line.split("\t") for line in out.read_text().splitlines()]
    assert [len(row) for row in texts] == [3, 3] and [row[0] for row in texts] == ["a b c d e", "f g h i j"]
    scored = run_binary("t2t-decoder", *base, "--decode_hparams=beam_size=3,return_beams=True,write_beam_scores=True")
    assert scored.returncode == 0, scored.stderr[-2000:]
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert [row[0::2] for row in rows[:2]] == texts, "each beam followed by its score"
    assert all(re.fullmatch(r"-\d+\.\d\d|-?0\.00", score) for row in rows for score in row[1::2]), "T2T's %.2f"
    # Three different hypotheses, not one thrice. Two can read the same: the toy model
    # may emit padding ids, which the text leaves out (and so does the score, which
    # t2t-decode writes to six digits rather than T2T's two).
    precise = run_binary(
        "t2t-decode", *base, "--decode_hparams=beam_size=3,return_beams=True,write_beam_scores=True,num_samples=2"
    )
    assert precise.returncode == 0, precise.stderr[-2000:]
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert all(len(set(zip(row[0::2], row[1::2], strict=True))) == 3 for row in rows), "three different hypotheses"
    refused = run_binary("t2t-eval", f"--model_dir={toy_model['model_dir']}", "--decode_hparams=return_beams=True")
    assert_fails_in_one_line(refused, "return_beams is t2t-decode's; t2t-eval scores the best decode")
    unknown = run_binary("t2t-decoder", *base, "--decode_hparams=return_beam=False")
    assert_fails_in_one_line(unknown, "unknown hparam 'return_beam'", "return_beams")


@pytest.mark.parametrize("engine", ["fast", "ctranslate2"])
def test_decode_interactive_answers_each_line_before_the_next(toy_model, engine):  # noqa: F811
    """Engines that keep batches in flight take none ahead here: a line must not wait for the next."""
    if engine == "ctranslate2":
        require_extra("ctranslate2")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bin" / "t2t-decoder"), f"--output_dir={toy_model['model_dir']}",
         "--decode_interactive", f"--decode_hparams=engine={engine}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        answers = []
        for line in ("a b c", "d e f g"):
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 120
            ready = []
            while not ready and time.monotonic() < deadline:
                ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            assert ready, f"no answer to {line!r} while stdin stays open"
            answers.append(proc.stdout.readline().rstrip("\n"))
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()  # reaped: a killed decoder's pin in the shared model_dir is then seen as stale
    assert answers == ["a b c", "d e f g"]


def test_trainer_schedule_evaluate_runs_t2t_eval(toy_model, tmp_path):  # noqa: F811
    results = tmp_path / "eval"
    args = [f"--output_dir={toy_model['model_dir']}", "--max_examples=20", f"--eval_dir={results}"]
    done = run_binary("t2t-trainer", "--schedule=evaluate", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((results / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 400 and record["problem"] == "copy_sequence"


@pytest.mark.parametrize("binary", ["t2t-trainer", "t2t-decoder", "t2t-exporter", "t2t-avg-all", "t2t-bleu"])
def test_t2t_binary_names_start(binary):
    shown = run_binary(binary, "--help")
    assert shown.returncode == 0 and "flags:" in shown.stdout


def _stderr_lines(proc: subprocess.CompletedProcess, fragment: str) -> list[str]:
    return [line for line in proc.stderr.splitlines() if fragment in line]


def test_t2t_decoder_names_its_output_as_t2t_does(toy_model, tmp_path):  # noqa: F811
    lines = tmp_path / "in.txt"
    lines.write_text("a b c d e\nf g h i j\n")
    run = [f"--output_dir={toy_model['model_dir']}", "--model=transformer", f"--decode_from_file={lines}"]
    named = run_binary("t2t-decoder", *run, "--hparams_set=transformer_tiny", "--decode_hparams=beam_size=4,alpha=0.6")
    assert named.returncode == 0, named.stderr[-2000:]
    decodes = tmp_path / "in.txt.transformer.transformer_tiny.copy_sequence.beam4.alpha0.6.decodes"
    assert decodes.read_text() == "a b c d e\nf g h i j\n" and named.stdout == ""
    warned = _stderr_lines(named, "--hparams_set=transformer_tiny differs")
    assert len(warned) == 1 and "mtf_transformer_tiny" in warned[0], named.stderr[-2000:]
    same = run_binary("t2t-decoder", *run, "--hparams_set=mtf_transformer_tiny", "--decode_hparams=beam_size=1")
    assert same.returncode == 0 and not _stderr_lines(same, "differs"), same.stderr[-2000:]
    assert (tmp_path / "in.txt.transformer.mtf_transformer_tiny.copy_sequence.beam1.alpha0.6.decodes").exists()
    own = run_binary("t2t-decode", f"--model_dir={toy_model['model_dir']}", f"--decode_from_file={lines}")
    assert own.returncode == 0 and own.stdout == "a b c d e\nf g h i j\n", "t2t-decode still writes stdout"
    assert len(list(tmp_path.glob("*.decodes"))) == 2, "t2t-decode wrote no .decodes file"
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("a b c\ta b c\n")
    scored = run_binary("t2t-decoder", f"--output_dir={toy_model['model_dir']}", f"--score_file={pairs}",
                        f"--decode_to_file={tmp_path / 'scores.txt'}")  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert re.fullmatch(r"-\d+\.\d{6}\n", (tmp_path / "scores.txt").read_text()), "T2T's %.6f"


def test_t2t_decoder_decodes_the_dev_split_without_an_input_file(toy_model, tmp_path):  # noqa: F811
    model = [f"--output_dir={toy_model['model_dir']}", "--model=transformer", "--hparams_set=mtf_transformer_tiny"]
    logged = run_binary("t2t-decoder", *model, "--decode_hparams=num_samples=3", cwd=tmp_path)
    assert logged.returncode == 0, logged.stderr[-2000:]
    inputs = [line.split("INPUT: ", 1)[1] for line in _stderr_lines(logged, "Inference results INPUT: ")]
    outputs = [line.split("OUTPUT: ", 1)[1] for line in _stderr_lines(logged, "Inference results OUTPUT: ")]
    targets = [line.split("TARGET: ", 1)[1] for line in _stderr_lines(logged, "Inference results TARGET: ")]
    assert len(inputs) == len(outputs) == 3 and targets == inputs, "copy_sequence: the dev targets are the inputs"
    assert list(tmp_path.iterdir()) == [], "no --decode_to_file: logged only, as T2T's decoder does"
    written = run_binary(
        "t2t-decoder", *model, "--decode_hparams=num_samples=3", f"--decode_to_file={tmp_path / 'dev'}"
    )
    assert written.returncode == 0, written.stderr[-2000:]
    base = tmp_path / "dev.transformer.mtf_transformer_tiny.copy_sequence.beam1.alpha0.6"
    assert Path(f"{base}.inputs").read_text().splitlines() == inputs
    assert Path(f"{base}.targets").read_text().splitlines() == targets
    assert Path(f"{base}.decodes").read_text().splitlines() == outputs
    own = run_binary("t2t-decode", f"--model_dir={toy_model['model_dir']}", "--decode_hparams=num_samples=2")
    assert own.returncode == 0 and own.stdout.splitlines() == outputs[:2], own.stderr[-2000:]
    beams = run_binary("t2t-decoder", *model, "--decode_hparams=num_samples=2,return_beams=True")
    assert_fails_in_one_line(beams, "return_beams", "decoding the dev split writes the best decode")


def test_t2t_exporter_warns_of_another_hparams_set(toy_model, tmp_path):  # noqa: F811
    done = run_binary(
        "t2t-exporter",
        f"--output_dir={toy_model['model_dir']}",
        "--hparams_set=transformer_base_single_gpu",
        "--export_format=hf",
        f"--export_dir={tmp_path / 'hf'}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_stderr_lines(done, "--hparams_set=transformer_base_single_gpu differs")) == 1
    assert (tmp_path / "hf" / "config.json").exists()


def test_avg_all_writes_under_model_dir_avg_by_default(toy_model, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    shutil.copytree(toy_model["model_dir"], model_dir, ignore=shutil.ignore_patterns("eval_*", "export", "ct*"))
    done = run_binary("t2t-avg-all", f"--model_dir={model_dir}", "--n=2", "--min_steps=200")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (model_dir / "avg").glob("model.ckpt-*.index")) == [
        "model.ckpt-200.index",
        "model.ckpt-400.index",
    ]


# tensor2tensor's README walkthrough and oss_integration_test.sh, their flags as they are: only the
# problem (whose data T2T downloads) and the hparams set are ones registered here, and the
# training is cut to a few steps.
T2T_WALKTHROUGH = r"""
set -euo pipefail
PROBLEM=translate_en_es
MODEL=transformer
HPARAMS=mtf_transformer_tiny

DATA_DIR=$PWD/t2t_data
TMP_DIR=$PWD/t2t_datagen
TRAIN_DIR=$PWD/t2t_train/$PROBLEM/$MODEL-$HPARAMS

mkdir -p $DATA_DIR $TMP_DIR $TRAIN_DIR

t2t-datagen \
  --data_dir=$DATA_DIR \
  --tmp_dir=$TMP_DIR \
  --problem=$PROBLEM

t2t-trainer \
  --data_dir=$DATA_DIR \
  --problem=$PROBLEM \
  --model=$MODEL \
  --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR \
  --train_steps=20 --local_eval_frequency=10 --eval_steps=2

DECODE_FILE=$DATA_DIR/decode_this.txt
echo "Hello world" >> $DECODE_FILE
echo "Goodbye world" >> $DECODE_FILE
echo -e 'Hola mundo\nAdiós mundo' > ref-translation.es

BEAM_SIZE=4
ALPHA=0.6

t2t-decoder \
  --data_dir=$DATA_DIR \
  --problem=$PROBLEM \
  --model=$MODEL \
  --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR \
  --decode_hparams="beam_size=$BEAM_SIZE,alpha=$ALPHA" \
  --decode_from_file=$DECODE_FILE \
  --decode_to_file=translation.es

cat translation.es

t2t-bleu --translation=translation.es --reference=ref-translation.es > bleu.txt

t2t-decoder --problem=$PROBLEM --data_dir=$DATA_DIR --model=$MODEL --hparams_set=$HPARAMS --output_dir=$TRAIN_DIR \
  --decode_hparams='num_samples=10'
t2t-decoder --problem=$PROBLEM --data_dir=$DATA_DIR --model=$MODEL --hparams_set=$HPARAMS --output_dir=$TRAIN_DIR \
  --decode_hparams="beam_size=$BEAM_SIZE,alpha=$ALPHA" --decode_from_file=$DECODE_FILE
"""


@pytest.mark.slow
def test_the_t2t_walkthrough_runs_with_its_flags(tmp_path):
    env = dict(
        os.environ, PATH=os.pathsep.join([str(REPO / "bin"), os.path.dirname(sys.executable), os.environ["PATH"]])
    )
    done = subprocess.run(
        ["bash", "-c", T2T_WALKTHROUGH], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "translate_en_es.csv is not in --tmp_dir" in done.stderr, "the scratch tmp_dir falls back, saying so"
    dev_losses = re.findall(r"step (\d+)  dev loss", done.stderr)
    assert dev_losses == ["10", "20"], "T2T's default schedule evaluates every --local_eval_frequency steps"
    assert len((tmp_path / "translation.es").read_text().splitlines()) == 2
    assert re.fullmatch(r"BLEU_uncased = +\d+\.\d\d\nBLEU_cased = +\d+\.\d\d\n", (tmp_path / "bleu.txt").read_text())
    assert len(re.findall("Inference results OUTPUT: ", done.stderr)) == 10, "num_samples=10 of the dev split"
    decodes = tmp_path / "t2t_data" / "decode_this.txt.transformer.mtf_transformer_tiny.translate_en_es.beam4.alpha0.6"
    assert len(Path(f"{decodes}.decodes").read_text().splitlines()) == 2
