"""Every shell block of README.md is classified and the runnable ones are run, in order.

A block's info string says how: ```sh test=fast runs in the default suite, test=slow
with the slow tests, test=skip (reason) never (e.g. it needs a TPU). The blocks of one
README share a working directory, so a later block can use what an earlier one made,
just as a reader typing them would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", re.S | re.M)


def shell_blocks() -> list[tuple[int, str, str]]:
    """(line number, mode, code) of each sh/bash block; mode is fast, slow or skip."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        lang, info, code = match.group(1), match.group(2), match.group(3)
        if lang not in ("sh", "bash", "shell"):
            continue
        line = text.count("\n", 0, match.start()) + 1
        mode = re.search(r"test=(fast|slow|skip)", info)
        blocks.append((line, mode.group(1) if mode else "", code))
    return blocks


BLOCKS = shell_blocks()


def test_every_shell_block_says_how_it_is_tested():
    unclassified = [line for line, mode, _ in BLOCKS if not mode]
    assert not unclassified, f"README.md shell blocks at lines {unclassified} need test=fast|slow|skip"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch directory that looks like a checkout to the commands (examples/ etc.)."""
    path = tmp_path_factory.mktemp("readme")
    for name in ("examples", "bin", "scripts", "problems", "hparams"):
        os.symlink(REPO / name, path / name)
    return path


def _params():
    for index, (line, mode, _) in enumerate(BLOCKS):
        if mode in ("fast", "slow"):
            marks = [pytest.mark.slow] if mode == "slow" else []
            yield pytest.param(index, id=f"README.md:{line}", marks=marks)


_DONE: set[int] = set()


@pytest.mark.parametrize("index", list(_params()))
def test_readme_block(index, workdir):
    """Runs block `index` after any earlier block it may build on that has not run yet.

    Fast blocks build only on fast blocks; a slow block may build on both.
    """
    mode = BLOCKS[index][1]
    allowed = {"fast"} if mode == "fast" else {"fast", "slow"}
    for earlier in range(index):
        if earlier not in _DONE and BLOCKS[earlier][1] in allowed:
            _run_block(earlier, workdir)
    _run_block(index, workdir)


def _run_block(index: int, workdir: Path) -> None:
    _DONE.add(index)
    code = BLOCKS[index][2]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(REPO / "bin"), str(Path(sys.executable).parent), env["PATH"]])
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"{code}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def test_the_readme_problem_is_the_shipped_one():
    """The walkthrough's problem class is examples/usr_dir/which_book.py, which its blocks use."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    shipped = (REPO / "examples" / "usr_dir" / "which_book.py").read_text(encoding="utf-8")
    blocks = [code for lang, _, code in FENCE.findall(text) if lang == "python" and "which_book" in code]
    assert len(blocks) == 1 and blocks[0].strip() in shipped
