"""Benchmark: attention's q, k and v projections, one product per kernel or joined.

    python bench/projections.py                        # t5_small's shape
    python bench/projections.py --hparams_set=t5_base  # t5_base's
    python bench/projections.py --rounds=5 --turns=3

Times, in the activation dtype `auto` picks here, the forward and backward pass of one
self-attention layer's projections (q, k and v of a [batch, length, d_model] input, the
gradients to the input and the three kernels), and of an encoder-decoder layer's k and v,
as mesh-tensorflow runs them and as `t2tcli.model.projections` joins them. Both are built
through mesh-tensorflow and lowered as training lowers them; each side runs in turns, and
each cell is the median of --rounds calls, the best over --turns turns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from train import T5_VOCAB  # noqa: E402  # the vocabulary bench/train.py trains with
from turns import best_session_medians  # noqa: E402

from t2tcli import registry  # noqa: E402
from t2tcli.compat import tf  # noqa: E402
from t2tcli.model import activation_dtype, config, hardware, projections  # noqa: E402
from t2tcli.model import graph as model_graph  # noqa: E402

# isort: split
import mesh_tensorflow as mtf  # noqa: E402
from mesh_tensorflow.transformer import attention as mtf_attention  # noqa: E402

tf1 = tf.compat.v1
# Each layer's three projections; True where q joins k and v.
LAYERS = {"self-attention: q, k, v": True, "enc-dec: q; k, v": False}


def length_of(t: mtf.Tensor) -> mtf.Dimension:
    return next(d for d in t.shape.dims if d.name in ("length", "memory_length"))


def build(hp, batch: int, length: int, dtype: tf.DType, joined: bool, with_query: bool):
    """A graph of one layer's projections and their gradients: (graph, its initializer, fetches)."""
    graph = tf.Graph()
    with graph.as_default():
        mesh_graph = mtf.Graph()
        mesh = mtf.Mesh(mesh_graph, "mesh")
        b, n, m, d = (
            mtf.Dimension(name, size)
            for name, size in (("batch", batch), ("length", length), ("memory_length", length), ("d_model", hp.d_model))
        )
        heads, d_kv = mtf.Dimension("heads", hp.num_heads), mtf.Dimension("d_kv", hp.d_kv)
        # A variable, so that no step spends time drawing the input.
        x_value = tf1.Variable(tf.random.normal([batch, length, hp.d_model], dtype=dtype), trainable=False)
        x = mtf.import_tf_tensor(mesh, x_value.read_value(), mtf.Shape([b, n, d]))
        params = mtf_attention.AttentionParams(
            mesh, d, d, d, d_kv, d_kv, [heads], [heads], mtf.VariableDType(tf.float32, tf.float32, dtype)
        )
        if joined:
            params = projections.joined(params, with_query)
        memory = mtf.replace_dimensions(x, n, m)
        q = params.compute_q(x)
        k, v = params.compute_k(memory), params.compute_v(memory)
        # In the order attention takes them (t2tcli.model.attention), as training runs them:
        # mesh-tensorflow's products are transposed there, the joined ones already are.
        q, k, v = (
            mtf.transpose(t, mtf.Shape([b, heads, length_of(t), d_kv])) if t.shape.dims[1] != heads else t
            for t in (q, k, v)
        )
        # Each output is its own incoming gradient: nothing but the projections runs.
        grads = mtf.gradients([q, k, v], [x, params.wq, params.wk, params.wv], grad_ys=[q, k, v])
        lowering = mtf.Lowering(mesh_graph, {mesh: model_graph.placement_mesh_impl(config.build(hp, T5_VOCAB), [""])})
        fetches = [tf.reduce_sum(tf.cast(lowering.export_to_tf_tensor(g), tf.float32)) for g in grads]
        init = tf1.global_variables_initializer()
    return graph, init, fetches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10, help="calls per cell; the median is kept")
    parser.add_argument("--turns", type=int, default=2, help="turns of both sides; the best median is kept")
    args = parser.parse_args()
    hp = registry.hparams(args.hparams_set)
    machine = hardware.detect()
    dtype = activation_dtype.resolve("auto", machine=machine)
    print(
        f"{args.hparams_set}: d_model {hp.d_model}, {hp.num_heads} heads of {hp.d_kv};"
        f" batch {args.batch} x length {args.length}"
    )
    print(f"CPU kind: {machine.cpu_kind()}; activation dtype {dtype} (what activation_dtype=auto runs here)")
    sessions = {}
    for layer, with_query in LAYERS.items():
        for side in ("mesh-tensorflow", "joined"):
            graph, init, fetches = build(hp, args.batch, args.length, tf.as_dtype(dtype), side == "joined", with_query)
            session = tf1.Session(graph=graph)
            session.run(init)
            session.run(fetches)  # warm-up
            sessions[layer, side] = (session, fetches)
    best = best_session_medians(sessions, args.rounds, args.turns)
    print(
        f"one layer's projections, forward and backward: median of {args.rounds} calls, best of {args.turns} turns (ms)"
    )
    print(f"{'layer':26s}{'mesh-tensorflow':>17s}{'joined':>10s}{'ratio':>8s}")
    for layer in LAYERS:
        theirs, ours = best[layer, "mesh-tensorflow"], best[layer, "joined"]
        print(f"{layer:26s}{theirs * 1e3:17.2f}{ours * 1e3:10.2f}{theirs / ours:7.2f}x")


if __name__ == "__main__":
    main()
