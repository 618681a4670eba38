"""How often a train run's path from `t2t-train` to its first step re-enters each module.

A reader following the code pays for every jump back into a module already left. This
runs t2t-train in-process for one step on the copy_sequence problem (datagen first, in a
temporary directory) and records control passing between t2tcli modules. A call into a
module that returns without reaching a third one (a leaf: `hparams.get`, `fs.exists`) is
a lookup, not a jump, and is left out; every other return to a module already left counts.
It prints, per module, how many times control entered it.

    .venv/bin/python scripts/module_walk.py [--top 15] [--all]   # --all: leaf lookups too
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _walk(argv: list[str], leaves: bool) -> list[str]:
    """The t2tcli modules control passed through, in order, repeats of one module merged."""
    walk: list[str] = []
    # For each call into another module: where the callee starts in the walk, and whether it
    # called out to a third module (no leaf then).
    marks: list[list] = []

    def module_of(frame) -> str:
        name = frame.f_globals.get("__name__", "") if frame is not None else ""
        return name if name.startswith("t2tcli") else ""

    def profile(frame, event, arg):  # noqa: ARG001 - sys.setprofile's signature
        if event not in ("call", "return"):
            return
        here, there = module_of(frame), module_of(frame.f_back)
        if not here or not there or here == there:
            return
        if event == "call":
            if marks:
                marks[-1][1] = True  # the module calling out is no leaf
            if not walk or walk[-1] != there:
                walk.append(there)
            marks.append([len(walk), False])
            walk.append(here)
            return
        start, called_out = marks.pop() if marks else (len(walk), True)
        if not leaves and not called_out:
            del walk[start:]  # a lookup in a leaf module: no jump for a reader
        elif walk[-1] != there:
            walk.append(there)

    sys.argv = argv
    sys.path.insert(0, str(REPO))
    from t2tcli.cli import train

    sys.setprofile(profile)
    try:
        train.run()
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    return walk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--all", action="store_true", help="count calls into leaf modules too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data, model = f"{tmp}/data", f"{tmp}/model"
        subprocess.run(
            [sys.executable, str(REPO / "bin" / "t2t-datagen"), "--problem=copy_sequence", f"--data_dir={data}"],
            check=True,
            capture_output=True,
        )
        flags = ["--problem=copy_sequence", "--hparams_set=mtf_transformer_tiny", "--train_steps=1"]
        walk = _walk(["t2t-train", *flags, f"--data_dir={data}", f"--model_dir={model}"], args.all)
    entries = collections.Counter(walk)
    print(f"{len(entries)} modules entered; {len(walk) - len(entries)} returns to a module already left")
    for module, count in entries.most_common(args.top):
        print(f"{count:5d}  {module}")


if __name__ == "__main__":
    main()
