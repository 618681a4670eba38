#!/usr/bin/env python3
"""Where the fast engine's decoding time goes: its decode loop on a random model of an
hparams set's shape, timed and traced one batch at a time.

bench/decode.py measures whole decodes against the peers; this says what inside a step
to shorten. It builds the graph t2t-decode's fast engine runs (t2tcli.decode.search over
t2tcli.decode.fast's weights, with this CPU's kernel layout and activation dtype, in a
session configured as the engine configures its own) for one batch of random input ids
and random weights, and prints, with the CPU kind:

* the time per decode step of one batch alone, in a part per core as t2t-decode runs a
  lone batch (median of --repeats runs);
* the output tokens/s of --in_flight batches at once, as t2t-decode runs them;
* one traced batch's op time by type (on one thread, as batches side by side run), and
  its wall time with some matmul running against the time with none, split by where the
  ops sit (the encoder, each decoder layer's self-attention with its caches,
  encoder-decoder attention and FFN, the norms, the logits), as bench/step_trace.py
  reads a training step's trace.

A random model almost never writes EOS, so every row runs --max_decode_length steps.

    python bench/decode_step.py                          # t5_small, greedy, 64 rows
    python bench/decode_step.py --beam_size=4
    python bench/decode_step.py --trace=out/decode.json  # also keep the Chrome trace
    python bench/decode_step.py --narrow=8               # the step's cost apart from its layers' arithmetic
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import step_trace  # noqa: E402
from train import T5_VOCAB  # noqa: E402

# Where an op of the fast engine's decode graph sits, by the scopes it names them with
# (t2tcli.decode.fast_step, fast, search); first match wins.
DECODE_KINDS: step_trace.Kinds = (
    ("encoder", re.compile(r"(?:^|/)encoder/")),
    ("norms", re.compile(r"/rms_norm/")),
    ("self-attention: cache, softmax, layout", re.compile(r"/self_attention/")),
    ("encoder-decoder attention: softmax, layout", re.compile(r"/cross_attention/")),
    ("FFN: activation, residual", re.compile(r"/ffn/")),
    ("logits: cast, top-k", re.compile(r"(?:^|/)logits/")),
    ("decoder: embedding, position bias", re.compile(r"/decoder/")),
)


def build(args: argparse.Namespace) -> tuple[Any, Any, dict, Any]:
    """(session, input placeholder, fetches, model config) of the decode graph, its
    weights random."""
    from t2tcli import registry
    from t2tcli.compat import tf
    from t2tcli.decode import engines, fast, search, settings, side_by_side
    from t2tcli.model import config as model_config
    from t2tcli.train import estimator

    tf1 = tf.compat.v1
    hp = registry.hparams(args.hparams_set)
    if args.narrow:
        # The same decode loop, op for op, with next to no arithmetic in its layers.
        hp.d_model, hp.d_ff, hp.num_heads, hp.d_kv = args.narrow, args.narrow, 1, args.narrow
    config = model_config.build(hp, T5_VOCAB).on_one_device()
    decode = settings.DecodeSettings.of({"beam_size": args.beam_size, "alpha": 0.6, "compute_scores": False}, hp)
    graph = tf1.Graph()
    with graph.as_default():
        tf1.set_random_seed(args.seed)
        weights = fast.Weights(config, held=True, beam_search=args.beam_size > 1)  # as t2t-decode's engine does
        inputs = tf1.placeholder(tf.int32, [None, args.inputs_length], name="inputs")
        decoded = search.decode(weights, inputs, decode.replace(batch_size=args.batch_size), args.max_decode_length)
        # Weights of about the scale a trained model's have; their values change no timing.
        randomize = [
            tf1.assign(v, tf.random.normal(v.shape, stddev=v.shape[-1] ** -0.5)) for v in tf1.global_variables()
        ]
        prepare = tf1.local_variables_initializer()
    base = estimator.session_config(config)
    workers = min(side_by_side.workers(), args.batch_size)  # as t2tcli.decode.engines runs it
    session = tf1.Session(graph=graph, config=engines.fast_session_config(base, workers))
    session.run(randomize)
    session.run(prepare)
    return session, inputs, {"ids": decoded.ids, "steps": decoded.steps}, config


def traced(session: Any, fetches: dict, feed: dict) -> str:
    """The Chrome trace (TensorFlow's step stats) of one run of `fetches`."""
    from tensorflow.python.client import timeline

    from t2tcli.compat import tf

    tf1 = tf.compat.v1
    metadata = tf1.RunMetadata()
    session.run(fetches, feed, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE), run_metadata=metadata)
    return timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small", help="the random model's shape")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--inputs_length", type=int, default=24, help="tokens per input row")
    parser.add_argument("--max_decode_length", type=int, default=32)
    parser.add_argument("--beam_size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of one batch alone")
    parser.add_argument("--in_flight", type=int, default=0, help="batches at once (0: as t2t-decode runs them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", default="", help="also write the traced batch's Chrome trace here")
    parser.add_argument(
        "--narrow",
        type=int,
        default=0,
        help="cut d_model, d_ff and d_kv to this width, with one head: what is left of a step is "
        "what faster matmuls cannot shorten (each op's start, the passes over the vocabulary)",
    )
    args = parser.parse_args()

    import numpy as np

    from t2tcli.decode import engines, side_by_side

    workers = min(side_by_side.workers(), args.batch_size)
    in_flight = args.in_flight or max(engines.BATCHES_IN_FLIGHT, workers)
    session, inputs, fetches, config = build(args)
    ids = np.random.default_rng(args.seed).integers(2, T5_VOCAB, size=[args.batch_size, args.inputs_length])
    feed = {inputs: ids.astype(np.int32)}
    shape = args.hparams_set + (f" narrowed to width {args.narrow}, one head" if args.narrow else "")
    print(f"CPU: {config.machine.cpu_kind()}; activations {config.activation_dtype}; {shape}, batch "
          f"{args.batch_size} x {args.inputs_length} input tokens, beam {args.beam_size}")  # fmt: skip
    steps = session.run(fetches, feed)["steps"]  # the first run builds the kernels
    part = side_by_side.part_rows(args.batch_size, workers)
    parts = [{inputs: ids[start : start + part].astype(np.int32)} for start in range(0, args.batch_size, part)]
    seconds = []
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda p: session.run(fetches, p), parts))
        for _ in range(args.repeats):
            started = time.perf_counter()
            list(pool.map(lambda p: session.run(fetches, p), parts))
            seconds.append(time.perf_counter() - started)
    alone = statistics.median(seconds)
    print(f"one batch alone, in {len(parts)} parts side by side: {steps} steps in {alone:.3f} s"
          f" (runs {min(seconds):.3f}-{max(seconds):.3f}), {1000 * alone / steps:.1f} ms a step,"
          " encoder included")  # fmt: skip
    batches = 2 * in_flight * max(1, args.repeats // 2)
    with ThreadPoolExecutor(in_flight) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: session.run(fetches, feed), range(batches)))
        together = time.perf_counter() - started
    print(f"{in_flight} batches in flight: {batches * args.batch_size * steps / together:.0f} output tokens/s"
          f" ({batches} batches in {together:.2f} s)")  # fmt: skip

    trace = traced(session, fetches, feed)
    path = Path(args.trace or "the traced batch (not kept: --trace)")
    if args.trace:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(trace)
    print(f"\nOne traced batch on one thread ({steps} steps; tracing slows it; attention's batched products count"
          " as matmuls):")  # fmt: skip
    print("\n".join(step_trace.report(path, json.loads(trace)["traceEvents"], DECODE_KINDS)))


if __name__ == "__main__":
    main()
