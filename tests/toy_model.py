"""A copy_sequence model trained once per test session with the real binaries.

Imported by the decode, eval, export and checkpoint tests. The trained directory is
kept under the session's base temp dir, so every module that asks for it after the
first gets it without training again. It trains in float32 on every machine: auto
would pick bfloat16 where the CPU runs it natively, and a bfloat16-trained toy is a
less sure model, whose unfinished lines make engines' beam searches legitimately differ.
A fixed seed makes it the same model in every session on a machine (unseeded, one
session in nine here failed a fast-against-mesh decode comparison).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import run_binary

TRAIN_STEPS = 400
SAVE_EVERY = 200


def train_toy_model(base: Path) -> dict[str, str]:
    data_dir, model_dir = base / "data", base / "model"
    done = base / "trained"
    if not done.exists():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        run_binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data_dir}", check=True)
        run_binary(
            "t2t-train",
            "--problem=copy_sequence",
            "--hparams_set=mtf_transformer_tiny",
            "--hparams=activation_dtype=float32",
            "--random_seed=1",
            f"--data_dir={data_dir}",
            f"--model_dir={model_dir}",
            f"--train_steps={TRAIN_STEPS}",
            f"--save_checkpoints_steps={SAVE_EVERY}",
            "--log_every_steps=100",
            check=True,
        )
        done.write_text("ok")
    return {"data_dir": str(data_dir), "model_dir": str(model_dir)}


@pytest.fixture(scope="session")
def toy_model(tmp_path_factory) -> dict[str, str]:
    """{"data_dir", "model_dir"} of a copy_sequence model trained to TRAIN_STEPS (read-only)."""
    return train_toy_model(tmp_path_factory.getbasetemp() / "toy_copy_model")
