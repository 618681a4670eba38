"""What oneDNN ran in a traced training step, or in any run, read from its verbose log.

A trace names TensorFlow's ops (`_MklEinsum`), not the kernel oneDNN chose for each call:
on a CPU with AMX, a product that falls back to an AVX-512 or reference kernel, or that
reorders an operand on every call, looks the same there as one on AMX tiles. oneDNN's log
names the implementation and the shapes of every call it ran, so a step's products can be
read by kernel and by shape, each with the rate it reached inside the step.

`bench/train.py --profile=DIR` keeps that log for the traced step; any other run's log can
be read the same way:

    ONEDNN_VERBOSE=1 .venv/bin/python bench/decode_step.py --repeats=1 > run.log
    .venv/bin/python bench/onednn_calls.py run.log
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Lines a traced worker prints around its traced step, so that the log of the calls in
# that step can be cut out of everything the process printed.
BEGIN = "t2tcli-bench: traced step begins"
END = "t2tcli-bench: traced step ends"
# The file `bench/train.py --profile=DIR` keeps that log in, beside the step's trace.
LOG_NAME = "onednn.log"
# Primitives that multiply matrices: their shapes give the FLOPs of each call.
PRODUCTS = ("matmul", "gemm_api")


@dataclass(frozen=True)
class Call:
    primitive: str
    implementation: str
    shape: str
    ms: float


def traced_step(output: str) -> list[str] | None:
    """The lines printed between the last BEGIN and the END after it; None without both."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line == BEGIN]
    if not starts:
        return None
    rest = lines[starts[-1] + 1 :]
    return rest[: rest.index(END)] if END in rest else None


def parse(lines: Iterable[str]) -> list[Call]:
    """The calls oneDNN ran (its `exec` lines); other lines are left out.

    A line is `onednn_verbose,exec,cpu,PRIMITIVE,IMPLEMENTATION,...,SHAPES,MS`; the fields
    between hold no commas in the versions TensorFlow ships.
    """
    calls = []
    for line in lines:
        fields = line.strip().split(",")
        if len(fields) < 7 or fields[0] != "onednn_verbose" or fields[1] != "exec":
            continue
        try:
            ms = float(fields[-1])
        except ValueError:
            continue
        calls.append(Call(fields[3], fields[4] or "-", fields[-2], ms))
    return calls


def product_flops(shape: str) -> float | None:
    """FLOPs of a product logged as `[BATCH x]MxK:[BATCH x]KxN`; None for other shapes."""
    try:
        left, right = ([int(n) for n in side.split("x")] for side in shape.split(":"))
    except ValueError:
        return None
    if len(left) < 2 or len(left) != len(right) or left[-1] != right[-2]:
        return None
    batch = math.prod(max(a, b) for a, b in zip(left[:-2], right[:-2], strict=True))
    return 2.0 * batch * left[-2] * left[-1] * right[-1]


def report(calls: list[Call], top: int = 12, where: str = "the traced step") -> list[str]:
    """oneDNN's time by primitive and implementation, then its costliest product shapes
    with the rate each reached (two products at once on two cores each count slower)."""
    if not calls:
        return [f"(no oneDNN calls logged in {where}: TensorFlow ran it on its own kernels)"]
    total = sum(c.ms for c in calls)
    out = [f"oneDNN calls in {where}: {len(calls)}, {total:.1f} ms summed"]
    by_kernel: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_shape: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c in calls:
        by_kernel[(c.primitive, c.implementation)].append(c.ms)
        if c.primitive in PRODUCTS:
            by_shape[(c.implementation, c.shape)].append(c.ms)
    for (primitive, implementation), times in sorted(by_kernel.items(), key=lambda kv: -sum(kv[1])):
        ms = sum(times)
        out.append(f"  {primitive:10s} {implementation:28s} {len(times):5d} calls {ms:10.1f} ms {ms / total:6.1%}")
    if by_shape:
        out.append(f"costliest product shapes (of {len(by_shape)}), each with the rate it reached as it ran:")
        ranked = sorted(by_shape.items(), key=lambda kv: -sum(kv[1]))
        for (implementation, shape), times in ranked[:top]:
            ms, flops = sum(times), product_flops(shape)
            rate = f"{flops * len(times) / ms / 1e6:8.1f} GFLOP/s" if flops and ms > 0 else f"{'':>15s}"
            out.append(f"  {shape:28s} {implementation:24s} {len(times):4d} calls {ms:9.1f} ms {rate}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="what a run printed with ONEDNN_VERBOSE=1 ('-': standard input)")
    parser.add_argument("--top", type=int, default=12, help="product shapes to list")
    args = parser.parse_args(argv)
    try:
        text = sys.stdin.read() if args.log == "-" else Path(args.log).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        parser.error(f"cannot read {args.log}: {e.strerror}")
    step = traced_step(text)
    where = "the traced step" if step is not None else args.log
    print("\n".join(report(parse(step if step is not None else text.splitlines()), args.top, where)))


if __name__ == "__main__":
    main()
