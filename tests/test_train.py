"""t2t-train end to end, as a user runs it: run record, logging, resume, fine-tuning."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO, run_binary
from test_train_data import PROBLEMS, make_data_dir

from t2tcli.compat import tf
from t2tcli.decode import tf_predict
from t2tcli.model import config as model_config


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data_dir(str(tmp_path_factory.mktemp("train")), train_rows=5000, dev_rows=32)


def train(data, model_dir, *extra, problem=PROBLEMS[0], steps=30, check=True):
    data_dir, usr_dir = data
    return run_binary(
        "t2t-train",
        f"--usr_dir={usr_dir}",
        f"--problem={problem}",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        f"--train_steps={steps}",
        "--log_every_steps=10",
        *extra,
        check=check,
    )


def logged_losses(text):
    return {
        int(s): float(v)
        for s, v in re.findall(r"step (\d+)  loss ([\d.]+)  lr \S+  [\d.]+ steps/s  \d+ tokens/s", text)
    }


@pytest.fixture(scope="module")
def copy_run(data, tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("copy_run"))
    proc = train(data, model_dir, steps=40)
    return model_dir, proc


def test_train_records_the_run_and_logs_progress(copy_run):
    model_dir, proc = copy_run
    losses = logged_losses(proc.stderr)
    assert sorted(losses) == [10, 20, 30, 40], proc.stderr[-2000:]
    assert losses[40] < losses[10]
    with open(os.path.join(model_dir, "run.json")) as f:
        run = json.load(f)
    assert run["problem"] == PROBLEMS[0] and run["hparams_set"] == "mtf_transformer_tiny"
    assert run["flags"]["train_steps"] == 40
    assert run["activation_dtype"] in ("float32", "bfloat16")
    with open(os.path.join(model_dir, "hparams.json")) as f:
        recorded = json.load(f)
    assert recorded["d_model"] == 64 and recorded["activation_dtype"] == "auto"
    assert f"activations in {run['activation_dtype']} (activation_dtype=auto: " in proc.stderr
    # The first step is reported at once, whatever log_every_steps is; later lines say what is left.
    assert re.search(r"step 1  loss [\d.]+  lr \S+  \(graph set-up and first step: [\d.]+ s\)", proc.stderr)
    assert re.search(r"step 30  loss .* tokens/s  eta \d+s", proc.stderr)
    assert "Compiled cluster using XLA" not in proc.stderr and "absl::InitializeLog" not in proc.stderr
    assert os.path.exists(os.path.join(model_dir, "vocab.model"))
    assert tf.train.latest_checkpoint(model_dir).endswith("model.ckpt-40")
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(model_dir))


def test_finished_run_relaunched_does_nothing(data, copy_run):
    model_dir, _ = copy_run
    proc = train(data, model_dir, steps=40)
    assert "already trained to step 40" in proc.stdout
    assert not logged_losses(proc.stderr)


def test_fine_tune_from_a_checkpoint_of_another_problem(data, copy_run, tmp_path):
    source, _ = copy_run
    target = str(tmp_path / "reverse")
    proc = train(data, target, f"--init_checkpoint={source}", problem=PROBLEMS[1], steps=10)
    # At default verbosity, one line says what was loaded: every weight, the optimizer's slots, and from where.
    loaded = re.findall(r"--init_checkpoint: loaded (\d+) of the model's (\d+) weight variables and (\d+) optimizer "
                        r"slots from (\S+) at step (\d+)", proc.stderr)  # fmt: skip
    assert len(loaded) == 1, proc.stderr[-3000:]
    weights, of, slots, origin, step = loaded[0]
    assert weights == of and int(weights) > 10 and int(slots) > 0
    assert (origin, step) == (os.path.join(source, "model.ckpt-40"), "40")
    start = tf.train.load_checkpoint(os.path.join(target, "model.ckpt-0"))
    done = tf.train.load_checkpoint(tf.train.latest_checkpoint(source))
    for name in ("shared/embedding", "decoder/block_001/layer_002/DenseReluDense/wo/kernel"):
        np.testing.assert_array_equal(start.get_tensor(name), done.get_tensor(name))
    assert start.get_tensor("global_step") == 0


def test_init_checkpoint_that_does_not_fit_lists_the_mismatches(data, copy_run, tmp_path):
    source, _ = copy_run
    proc = train(data, str(tmp_path / "wide"), f"--init_checkpoint={source}", "--hparams=d_ff=128", check=False)
    assert proc.returncode == 1
    assert "does not fit the model" in proc.stderr and "model [64, 128] vs checkpoint [64, 256]" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hparams=d_fff=3"], "unknown hparam 'd_fff'; did you mean 'd_ff'?"),
        (["--mesh_shape=model:2", "--layout=heads:modle"], "names mesh dimension 'modle'"),
        (["--hparams=activation_dtype=float16"], "activation_dtype='float16': use one of auto, bfloat16, float32"),
        (["--hparams=optimizer=sgd"], "hparam optimizer='sgd'"),
    ],
)
def test_bad_flags_fail_in_one_line_and_write_nothing(data, tmp_path, args, message):
    proc = train(data, str(tmp_path / "bad"), *args, check=False)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "bad")


def test_float32_activations_train(data, tmp_path):
    proc = train(data, str(tmp_path / "fp32"), "--hparams=activation_dtype=float32", steps=30)
    losses = logged_losses(proc.stderr)
    assert losses[30] < losses[10]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_random_seed_repeats_the_run(data, tmp_path, dtype):
    """--random_seed fixes the initial weights, the data order and dropout, bit for bit in
    bfloat16 too, where bfloat16 products are native and attention's logits come from one."""
    args = (f"--hparams=activation_dtype={dtype},dropout_rate=0.1", "--random_seed=7")
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train(data, str(run), *args, steps=10)
    a, b = (tf.train.load_checkpoint(str(run)) for run in runs)
    names = sorted(a.get_variable_to_shape_map())
    assert names == sorted(b.get_variable_to_shape_map())
    assert [n for n in names if not np.array_equal(a.get_tensor(n), b.get_tensor(n))] == []
    initial = [tmp_path / "c", tmp_path / "d"]
    for run in initial:
        train(data, str(run), *args, steps=0)
    c, d = (tf.train.load_checkpoint(str(run)) for run in initial)
    assert [n for n in names if not np.array_equal(c.get_tensor(n), d.get_tensor(n))] == [], "step 0 too"


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(data, tmp_path):
    data_dir, usr_dir = data
    model_dir = str(tmp_path / "killed")
    args = [
        sys.executable,
        str(REPO / "bin" / "t2t-train"),
        f"--usr_dir={usr_dir}",
        f"--problem={PROBLEMS[0]}",
        "--hparams_set=mtf_transformer_tiny",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        "--train_steps=100000",
        "--save_checkpoints_steps=10",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not os.path.exists(os.path.join(model_dir, "model.ckpt-20.index")):
            time.sleep(0.5)
        assert os.path.exists(os.path.join(model_dir, "model.ckpt-20.index")), "no checkpoint within 5 minutes"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = int(tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir)).get_tensor("global_step"))
    assert killed_at >= 20
    resumed = train(data, model_dir, "--save_checkpoints_steps=10", steps=killed_at + 10)
    assert f"resuming {model_dir} from step {killed_at}" in resumed.stderr
    assert all(step > killed_at for step in logged_losses(resumed.stderr))
    assert tf.train.latest_checkpoint(model_dir).endswith(f"model.ckpt-{killed_at + 10}")


@pytest.mark.slow
def test_tiny_model_learns_the_toy_problem(data, tmp_path):
    """>= 90% token accuracy of greedy decodes of reversed sequences on the dev split
    (chance is about 3%). Seeded, with room below the runs seen: an unseeded run ended
    at 92% where earlier ones had passed a 95% bar, and its decodes were right for the
    model it had trained."""
    from t2tcli.data.input import inputs
    from t2tcli.model import run_records

    data_dir, _ = data
    problem = PROBLEMS[1]
    model_dir = str(tmp_path / problem)
    train(data, model_dir, "--save_checkpoints_steps=2000", "--random_seed=1", problem=problem, steps=1500)
    _, hp, _ = run_records.load(model_dir)
    dev = inputs.input_fn(data_dir, problem, "dev", hp, training=False)
    targets = np.concatenate([b["targets"] for b in dev().as_numpy_iterator()])
    est = tf_predict.build_estimator(model_dir, model_config.build(hp, 40))
    outputs = np.stack(
        [p["outputs"] for p in est.predict(lambda params=None: dev().map(lambda b: {"inputs": b["inputs"]}))]
    )
    mask = targets > 0
    accuracy = ((outputs == targets) & mask).sum() / mask.sum()
    assert accuracy >= 0.90, accuracy


@pytest.mark.slow
def test_loss_falls_on_the_shipped_translation_data(tmp_path):
    data_dir, model_dir = str(tmp_path / "data"), str(tmp_path / "model")
    run_binary("t2t-datagen", "--problem=translate_en_es", f"--data_dir={data_dir}", check=True)
    proc = run_binary(
        "t2t-train",
        "--problem=translate_en_es",
        "--hparams_set=mtf_transformer_tiny",
        "--hparams=inputs_length=64,targets_length=64",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        "--train_steps=100",
        "--log_every_steps=10",
        "--schedule=train_and_evaluate",
        "--eval_every_steps=50",
        "--eval_steps=4",
        check=True,
    )
    losses = logged_losses(proc.stderr)
    assert losses[100] < 0.8 * losses[10], losses
    dev = [float(x) for x in re.findall(r"dev loss ([\d.]+)  perplexity", proc.stderr)]
    assert len(dev) == 2 and dev[1] < dev[0]


def test_a_run_shorter_than_its_warmup_is_told_which_hparam_to_set():
    from t2tcli import registry
    from t2tcli.train import run_plan

    hp = registry.hparams("mtf_transformer_small")
    line = run_plan.warn_short_warmup(hp, 2000)
    assert line is not None and "\n" not in line
    assert "warmup_steps=10000 is more than --train_steps=2000" in line and "ends at 20% of learning_rate" in line
    assert "set --hparams=warmup_steps=200" in line
    assert run_plan.warn_short_warmup(hp, 10000) is None and run_plan.warn_short_warmup(hp, 0) is None


def test_a_resume_may_change_the_activation_dtype_and_nothing_else():
    """The dtype is how a machine computes (the variables stay float32): a model_dir
    recorded as bfloat16 resumes as auto on a CPU without native bfloat16."""
    from t2tcli import registry
    from t2tcli.errors import UserError
    from t2tcli.model import run_records
    from t2tcli.train import run_plan

    recorded = registry.hparams("mtf_transformer_tiny")
    recorded.activation_dtype = "bfloat16"
    info = run_records.RunInfo(problem="copy_sequence", hparams_set="mtf_transformer_tiny", data_dir="")

    def resumed(hparams: str):
        cfg = run_plan.TrainConfig("copy_sequence", "", "", "run", hparams=hparams)
        return run_plan._resumed_hparams(cfg, info, recorded.copy())[1]

    assert resumed("").activation_dtype == "bfloat16"
    assert resumed("activation_dtype=auto").activation_dtype == "auto"
    with pytest.raises(UserError, match=r"different hparams \(d_model\)"):
        resumed("d_model=32,activation_dtype=auto")


def test_a_tpu_that_cannot_be_reached_is_one_line_before_anything_is_written(data, tmp_path):
    """Off Google Cloud (here: no network), naming a TPU stops the trainer at once."""
    model_dir = tmp_path / "run"
    proc = train(data, model_dir, "--tpu=no-such-tpu", "--tpu_zone=us-central1-b", "--gcp_project=nobody", check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "t2t-train: error: --tpu=no-such-tpu (tpu_zone=us-central1-b, gcp_project=nobody): no TPU reachable"
    ), last
    assert "Traceback" not in proc.stderr
    assert not model_dir.exists()
