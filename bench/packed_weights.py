#!/usr/bin/env python3
"""Benchmark: a decode step's products with the kernels as the fast engine holds them,
multiplied on TensorFlow's MatMul, against the same kernels laid out once by oneDNN
(t2tcli.decode.fast_kernels.packed_matmul, what kernel_layout.packed_kernels turns on).

    python bench/packed_weights.py                       # t5_small, 32, 64 and 256 rows
    python bench/packed_weights.py --hparams_set=t5_base --rows=64
    python bench/packed_weights.py --held=in_out           # held kernels as native-bfloat16 CPUs hold them

TensorFlow's oneDNN MatMul takes its kernel as a plain array at every call, so the GEMM
lays the kernel out for its inner loops again each time: at a decode step's few rows,
that pass over the whole kernel can be a large share of the product. This measures what
laying each kernel out once would save: one decoder step's products (each layer's
attention and FFN projections, then the logits) at each --rows, on one thread as a batch
runs beside others, in the dtype activation_dtype=auto picks here and in the kernel
layout the engine uses here. Both run in turns; each cell is the median of --rounds
calls, the best of --turns turns, and the two sides' outputs are compared.
bench/decode_layout.py --variants=packing measures the same choice on whole decodes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from train import T5_VOCAB  # noqa: E402  # the vocabulary bench/train.py trains with
from turns import best_session_medians  # noqa: E402

from t2tcli import registry  # noqa: E402
from t2tcli.compat import tf  # noqa: E402
from t2tcli.decode import engines, fast_kernels  # noqa: E402
from t2tcli.model import activation_dtype, hardware, kernel_layout  # noqa: E402

tf1 = tf.compat.v1
SIDES = ("held", "packed")


def step_products(hp: Any, vocab: int, ffn_padding: int) -> list[tuple[str, int, int]]:
    """(name, in, out) of each product one decoder step runs, the logits last."""
    inner, d_ff = hp.num_heads * hp.d_kv, hp.d_ff + ffn_padding
    gated = 2 if hp.ffn_activation.startswith("gated-") else 1
    layer = [
        ("self q, k, v", hp.d_model, 3 * inner),
        ("self o", inner, hp.d_model),
        ("enc-dec q", hp.d_model, inner),
        ("enc-dec o", inner, hp.d_model),
        ("ffn wi", hp.d_model, gated * d_ff),
        ("ffn wo", d_ff, hp.d_model),
    ]
    return layer * hp.num_decoder_layers + [("logits", hp.d_model, vocab)]


def build(
    side: str,
    products: list[tuple[str, int, int]],
    kernels: list[np.ndarray],
    rows: int,
    dtype: tf.DType,
    transposed: bool,
) -> tuple[tf.Graph, tf.Operation, list[tf.Tensor]]:
    """A graph of one step's products on random rows: (graph, initializer, fetches)."""
    graph = tf.Graph()
    with graph.as_default():
        widths = sorted({n_in for _, n_in, _ in products})
        # Variables, so that TensorFlow cannot fold a product of constants away.
        inputs = {
            w: tf.convert_to_tensor(
                tf1.Variable(tf.constant(np.random.default_rng(w).standard_normal((rows, w)), dtype), trainable=False)
            )
            for w in widths
        }
        fetches = []
        for (name, n_in, _), kernel in zip(products, kernels, strict=True):
            # The engine keeps the logits' kernel [in, out] on every CPU (fast_weights).
            transpose = transposed and name != "logits"
            held = tf.convert_to_tensor(
                tf1.Variable(tf.constant(kernel.T if transpose else kernel, dtype), trainable=False)
            )
            y = fast_kernels.dense(inputs[n_in], held, transpose=transpose, packed=side == "packed")
            fetches.append(tf.cast(y, tf.float32))
        init = tf1.global_variables_initializer()
    return graph, init, fetches


def session_config() -> tf1.ConfigProto:
    """The fast engine's session for batches side by side (a thread each, no Grappler),
    with one inter-op thread too, so that the step's products run one at a time."""
    config = engines.fast_session_config(tf1.ConfigProto(), workers=2)
    config.inter_op_parallelism_threads = 1
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small")
    parser.add_argument("--rows", default="32,64,256", help="rows a step multiplies (a batch's part, beams included)")
    parser.add_argument("--rounds", type=int, default=10, help="calls per cell; the median is kept")
    parser.add_argument("--turns", type=int, default=2, help="turns of both sides; the best median is kept")
    parser.add_argument(
        "--held",
        choices=["machine", "in_out", "out_in"],
        default="machine",
        help="the held kernels' layout: the engine's on this machine, or either one forced",
    )
    args = parser.parse_args()
    hp = registry.hparams(args.hparams_set)
    machine = hardware.detect()
    dtype = tf.as_dtype(activation_dtype.resolve("auto", machine=machine))
    layout = kernel_layout.for_machine(machine, hp.d_ff)
    transposed = layout.transposed_kernels if args.held == "machine" else args.held == "out_in"
    products = step_products(hp, T5_VOCAB, layout.ffn_padding)
    rng = np.random.default_rng(0)
    kernels = [(rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32) for _, n_in, n_out in products]
    flops = sum(2 * n_in * n_out for _, n_in, n_out in products)
    print(f"{args.hparams_set}: {len(products)} products a decoder step, {flops / 1e6:.0f} MFLOP a row")
    print(
        f"CPU kind: {machine.cpu_kind()}; {dtype.name} (activation_dtype=auto here); held kernels "
        f"{'[out, in]' if transposed else '[in, out]'}{' (forced)' if args.held != 'machine' else ''}, "
        f"FFN padding {layout.ffn_padding}"
    )
    rows_list = [int(r) for r in args.rows.split(",")]
    sessions, outputs = {}, {}
    for rows in rows_list:
        for side in SIDES:
            graph, init, fetches = build(side, products, kernels, rows, dtype, transposed)
            session = tf1.Session(graph=graph, config=session_config())
            session.run(init)
            outputs[rows, side] = session.run(fetches)  # also the warm-up
            sessions[rows, side] = (session, fetches)
    best = best_session_medians(sessions, args.rounds, args.turns)
    print(f"one decoder step's products on one thread: median of {args.rounds} calls, best of {args.turns} turns")
    print(f"{'rows':>6s}{'held, ms':>11s}{'packed, ms':>12s}{'ratio':>8s}{'packed GFLOP/s':>16s}{'max rel. diff':>15s}")
    for rows in rows_list:
        held, packed = best[rows, "held"], best[rows, "packed"]
        diff = max(
            float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))
            for a, b in zip(outputs[rows, "held"], outputs[rows, "packed"], strict=True)
        )
        print(
            f"{rows:6d}{held * 1e3:11.2f}{packed * 1e3:12.2f}{held / packed:7.2f}x"
            f"{rows * flops / packed / 1e9:16.1f}{diff:15.1e}"
        )


if __name__ == "__main__":
    main()
