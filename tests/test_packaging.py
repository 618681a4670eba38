"""The package a user installs is the whole toolkit: built-ins, their data and every binary,
working from any directory with no checkout in sight."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

BINARIES = sorted(p.name for p in (REPO / "bin").iterdir() if p.name.startswith("t2t-"))


def _setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def test_setup_cfg_lists_every_package_of_the_tree():
    """setup.cfg lists packages by hand (the built-ins are mapped from the top level):
    a subpackage added to t2tcli/ and not listed would be missing from the wheel."""
    config = _setup_cfg()
    listed = set(config["options"]["packages"].split())
    mapped = dict(line.split(" = ") for line in config["options"]["package_dir"].strip().splitlines())
    assert mapped == {"t2tcli.builtin.problems": "problems", "t2tcli.builtin.hparams": "hparams"}
    tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "t2tcli").rglob("__init__.py")}
    for name, folder in mapped.items():
        tree |= {
            name + "".join("." + part for part in p.parent.relative_to(REPO / folder).parts)
            for p in (REPO / folder).rglob("__init__.py")
        }
    assert listed == tree


def test_every_binary_is_a_console_script():
    scripts = _setup_cfg()["options.entry_points"]["console_scripts"]
    names = sorted(line.split("=")[0].strip() for line in scripts.strip().splitlines())
    assert names == BINARIES


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The sdist and the wheel built from it (as `python -m build` does), the wheel
    installed with --target into a directory outside the checkout."""
    base = tmp_path_factory.mktemp("packaging")
    dist = base / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-o", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        cwd=base,
    )
    (sdist,) = dist.glob("t2tcli-*.tar.gz")
    (wheel,) = dist.glob("t2tcli-*.whl")
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("/problems/data/translate_en_es.csv") for n in tar.getnames())
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        entry_points = next(whl.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "t2tcli/builtin/problems/data/quora/train.csv" in names
    assert "t2tcli/builtin/hparams/transformer.py" in names
    assert {n.split("/")[0] for n in names if not n.startswith("t2tcli-")} == {"t2tcli"}, "nothing else top-level"
    for binary in BINARIES:
        assert f"{binary} = t2tcli.cli." in entry_points
    target = base / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    return target


def _run(installed: Path, cwd: Path, binary: str, *args: str) -> subprocess.CompletedProcess:
    """An installed entry point, run from `cwd` with only the installed copy importable
    ahead of the environment's dependencies."""
    env = dict(os.environ, PYTHONPATH=str(installed), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [str(installed / "bin" / binary), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_the_installed_wheel_runs_the_pipeline_outside_the_checkout(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import t2tcli, t2tcli.builtin.problems as p; print(t2tcli.__file__, p.__file__); "
            "from t2tcli import registry; print(registry.problem('translate_en_es').source(None).path)",
        ],
        cwd=elsewhere,
        env=dict(os.environ, PYTHONPATH=str(installed)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(Path(w).is_relative_to(installed) for w in where), where

    listing = _run(installed, elsewhere, "t2t-datagen", "--registry_help")
    assert listing.returncode == 0, listing.stderr[-2000:]
    for name in ("copy_sequence", "qp_all", "translate_en_es", "mtf_transformer_tiny", "t5_small"):
        assert f"  {name} " in listing.stdout

    # A shipped problem, no --tmp_dir: its data comes from the installed package.
    shipped = _run(installed, elsewhere, "t2t-datagen", "--problem=translate_en_es", "--data_dir=data")
    assert shipped.returncode == 0, shipped.stderr[-2000:]
    meta = json.loads((elsewhere / "data" / "translate_en_es.meta.json").read_text())
    assert meta["splits"]["train"]["examples"] > 5000

    steps = [
        ("t2t-datagen", "--problem=copy_sequence", "--data_dir=toy"),
        (
            "t2t-train",
            "--problem=copy_sequence",
            "--hparams_set=mtf_transformer_tiny",
            "--data_dir=toy",
            "--model_dir=run",
            "--train_steps=30",
        ),
    ]
    for step in steps:
        proc = _run(installed, elsewhere, *step)
        assert proc.returncode == 0, f"{step}: {proc.stderr[-2000:]}"
    (elsewhere / "in.txt").write_text("3 1 4 1 5\n2 7 1 8\n")
    decode = _run(
        installed, elsewhere, "t2t-decode", "--model_dir=run", "--decode_from_file=in.txt", "--decode_to_file=out.txt"
    )
    assert decode.returncode == 0, decode.stderr[-2000:]
    assert len((elsewhere / "out.txt").read_text().splitlines()) == 2
