"""Shared test helpers: run the binaries as a user would, from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from t2tcli import compat  # noqa: E402,F401


def require_extra(module: str):
    """The module of an extra the suite needs (the `test` extra: torch, transformers,
    CTranslate2, Beam), imported; without it the suite fails rather than skipping the
    tests that would have caught a broken feature."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(
            f"{module} is missing ({exc}): the tests need the test extra (scripts/install test, "
            "or pip install -e '.[test]')",
            pytrace=False,
        )


def run_binary(
    name: str,
    *args: str,
    check: bool = False,
    stdin: str | None = None,
    timeout: float = 900,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Runs bin/<name> with `args` in a fresh Python process (in `cwd`, default this one's);
    returns the completed process."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def binary():
    return run_binary
