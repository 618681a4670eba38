"""The rate of each matrix product of a t5_small training step, one product at a time.

A traced step says how long each einsum took, but two products running at once on two
cores each take longer than alone, so a trace cannot tell a slow kernel from a shared
core. This measures every product shape of a step alone, as TensorFlow's Einsum runs it
in the model's graph, against the matmul peak `bench/train.py` measures: the sum, weighed
by how often a step runs each shape, is the time a step's products need at best, and
what a step takes beyond it is the rest of the work. Products run in the operand order
the model gives them (t2tcli.model.einsum_order); those it swaps are also timed as
mesh-tensorflow writes them. Then a layer's two gradients, which a step runs at once,
together against one after the other.

    .venv/bin/python bench/einsum_shapes.py [--dtype=auto|bfloat16|float32] [--hparams_set=t5_small]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def einsum_flops(equation: str, a: list[int], b: list[int]) -> float:
    """Multiply-adds of a two-operand einsum, counted twice: every label's size, multiplied."""
    operands = equation.split("->")[0].split(",")
    size: dict[str, int] = {}
    for letters, shape in zip(operands, (a, b), strict=True):
        size.update(zip(letters, shape, strict=True))
    return 2.0 * math.prod(size.values())


def step_products(batch: int, length: int, dims: dict) -> list[tuple[str, str, list[int], list[int], int]]:
    """(what, equation, left shape, right shape, times a step runs it) for every product of
    a training step at equal input and target lengths, as mesh-tensorflow's graph spells them."""
    b, n, d, ff, v = batch, length, dims["d_model"], dims["d_ff"], dims["vocab"]
    h, k, layers = dims["num_heads"], dims["d_kv"], dims["layers"]
    qkv, kv, hk = 3 * h * k, 2 * h * k, h * k
    attn = 3 * layers  # encoder self, decoder self, decoder-encoder
    out = []
    for name, width, count in (("ffn wi", ff, 2 * layers), ("qkv", qkv, 2 * layers), ("kv", kv, layers)):
        out += [
            (f"{name} forward", "abc,cd->abd", [b, n, d], [d, width], count),
            (f"{name} input grad", "abc,dc->abd", [b, n, width], [d, width], count),
            (f"{name} weight grad", "abc,abd->dc", [b, n, width], [b, n, d], count),
        ]
    out += [
        ("ffn wo forward", "abc,cd->abd", [b, n, ff], [ff, d], 2 * layers),
        ("ffn wo input grad", "abc,dc->abd", [b, n, d], [ff, d], 2 * layers),
        ("ffn wo weight grad", "abc,abd->dc", [b, n, d], [b, n, ff], 2 * layers),
        ("q/o forward", "abc,cd->abd", [b, n, hk], [hk, d], 4 * layers),
        ("q/o input grad", "abc,dc->abd", [b, n, d], [hk, d], 4 * layers),
        ("q/o weight grad", "abc,abd->dc", [b, n, hk], [b, n, d], 4 * layers),
        ("logits forward", "abc,dc->abd", [b, n, d], [v, d], 1),
        ("logits input grad", "abc,cd->abd", [b, n, v], [v, d], 1),
        ("logits weight grad", "abc,abd->cd", [b, n, v], [b, n, d], 1),
        ("attn logits; probs' grad", "abcd,abed->abce", [b, h, n, k], [b, h, n, k], 2 * attn),
        ("attn sum; queries' grad", "abcd,abde->abce", [b, h, n, n], [b, h, n, k], 2 * attn),
        ("attn keys'/values' grad 1", "abcd,abce->abed", [b, h, n, k], [b, h, n, n], attn),
        ("attn keys'/values' grad 2", "abcd,abce->abde", [b, h, n, n], [b, h, n, k], attn),
    ]
    return out


def seconds_per_call(fn, *args, trials: int = 3, least: float = 0.3) -> float:
    """Best of `trials` runs of at least `least` seconds each."""
    fn(*args).numpy()
    best = float("inf")
    for _ in range(trials):
        calls, start = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - start < least:
            fn(*args).numpy()
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="auto", help="auto: what training picks on this CPU")
    parser.add_argument("--hparams_set", default="t5_small")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from train import T5_VOCAB, model_dims, worker_peak

    from t2tcli.compat import tf
    from t2tcli.model import activation_dtype, einsum_order, hardware

    dims = model_dims(args.hparams_set, T5_VOCAB)
    args.dtype = activation_dtype.resolve(args.dtype)
    peak = worker_peak(args.dtype)["flops"]
    kind = hardware.detect().cpu_kind()
    print(f"CPU kind: {kind}; {args.dtype}; {args.hparams_set}, batch {args.batch} x {args.length}")
    print(f"Measured matmul peak (TF, 2048^2, best of 5 trials): {peak / 1e12:.3f} TFLOP/s")

    def scalar(eq: str, a, b, as_written: bool = False):
        """One product reduced to a cheap scalar of it, so that fetching the result costs little."""
        result = tf.einsum(eq, a, b) if as_written else einsum_order.einsum(eq, a, b)
        return tf.reduce_sum(tf.cast(result[..., :1], tf.float32))

    def product(eq: str, as_written: bool = False):
        return tf.function(lambda a, b: scalar(eq, a, b, as_written))

    total = flops_total = total_as_written = 0.0
    tensors = {}
    print(
        f"{'product':28s} {'equation':17s} {'n':>3s} {'ms':>8s} {'TFLOP/s':>8s} {'of peak':>8s}"
        f"  {'as written (swapped ones), ms':>30s}"
    )
    for what, eq, ls, rs, count in step_products(args.batch, args.length, dims):
        a = tf.cast(tf.random.normal(ls), args.dtype)
        b = tf.cast(tf.random.normal(rs), args.dtype)
        tensors[what] = (eq, a, b)
        flops = einsum_flops(eq, ls, rs)
        seconds = seconds_per_call(product(eq), a, b)
        swaps = einsum_order.swapped(eq) is not None
        written = seconds_per_call(product(eq, as_written=True), a, b) if swaps else seconds
        total += seconds * count
        total_as_written += written * count
        flops_total += flops * count
        rate = flops / seconds
        print(
            f"{what:28s} {eq:17s} {count:3d} {seconds * 1e3:8.2f} {rate / 1e12:8.3f} {rate / peak:8.0%}"
            + (f"  {written * 1e3:30.2f}" if swaps else "")
        )
    rate = flops_total / total
    print(
        f"per step, one product at a time: {total:.3f} s for {flops_total / 1e9:.1f} GFLOP, "
        f"{rate / 1e12:.3f} TFLOP/s, {rate / peak:.0%} of the peak; "
        f"every product as written: {total_as_written:.3f} s"
    )

    eq_x, gx, wx = tensors["ffn wi input grad"]
    eq_w, gw, xw = tensors["ffn wi weight grad"]

    @tf.function
    def both(a, b, c, d):
        return scalar(eq_x, a, b) + scalar(eq_w, c, d)

    together = seconds_per_call(both, gx, wx, gw, xw)
    apart = seconds_per_call(product(eq_x), gx, wx) + seconds_per_call(product(eq_w), gw, xw)
    print(f"ffn wi's two gradients: together {together * 1e3:.2f} ms, one after the other {apart * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
