"""Benchmark: one attention layer's six einsums in mesh-tensorflow's order and head-major.

    python bench/attention_layout.py                        # t5_small: batch 16, length 128
    python bench/attention_layout.py --hparams_set=t5_base

The six are the logits (q times k, float32 as mesh-tensorflow computes them), the
weights times v (activation dtype), and the two gradients of each. mesh-tensorflow keeps
q, k and v as [batch, length, heads, d_kv]; t2tcli's training graph puts them in
[batch, heads, length, d_kv] order first (t2tcli.model.attention), at the cost of the
transposes also timed here: q, k, v and the output, each way. Each einsum runs alone in a
tf.function on every core; the best of 3 rounds is kept.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def einsum_flops(equation: str, a: list[int], b: list[int]) -> float:
    operands = equation.split("->")[0].split(",")
    size: dict[str, int] = {}
    for letters, shape in zip(operands, (a, b), strict=True):
        size.update(zip(letters, shape, strict=True))
    return 2.0 * math.prod(size.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", help="activation dtype (the logits stay float32)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from t2tcli import registry
    from t2tcli.compat import tf
    from t2tcli.model import hardware

    hp = registry.hparams(args.hparams_set)
    b, n, h, d = args.batch, args.length, hp.num_heads, hp.d_kv
    blhd, blhn = [b, n, h, d], [b, n, h, n]
    bhld, bhln = [b, h, n, d], [b, h, n, n]
    logits, act = "float32", args.dtype
    # (what, mesh-tf's equation and shapes, head-major's equation and shapes, dtype)
    cases = [
        ("logits = q k", ("abcd,aecd->abce", blhd, blhd), ("abcd,abed->abce", bhld, bhld), logits),
        ("d q = d logits k", ("abcd,adce->abce", blhn, blhd), ("abce,abed->abcd", bhln, bhld), logits),
        ("d k = d logits q", ("abcd,abce->adce", blhn, blhd), ("abce,abcd->abed", bhln, bhld), logits),
        ("out = weights v", ("abcd,adce->abce", blhn, blhd), ("abce,abed->abcd", bhln, bhld), act),
        ("d weights = d out v", ("abcd,aecd->abce", blhd, blhd), ("abcd,abed->abce", bhld, bhld), act),
        ("d v = weights d out", ("abcd,abce->aecd", blhd, blhn), ("abce,abcd->abed", bhln, bhld), act),
    ]

    def best_seconds(fn, *tensors) -> float:
        fn(*tensors).numpy()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(10):
                fn(*tensors).numpy()
            best = min(best, (time.perf_counter() - start) / 10)
        return best

    def einsum_seconds(equation: str, a: list[int], b: list[int], dtype: str) -> float:
        x = tf.cast(tf.random.normal(a), dtype)
        y = tf.cast(tf.random.normal(b), dtype)
        fn = tf.function(lambda x, y: tf.reshape(tf.einsum(equation, x, y), [-1])[0])
        return best_seconds(fn, x, y)

    machine = hardware.detect()
    print(f"{args.hparams_set}: batch {b}, length {n}, {h} heads of {d}; CPU kind {machine.cpu_kind()}")
    print(f"{'einsum':<22}{'dtype':<10}{'mesh-tf order':>22}{'head-major':>22}")
    totals = [0.0, 0.0]
    for what, theirs, ours, dtype in cases:
        row = []
        for i, (equation, a, bshape) in enumerate((theirs, ours)):
            seconds = einsum_seconds(equation, a, bshape, dtype)
            totals[i] += seconds
            row.append(f"{seconds * 1e3:7.2f} ms {einsum_flops(equation, a, bshape) / seconds / 1e9:5.0f} GF/s")
        print(f"{what:<22}{dtype:<10}{row[0]:>22}{row[1]:>22}")
    x = tf.cast(tf.random.normal(blhd), act)
    transpose = tf.function(lambda x: tf.reshape(tf.transpose(x, [0, 2, 1, 3]), [-1])[0])
    moves = 8 * best_seconds(transpose, x)  # q, k, v and the output, forward and backward
    print(f"{'8 transposes':<22}{act:<10}{'':>22}{moves * 1e3:7.2f} ms")
    print(f"one layer: mesh-tf order {totals[0] * 1e3:.1f} ms, head-major {(totals[1] + moves) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
