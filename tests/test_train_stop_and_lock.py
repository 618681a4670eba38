"""t2t-train's model_dir lock and its save on SIGTERM, in-process and in seconds.

The end-to-end test (a second trainer refused beside a live one, SIGTERM sent from
outside, the run resumed) is `slow`; these check the same two guarantees on the tiny
toy data, so the default suite notices either one switched off.
"""

from __future__ import annotations

import os
import signal

import pytest
from test_train_data import PROBLEMS, make_data_dir

from t2tcli import interrupts
from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.io import lock
from t2tcli.model import checkpoints
from t2tcli.train import loop, trainer


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return make_data_dir(str(tmp_path_factory.mktemp("stop_and_lock")), train_rows=64, dev_rows=8)[0]


def _config(data: str, model_dir, steps: int) -> trainer.TrainConfig:
    return trainer.TrainConfig(
        PROBLEMS[0],
        "mtf_transformer_tiny",
        data,
        str(model_dir),
        hparams="activation_dtype=float32,batch_size=4",
        train_steps=steps,
        save_checkpoints_steps=100_000,
        log_every_steps=100_000,
        random_seed=1,
    )


def test_training_holds_the_model_dir_and_a_held_one_is_refused(data, tmp_path, monkeypatch):
    model_dir = tmp_path / "run"
    held = []

    def training(cfg, *args):
        # While the steps would run, no other writer can take the model_dir.
        with pytest.raises(UserError, match=rf"{model_dir} is in use: .*\(pid {os.getpid()} on "):
            with lock.hold(cfg.model_dir, "another writer"):
                pass
        held.append(True)
        return 0

    monkeypatch.setattr(loop, "train", training)
    trainer.run(_config(data, model_dir, 5))
    assert held == [True]
    assert not (model_dir / ".t2tcli.lock").exists(), "released at the end"
    with lock.hold(str(model_dir), "evaluation results"):
        with pytest.raises(UserError, match=f"{model_dir} is in use: "):
            trainer.run(_config(data, model_dir, 5))
    assert held == [True], "refused before any step"


def test_sigterm_during_training_saves_the_step_reached_and_says_so(data, tmp_path, monkeypatch):
    """SIGTERM arrives after the third step: the run stops there, saves that step, and
    ends in Interrupted (exit status 143) naming it; without the graceful stop it would
    either die unsaved or run on to train_steps."""
    model_dir = tmp_path / "run"
    make_hook = interrupts.GracefulStop.hook

    def hook_sending_sigterm(stop):
        inner = make_hook(stop)

        class SigtermAtStep3(tf.compat.v1.train.SessionRunHook):
            steps = 0

            def after_run(self, run_context, run_values):
                self.steps += 1
                if self.steps == 3:
                    signal.raise_signal(signal.SIGTERM)
                inner.after_run(run_context, run_values)

        return SigtermAtStep3()

    monkeypatch.setattr(interrupts.GracefulStop, "hook", hook_sending_sigterm)
    previous = signal.signal(signal.SIGTERM, interrupts._raise)  # as every binary installs it
    try:
        with pytest.raises(interrupts.Interrupted) as stopped:
            trainer.run(_config(data, model_dir, 40))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.exit_status == 128 + signal.SIGTERM
    assert "stopped by SIGTERM at step 3, saved in" in str(stopped.value)
    assert checkpoints.latest_step(str(model_dir)) == 3
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-3")
    assert not (model_dir / ".t2tcli.lock").exists()
