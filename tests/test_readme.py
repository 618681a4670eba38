"""Every shell block of README.md and docs/*.md is classified and the runnable ones are run, in order.

A block's info string says how: ```sh test=fast runs in the default suite, test=slow
with the slow tests, test=skip (reason) never (e.g. it needs a TPU). The blocks of one
file share a working directory, so a later block can use what an earlier one made,
just as a reader typing them would; each file starts from a fresh one, so a guide
stands on its own. The links between the documents are checked too, so a guide named
on the front page exists and an anchor names a heading that does.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_docstrings import FORBIDDEN

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", re.S | re.M)
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_LINES = 300


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


def shell_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line number, mode, code) of each sh/bash block of `path`; mode is fast, slow, skip or ''."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        lang, info, code = match.group(1), match.group(2), match.group(3)
        if lang not in ("sh", "bash", "shell"):
            continue
        line = text.count("\n", 0, match.start()) + 1
        mode = re.search(r"test=(fast|slow|skip)", info)
        blocks.append((line, mode.group(1) if mode else "", code))
    return blocks


BLOCKS = {_name(path): shell_blocks(path) for path in DOCUMENTS}


def test_every_shell_block_says_how_it_is_tested():
    unclassified = [f"{name}:{line}" for name, blocks in BLOCKS.items() for line, mode, _ in blocks if not mode]
    assert not unclassified, f"shell blocks {unclassified} need test=fast|slow|skip"


def test_every_skipped_block_says_why():
    bare = []
    for path in DOCUMENTS:
        for match in FENCE.finditer(path.read_text(encoding="utf-8")):
            if "test=skip" in match.group(2) and not re.search(r"test=skip \(.+\)", match.group(2)):
                bare.append(_name(path))
    assert not bare, f"test=skip blocks in {bare} need a (reason)"


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    """A scratch directory per document that looks like a checkout to the commands (examples/ etc.)."""
    made: dict[str, Path] = {}

    def workdir(name: str) -> Path:
        if name not in made:
            path = tmp_path_factory.mktemp(Path(name).stem)
            for entry in ("examples", "bin", "scripts", "problems", "hparams"):
                os.symlink(REPO / entry, path / entry)
            made[name] = path
        return made[name]

    return workdir


def _params():
    for name, blocks in BLOCKS.items():
        for index, (line, mode, _) in enumerate(blocks):
            if mode in ("fast", "slow"):
                marks = [pytest.mark.slow] if mode == "slow" else []
                yield pytest.param(name, index, id=f"{name}:{line}", marks=marks)


_DONE: set[tuple[str, int]] = set()


@pytest.mark.parametrize("name,index", list(_params()))
def test_doc_block(name, index, workdirs):
    """Runs block `index` of `name` after any earlier block of it that it may build on and has not run yet.

    Fast blocks build only on fast blocks; a slow block may build on both.
    """
    blocks = BLOCKS[name]
    allowed = {"fast"} if blocks[index][1] == "fast" else {"fast", "slow"}
    for earlier in range(index):
        if (name, earlier) not in _DONE and blocks[earlier][1] in allowed:
            _run_block(name, earlier, workdirs(name))
    _run_block(name, index, workdirs(name))


def _run_block(name: str, index: int, workdir: Path) -> None:
    _DONE.add((name, index))
    line, _, code = BLOCKS[name][index]
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
    assert proc.returncode == 0, (
        f"{name}:{line}\n{code}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )


def test_the_walkthrough_problem_is_the_shipped_one():
    """The which_book class the documents show is examples/usr_dir/which_book.py, which their blocks use."""
    shipped = (REPO / "examples" / "usr_dir" / "which_book.py").read_text(encoding="utf-8")
    shown = [
        (path, code)
        for path in DOCUMENTS
        for lang, _, code in FENCE.findall(path.read_text(encoding="utf-8"))
        if lang == "python" and "which_book" in code
    ]
    assert shown, "no document shows the which_book problem"
    for path, code in shown:
        assert code.strip() in shipped, f"{_name(path)} shows a which_book that is not the shipped one"


def test_the_readme_is_a_front_page():
    """Short, and the two set-up commands on its first screen (that it is undated, like every
    guide, test_the_documents_leave_measured_figures_to_benchmarks_md checks)."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    first_screen = "\n".join(lines[:40])
    for command in ("scripts/demo", "scripts/test"):
        assert re.search(rf"^{command}\b", first_screen, re.M), f"{command} is not among README.md's first 40 lines"


# BENCHMARKS.md's own figures: a ratio such as 2.16x. A document that quotes them goes stale
# the next time bench/run re-measures a CPU kind.
FIGURES = {**FORBIDDEN, "a measured ratio": re.compile(r"\b\d+\.\d+x\b")}


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_the_documents_leave_measured_figures_to_benchmarks_md(path):
    found = [
        f"{_name(path)}:{n}: {what} ({match.group(0)!r})"
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for what, pattern in FIGURES.items()
        if (match := pattern.search(text))
    ]
    advice = "link BENCHMARKS.md instead of quoting its figures; dates belong in git history"
    assert not found, advice + ":\n" + "\n".join(found)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_every_link_between_the_documents_resolves():
    broken = []
    for path in DOCUMENTS:
        text = FENCE.sub("", path.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{_name(path)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{_name(path)}: {target} (no such heading)")
    assert not broken, broken


def test_every_guide_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(readme)}
    guides = {_name(path) for path in DOCUMENTS[1:]}
    assert guides, "docs/ has no guides"
    assert not guides - linked, f"guides the README does not link: {sorted(guides - linked)}"


def test_every_python_block_is_valid_python():
    """Python blocks are not run (they define problems or need a served model), but they must parse."""
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == "python":
                line = text.count("\n", 0, match.start()) + 1
                compile(match.group(3), f"{_name(path)}:{line}", "exec")


def test_the_mixtures_the_documents_show_are_registered_as_mixtures():
    """A guide's Mixture registered with register_problem would load, but --registry_help
    would list it among the problems; readers copy what the guides show."""
    shown = 0
    for path in DOCUMENTS:
        for lang, _, code in FENCE.findall(path.read_text(encoding="utf-8")):
            if lang != "python":
                continue
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "Mixture" for b in node.bases):
                    shown += 1
                    decorators = [ast.unparse(d) for d in node.decorator_list]
                    assert any(d.startswith("register_mixture") for d in decorators), (
                        f"{_name(path)}: Mixture {node.name} is registered by {decorators}, not register_mixture"
                    )
    assert shown, "no document shows a Mixture"


def test_the_readme_mixture_is_the_shipped_one():
    quora = (REPO / "problems" / "quora.py").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = [code for lang, _, code in FENCE.findall(readme) if lang == "python" and '"qp_all"' in code]
    assert len(blocks) == 1 and blocks[0].strip() in quora
