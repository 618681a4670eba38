"""Benchmark: one Adafactor update of a T5 shape's weights, mesh-tensorflow's against t2tcli's.

    python bench/adafactor.py                        # t5_small's weights
    python bench/adafactor.py --hparams_set=t5_base

The weights come in three groups, updated as training updates them (float32 variables,
float32 gradients, one device): the shared embedding [vocab, d_model] (factored second
moment), the FFN kernels [d_model, d_ff] and [d_ff, d_model] (factored), and the
attention kernels [d_model, heads, d_kv] (not factored: d_kv is under 128); the layer
norms' scales and the relative attention bias, a few thousand values, are left out. Each
group is one session call of every variable's update; the two optimizers are measured
in turns, --turns times each, and the best median of --rounds calls is kept.
t2tcli.model.adafactor says what differs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from train import T5_VOCAB  # the vocabulary bench/train.py trains with
from turns import in_turn

REPO = Path(__file__).resolve().parent.parent


def weight_groups(hparams_set: str, vocab: int) -> dict[str, list[tuple[tuple[str, ...], tuple[int, ...]]]]:
    """{group: [(dimension names, sizes)]} of a T5 v1.0 set's trainable kernels."""
    from t2tcli import registry

    hp = registry.hparams(hparams_set)
    d, f, h, k = hp.d_model, hp.d_ff, hp.num_heads, hp.d_kv
    attention_layers = hp.num_encoder_layers + 2 * hp.num_decoder_layers
    ffn_layers = hp.num_encoder_layers + hp.num_decoder_layers
    return {
        "embedding": [(("vocab", "d_model"), (vocab, d))],
        f"{2 * ffn_layers} FFN kernels": [(("d_model", "d_ff"), (d, f)), (("d_ff", "d_model"), (f, d))] * ffn_layers,
        f"{4 * attention_layers} attention kernels": [(("d_model", "heads", "d_kv"), (d, h, k))] * 4 * attention_layers,
    }


def update_time_ms(optimizer_class, shapes, rounds: int) -> float:
    """Median wall time of one session call that updates every variable of `shapes`."""
    import mesh_tensorflow as mtf
    import numpy as np

    from t2tcli import registry
    from t2tcli.compat import tf
    from t2tcli.model import config as model_config
    from t2tcli.model import graph as model_graph

    tf1 = tf.compat.v1
    hp = registry.hparams("t5_small")
    hp.mesh_shape, hp.layout = "", ""
    config = model_config.build(hp, T5_VOCAB)
    with tf.Graph().as_default():
        tf1.train.get_or_create_global_step()
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        grads = []
        for i, (names, sizes) in enumerate(shapes):
            shape = mtf.Shape([mtf.Dimension(n, s) for n, s in zip(names, sizes, strict=True)])
            mtf.get_variable(mesh, f"w{i}", shape, initializer=tf1.random_normal_initializer())
            grad = tf1.get_variable(f"grad{i}", sizes, initializer=tf1.random_normal_initializer())
            grads.append(mtf.import_tf_tensor(mesh, grad.read_value(), shape))
        variables = graph.trainable_variables
        ops = optimizer_class(learning_rate=tf.constant(1e-6)).apply_grads(grads, variables)
        lowering = mtf.Lowering(graph, {mesh: model_graph.placement_mesh_impl(config, [""])})
        update = tf.group([lowering.lowered_operation(op) for op in ops])
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(3):
                sess.run(update)
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                sess.run(update)
                times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small")
    parser.add_argument("--vocab", type=int, default=T5_VOCAB)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--turns", type=int, default=2, help="times each optimizer is measured, in turns")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from t2tcli.model.adafactor import FewPassAdafactor

    # isort: split
    # Imported after t2tcli, whose shims mesh_tensorflow needs.
    import mesh_tensorflow as mtf

    optimizers = {"mesh-tensorflow": mtf.optimize.AdafactorOptimizer, "t2tcli few-pass": FewPassAdafactor}
    print(f"{args.hparams_set}, vocabulary {args.vocab}: one update, median of {args.rounds} (ms)")
    print(f"{'weights':24s} " + " ".join(f"{name:>17s}" for name in optimizers) + "    ratio")
    totals = dict.fromkeys(optimizers, 0.0)
    for group, shapes in weight_groups(args.hparams_set, args.vocab).items():
        best = dict.fromkeys(optimizers, float("inf"))
        for turn in range(args.turns):
            for name, cls in in_turn(optimizers.items(), turn):
                best[name] = min(best[name], update_time_ms(cls, shapes, args.rounds))
        for name in optimizers:
            totals[name] += best[name]
        mesh_tf, few_pass = best.values()
        print(f"{group:24s} {mesh_tf:17.2f} {few_pass:17.2f}    {mesh_tf / few_pass:.2f}x", flush=True)
    mesh_tf, few_pass = totals.values()
    print(f"{'all of them':24s} {mesh_tf:17.2f} {few_pass:17.2f}    {mesh_tf / few_pass:.2f}x")


if __name__ == "__main__":
    main()
