"""Benchmark: t2t-train's training throughput beside Hugging Face T5 in PyTorch.

    python bench/train.py                          # t5_small: batch 16, lengths 128/128, vocab 32,128
    python bench/train.py --hparams_set=t5_base    # T5 base's shape
    python bench/train.py --quick                  # batch 8, lengths 64/64, fewer steps
    python bench/train.py --profile=DIR            # also: where a step's time goes, and oneDNN's kernels
    python bench/train.py --mesh_tf_loss           # t2tcli with mesh-tf's own loss ops (A/B)
    python bench/train.py --mesh_tf_attention      # t2tcli with mesh-tf's attention layout (A/B)
    python bench/train.py --mesh_tf_adafactor      # t2tcli with mesh-tf's Adafactor update (A/B)
    python bench/train.py --separate_projections   # t2tcli with one product per q, k, v kernel (A/B)
    python bench/train.py --per_layer_bias         # t2tcli building the self-attention bias in each layer (A/B)
    python bench/train.py --mesh_tf_norm           # t2tcli with mesh-tf's element-wise RMS norms (A/B)
    python bench/train.py --mesh_tf_ffn            # t2tcli with mesh-tf's separate FFN ReLU and dropout (A/B)
    python bench/train.py --einsums_as_written     # t2tcli without swapping einsum operands (A/B)
    python bench/train.py --float32_logits_product # t2tcli in bfloat16 with float32 attention-logit products (A/B)
    python bench/train.py --step_budget=60         # time slow rows over fewer steps (default: 180 s of them)
    python bench/train.py --run_limit=600          # stop a row's run after 600 s (default 1,200)
    python bench/train.py --peer_modes=eager       # the peer without torch.compile (default: eager,compile)
    python bench/train.py --only=hf                # the peer's rows only (hf, hf_compile, or e.g. hf_compile:bfloat16)

Both sides train the same encoder-decoder (the hparams set's d_model, d_ff, heads, d_kv,
layers; relu FFN, shared embeddings, relative attention; T5's 32,128-row vocabulary) from
random initialisation with Adafactor and the set's dropout, on the same batch and lengths of
full (unpadded) random token sequences. t2tcli runs through the same Estimator model_fn as
t2t-train, with its default activation dtype (auto: what this machine runs fastest) and with
bfloat16 and float32 forced. The peer runs at its best: `torch.optim.Adafactor` (fused
loops, not transformers' Python one), the set's dropout as ours, float32 and bfloat16
autocast, each eager and under `torch.compile` (--peer_modes); every row is shown and the
fastest is the peer's best, which the ratios compare against. Model FLOPs utilisation (MFU)
divides analytic model FLOPs (3x forward matmul FLOPs, attention included) by this machine's
measured matmul peak for the dtype used. Each configuration runs in a fresh process,
--repeats times in turns (reversed every other turn), its best kept; timings exclude graph
building and the first steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import onednn_calls
import step_trace
from turns import in_turn

REPO = Path(__file__).resolve().parent.parent
T5_VOCAB = 32128  # T5's SentencePiece vocabulary padded to a multiple of 128


def model_dims(hparams_set: str, vocab: int) -> dict:
    """The shape both sides train, from a registered hparams set."""
    sys.path.insert(0, str(REPO))
    from t2tcli import registry

    hp = registry.hparams(hparams_set)
    if hp.ffn_activation != "relu" or not hp.tie_embeddings:
        raise SystemExit(f"{hparams_set}: the peer is built as T5 v1.0 (relu, tied embeddings); pick a t5_* set")
    if hp.num_encoder_layers != hp.num_decoder_layers:
        raise SystemExit(f"{hparams_set}: encoder and decoder depths differ")
    names = ("d_model", "d_ff", "num_heads", "d_kv", "dropout_rate")
    return {**{k: hp.get(k) for k in names}, "layers": hp.num_encoder_layers, "vocab": vocab}


def model_flops_per_step(dims: dict, batch: int, li: int, lt: int) -> float:
    """Training FLOPs of one step: 3x the forward pass's matmul FLOPs."""
    d, f, h, k, n, v = (dims[x] for x in ("d_model", "d_ff", "num_heads", "d_kv", "layers", "vocab"))
    hk = h * k
    enc = n * (2 * li * d * hk * 4 + 2 * 2 * li * li * hk + 2 * li * d * f * 2)
    dec_self = 2 * lt * d * hk * 4 + 2 * 2 * lt * lt * hk
    dec_cross = 2 * lt * d * hk * 2 + 2 * li * d * hk * 2 + 2 * 2 * lt * li * hk
    dec = n * (dec_self + dec_cross + 2 * lt * d * f * 2)
    logits = 2 * lt * d * v
    return 3.0 * batch * (enc + dec + logits)


class StepClock:
    """When a worker stops warming up and stops timing, the same rule for both sides.

    A row normally warms up for `warmup` steps and times `steps`. A row far slower than
    the rest (the peer's bfloat16 autocast on a CPU without native bfloat16 took over 100 s
    a step at t5_small's shape) would take many minutes that way, so warm-up also ends once
    its steps took half of `budget`, and timing once at least one step is timed and the
    timed steps took `budget` seconds. Such a row is still measured, over fewer steps, and
    says how many.
    """

    def __init__(self, warmup: int, steps: int, budget: float) -> None:
        self.warmup, self.steps, self.budget = warmup, steps, budget
        self.ends: list[float] = []  # when each step ended
        self.started = time.perf_counter()
        self.timing_from: int | None = None  # index into ends of the last warm-up step

    def step_done(self) -> bool:
        """Call after each step; True while more steps are wanted."""
        now = time.perf_counter()
        self.ends.append(now)
        if self.timing_from is None:
            if len(self.ends) >= self.warmup or now - self.started >= self.budget / 2:
                self.timing_from = len(self.ends) - 1
            return True
        timed = len(self.ends) - 1 - self.timing_from
        return timed < self.steps and now - self.ends[self.timing_from] < self.budget

    def result(self) -> dict:
        """{"step_time": mean seconds of the timed steps, "steps": how many were timed}."""
        if self.timing_from is None or len(self.ends) - 1 == self.timing_from:
            raise RuntimeError("no step was timed")
        timed = len(self.ends) - 1 - self.timing_from
        return {"step_time": (self.ends[-1] - self.ends[self.timing_from]) / timed, "steps": timed}


def worker_peak(dtype: str) -> dict:
    """The best and the median of five trials of 2048^2 products, each trial half a second
    or more.

    Each call chains four products and reduces only the last, so the reduction's pass and
    the call's overhead are small beside the products; with one short product per call, the
    overhead weighed on the figure and the peak measured varied widely from one process to
    the next. The median says how steady the machine was while it was measured.
    """
    sys.path.insert(0, str(REPO))
    from t2tcli.compat import tf

    n, chain = 2048, 4
    a = tf.cast(tf.random.normal([n, n]), dtype)
    b = tf.cast(tf.random.normal([n, n]) / n**0.5, dtype)  # keeps the chain's values near 1

    @tf.function
    def products(x, b):
        for _ in range(chain):
            x = tf.matmul(x, b)
        return tf.reduce_sum(tf.cast(x, tf.float32))

    products(a, b).numpy()
    trials = []
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - start < 0.5:
            products(a, b).numpy()
            calls += 1
        trials.append(calls * chain * 2 * n**3 / (time.perf_counter() - start))
    trials.sort()
    return {"flops": trials[-1], "median": trials[len(trials) // 2]}


MESH_TF_LOSS = "BENCH_TRAIN_MESH_TF_LOSS"  # set: t2tcli rows train with mesh-tf's own loss ops
MESH_TF_ATTENTION = "BENCH_TRAIN_MESH_TF_ATTENTION"  # set: t2tcli rows keep mesh-tf's attention layout
MESH_TF_ADAFACTOR = "BENCH_TRAIN_MESH_TF_ADAFACTOR"  # set: t2tcli rows update with mesh-tf's AdafactorOptimizer
SEPARATE_PROJECTIONS = "BENCH_TRAIN_SEPARATE_PROJECTIONS"  # set: t2tcli rows project q, k, v kernel by kernel
PER_LAYER_BIAS = "BENCH_TRAIN_PER_LAYER_BIAS"  # set: t2tcli rows build the self-attention bias in every layer
MESH_TF_NORM = "BENCH_TRAIN_MESH_TF_NORM"  # set: t2tcli rows use mesh-tf's own RMS norm ops
MESH_TF_FFN = "BENCH_TRAIN_MESH_TF_FFN"  # set: t2tcli rows use mesh-tf's DenseReluDense
EINSUMS_AS_WRITTEN = "BENCH_TRAIN_EINSUMS_AS_WRITTEN"  # set: t2tcli rows keep each einsum's operand order
FLOAT32_LOGITS_PRODUCT = "BENCH_TRAIN_FLOAT32_LOGITS_PRODUCT"  # set: q and k cast to float32 for the logits


def worker_t2t(
    dims: dict, dtype: str, batch: int, li: int, lt: int, steps: int, budget: float, profile_dir: str = ""
) -> dict:
    sys.path.insert(0, str(REPO))
    import tempfile

    import numpy as np

    from t2tcli import registry
    from t2tcli.compat import tf
    from t2tcli.model import config, gin_bindings, optimization
    from t2tcli.train import estimator, model_fn

    if os.environ.get(MESH_TF_LOSS):
        gin_bindings.fuses_loss = lambda config: False
    if os.environ.get(MESH_TF_NORM):
        gin_bindings.fuses_norm = lambda config: False
    if os.environ.get(MESH_TF_FFN):
        gin_bindings.fuses_ffn_dropout = lambda config: False
    if os.environ.get(EINSUMS_AS_WRITTEN):
        from t2tcli.model import einsum_order

        einsum_order.swapped = lambda equation: None
    if os.environ.get(MESH_TF_ATTENTION):
        gin_bindings.head_major = lambda use_tpu: False
    if os.environ.get(FLOAT32_LOGITS_PRODUCT):
        gin_bindings.rounds_attention_logits = lambda config: False
    if os.environ.get(SEPARATE_PROJECTIONS):
        gin_bindings.joins_projections = lambda config: False
    if os.environ.get(PER_LAYER_BIAS):
        from mesh_tensorflow.transformer import transformer_layers

        from t2tcli.model import attention

        attention.SelfAttention.compute_bias = transformer_layers.SelfAttention.compute_bias
    if os.environ.get(MESH_TF_ADAFACTOR):
        import mesh_tensorflow as mtf

        optimization.ADAFACTOR = mtf.optimize.AdafactorOptimizer

    hp = registry.hparams("t5_small")
    hp.override_from_dict(
        dict(
            activation_dtype=dtype,
            inputs_length=li,
            targets_length=lt,
            batch_size=batch,
            d_model=dims["d_model"],
            d_ff=dims["d_ff"],
            num_heads=dims["num_heads"],
            d_kv=dims["d_kv"],
            dropout_rate=dims["dropout_rate"],
            num_encoder_layers=dims["layers"],
            num_decoder_layers=dims["layers"],
        )
    )
    rng = np.random.default_rng(0)
    feats = {
        "inputs": rng.integers(3, dims["vocab"], size=(batch, li)).astype(np.int32),
        "targets": rng.integers(3, dims["vocab"], size=(batch, lt)).astype(np.int32),
    }

    def input_fn(params=None):
        return tf.data.Dataset.from_tensors(feats).repeat()

    clock = StepClock(warmup=3, steps=steps, budget=budget)

    class Steps(tf.compat.v1.train.SessionRunHook):
        """Times steps by `clock`; with profile_dir, traces one more step after the timed
        ones (TensorFlow's step stats, as a Chrome trace), then stops."""

        def __init__(self) -> None:
            self.tracing = False

        def after_create_session(self, session, coord):
            clock.started = time.perf_counter()

        def before_run(self, run_context):
            if self.tracing:
                print(onednn_calls.BEGIN, flush=True)  # oneDNN flushes each line it logs
                options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                return tf.compat.v1.train.SessionRunArgs(None, options=options)
            return None

        def after_run(self, run_context, run_values):
            if self.tracing:
                from tensorflow.python.client import timeline

                print(onednn_calls.END, flush=True)
                os.makedirs(profile_dir, exist_ok=True)
                trace = timeline.Timeline(run_values.run_metadata.step_stats).generate_chrome_trace_format()
                Path(profile_dir, f"timeline-{len(clock.ends) + 1}.json").write_text(trace)
                run_context.request_stop()
            elif not clock.step_done():
                self.tracing = bool(profile_dir)
                if not self.tracing:
                    run_context.request_stop()

    with tempfile.TemporaryDirectory() as model_dir:
        est = estimator.build_estimator(
            model_dir,
            config.build(hp, dims["vocab"]),
            model_fn.TrainSettings(save_checkpoints_steps=10**9, log_every_steps=10**9),
        )
        est.train(input_fn, max_steps=clock.warmup + steps + 1, hooks=[Steps()])
    return clock.result()


PEER_KINDS = {"eager": "hf", "compile": "hf_compile"}  # --peer_modes: the worker kind of each


def peer_training(dims: dict, dtype: str, batch: int, li: int, lt: int, compiled: bool) -> tuple:
    """(model, optimizer, step) of the peer at its best: `torch.optim.Adafactor`, whose
    loops PyTorch fuses where transformers' Adafactor runs Python per parameter, and the
    dropout of our hparams set, since dropout's masks are a real share of a step."""
    import torch
    from peer import t5_peer

    shape = {k: dims[k] for k in ("d_model", "d_ff", "num_heads", "d_kv")}
    shape.update(num_encoder_layers=dims["layers"], num_decoder_layers=dims["layers"])
    model = t5_peer(shape, dims["vocab"], dropout_rate=dims["dropout_rate"]).train()
    opt = torch.optim.Adafactor(model.parameters())
    forward = torch.compile(model) if compiled else model
    inputs = torch.randint(3, dims["vocab"], (batch, li))
    labels = torch.randint(3, dims["vocab"], (batch, lt))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            loss = forward(input_ids=inputs, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, opt, step


def worker_hf(
    dims: dict, dtype: str, batch: int, li: int, lt: int, steps: int, budget: float, compiled: bool = False
) -> dict:
    _, _, step = peer_training(dims, dtype, batch, li, lt, compiled)
    clock = StepClock(warmup=3, steps=steps, budget=budget)
    step()  # with torch.compile, the compilation: never timed
    while clock.step_done():
        step()
    return clock.result()


def select_configs(default: str, only: str, peer_modes: str) -> list[tuple[str, str, str]]:
    """The rows to run, as (worker kind, dtype, label): --only picks systems (t2t, hf, hf_compile) or
    one dtype of one (t2t:bfloat16); --peer_modes picks eager and/or torch.compile for the peer."""
    modes = [m for m in peer_modes.split(",") if m]
    if not modes or set(modes) - set(PEER_KINDS):
        raise SystemExit(f"--peer_modes={peer_modes}: give eager, compile or both, comma-separated")
    configs = [
        ("t2t", "auto", f"t2tcli default (auto: {default})"),
        ("t2t", "bfloat16", "t2tcli (mesh-tf) bfloat16"),
        ("t2t", "float32", "t2tcli (mesh-tf) float32"),
    ]
    for mode in modes:
        suffix = " torch.compile" if mode == "compile" else " eager"
        configs += [
            (PEER_KINDS[mode], "float32", "HF T5 float32" + suffix),
            (PEER_KINDS[mode], "bfloat16", "HF T5 bf16 autocast" + suffix),
        ]
    if only:
        wanted = only.split(",")
        known = {k for k, _, _ in configs} | {"hf"}
        if bad := [w for w in wanted if w.split(":")[0] not in known]:
            raise SystemExit(f"--only: unknown system {bad[0]} (t2t, hf, hf_compile, or one with :dtype)")
        configs = [
            c
            for c in configs
            if c[0] in wanted or f"{c[0]}:{c[1]}" in wanted or (c[0].startswith("hf") and "hf" in wanted)
        ]
    return configs


def traced_rows(configs: list[tuple[str, str, str]], default: str) -> dict[tuple[str, str], str]:
    """The t2tcli rows --profile traces, each with the dtype it runs: one row a dtype, a
    dtype's own row before `auto`'s, so that `--only=t2t:auto` is traced too."""
    rows: dict[tuple[str, str], str] = {}
    for kind, dtype, _label in sorted(configs, key=lambda config: config[1] == "auto"):
        runs = default if dtype == "auto" else dtype
        if kind == "t2t" and runs not in rows.values():
            rows[(kind, dtype)] = runs
    return rows


def _spawn(*args: str, limit: float | None = None, onednn_log: Path | None = None) -> dict | None:
    """One worker's JSON result; {"timed_out": limit} when it ran past `limit` seconds.
    With `onednn_log`, oneDNN logs its calls and those of the traced step are written there."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if onednn_log:
        env["ONEDNN_VERBOSE"] = "1"
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=env, timeout=limit
        )
    except subprocess.TimeoutExpired:
        print(f"  {' '.join(args)} stopped after {limit:.0f} s (--run_limit)", file=sys.stderr)
        return {"timed_out": limit}
    traced = onednn_calls.traced_step(proc.stdout) if onednn_log else None
    if traced is not None:
        onednn_log.parent.mkdir(parents=True, exist_ok=True)
        onednn_log.write_text("".join(line + "\n" for line in traced))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        print(f"  {' '.join(args)} failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hparams_set", default="t5_small", help="the shape trained (a T5 v1.0 set)")
    parser.add_argument("--vocab", type=int, default=T5_VOCAB, help="vocabulary rows")
    parser.add_argument("--worker", nargs="*")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each configuration, in turns; best kept")
    parser.add_argument(
        "--profile", default="", help="directory for a trace of a t2tcli step of each dtype, and oneDNN's log of it"
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated systems to run: t2t, hf (the peer, every mode), hf_compile, or one dtype of one, "
        "e.g. t2t:bfloat16",
    )
    parser.add_argument(
        "--peer_modes",
        default="eager,compile",
        help="how the peer runs: eager, compile (torch.compile) or both; its fastest row is its best",
    )
    parser.add_argument(
        "--mesh_tf_loss",
        action="store_true",
        help="t2tcli rows train with mesh-tensorflow's element-wise loss instead of the fused one (an A/B)",
    )
    parser.add_argument(
        "--mesh_tf_attention",
        action="store_true",
        help="t2tcli rows keep mesh-tensorflow's [batch, length, heads, d_kv] attention layout (an A/B)",
    )
    parser.add_argument(
        "--mesh_tf_adafactor",
        action="store_true",
        help="t2tcli rows update with mesh-tensorflow's AdafactorOptimizer instead of the few-pass one (an A/B)",
    )
    parser.add_argument(
        "--separate_projections",
        action="store_true",
        help="t2tcli rows run attention's q, k and v projections as one product per kernel (an A/B)",
    )
    parser.add_argument(
        "--per_layer_bias",
        action="store_true",
        help="t2tcli rows build the self-attention bias in every layer, as mesh-tensorflow does (an A/B)",
    )
    parser.add_argument(
        "--mesh_tf_norm",
        action="store_true",
        help="t2tcli rows run mesh-tensorflow's element-wise RMS norms instead of the fused ones (an A/B)",
    )
    parser.add_argument(
        "--mesh_tf_ffn",
        action="store_true",
        help="t2tcli rows run mesh-tensorflow's FFN, its ReLU and dropout as separate ops, instead of the fused "
        "passes (an A/B)",
    )
    parser.add_argument(
        "--einsums_as_written",
        action="store_true",
        help="t2tcli rows give every einsum's operands to TensorFlow in mesh-tensorflow's order, "
        "transposing some results, instead of the order that needs no transpose (an A/B)",
    )
    parser.add_argument(
        "--float32_logits_product",
        action="store_true",
        help="t2tcli rows in bfloat16 cast attention's q and k to float32 for the logits' product instead of "
        "rounding a bfloat16 product once (an A/B)",
    )
    parser.add_argument(
        "--step_budget",
        type=float,
        default=180,
        help="seconds of timed steps after which a row stops timing (at least one step is timed); warm-up "
        "ends after half of it: a row far slower than the others is measured over fewer steps and says how many",
    )
    parser.add_argument(
        "--run_limit",
        type=float,
        default=1200,
        help="seconds one configuration's run may take before it is stopped and reported as unfinished "
        "(the peer's bfloat16 autocast, on a CPU without native bfloat16, can run for many times its float32's)",
    )
    args = parser.parse_args()
    if args.mesh_tf_adafactor:
        os.environ[MESH_TF_ADAFACTOR] = "1"
    if args.mesh_tf_loss:
        os.environ[MESH_TF_LOSS] = "1"
    if args.mesh_tf_attention:
        os.environ[MESH_TF_ATTENTION] = "1"
    if args.separate_projections:
        os.environ[SEPARATE_PROJECTIONS] = "1"
    if args.per_layer_bias:
        os.environ[PER_LAYER_BIAS] = "1"
    if args.mesh_tf_norm:
        os.environ[MESH_TF_NORM] = "1"
    if args.mesh_tf_ffn:
        os.environ[MESH_TF_FFN] = "1"
    if args.einsums_as_written:
        os.environ[EINSUMS_AS_WRITTEN] = "1"
    if args.float32_logits_product:
        os.environ[FLOAT32_LOGITS_PRODUCT] = "1"
    if args.worker:
        kind, dims_json, dtype, *rest = args.worker
        profile = rest.pop() if kind == "t2t" and len(rest) == 6 else ""
        if kind == "peak":
            out = worker_peak(dtype)
        else:
            # batch, lengths, steps, then the step budget (default as --step_budget's)
            sizes, budget = [int(x) for x in rest[:4]], float(rest[4]) if len(rest) > 4 else args.step_budget
            if kind == "t2t":
                out = worker_t2t(json.loads(dims_json), dtype, *sizes, budget, profile_dir=profile)
            else:
                out = worker_hf(json.loads(dims_json), dtype, *sizes, budget, compiled=kind == "hf_compile")
        print(json.dumps(out))
        return
    dims = model_dims(args.hparams_set, args.vocab)
    batch, li, lt, steps = (8, 64, 64, 5) if args.quick else (16, 128, 128, 10)
    sizes = [str(batch), str(li), str(lt), str(steps), str(args.step_budget)]
    tokens = batch * (li + lt)
    flops = model_flops_per_step(dims, batch, li, lt)
    measured = {d: _spawn("peak", "{}", d) or {} for d in ("bfloat16", "float32")}
    peaks = {d: m.get("flops") for d, m in measured.items()}
    print(
        f"Model: {args.hparams_set} {dims}; batch {batch}, inputs/targets length {li}/{lt} "
        f"({tokens} tokens/step), Adafactor (the peer: torch.optim.Adafactor), "
        f"dropout {dims['dropout_rate']} on both sides (the set's)"
    )
    print(f"Model FLOPs per training step: {flops / 1e9:.1f} GFLOP")
    print(
        "Measured matmul peak (TF, 2048^2, best of 5 trials; median): "
        + ", ".join(f"{d} {m['flops'] / 1e12:.3f} TFLOP/s ({m['median'] / 1e12:.3f})" for d, m in measured.items() if m)
    )
    sys.path.insert(0, str(REPO))
    from t2tcli.model import activation_dtype, hardware

    default = activation_dtype.resolve("auto")
    machine = hardware.detect()
    print(
        f"CPU kind: {machine.cpu_kind()}; activation_dtype=auto runs {default}",
        f"({hardware.native_bfloat16(machine)[1]})",
    )
    print()
    print(f"{'system':<34}{'step s':>9}{'tokens/s':>11}{'MFU':>8}   (best of {args.repeats} runs each, in turns)")
    results = {}
    configs = select_configs(default, args.only, args.peer_modes)
    dims_json = json.dumps(dims)
    # Runs in turns, each configuration's best kept: a 2-core VM's speed drifts from one
    # minute to the next by more than the differences between some rows.
    best: dict[tuple[str, str], float] = {}
    timed_steps: dict[tuple[str, str], int] = {}  # of each configuration's best run
    unfinished: set[tuple[str, str]] = set()
    traced = traced_rows(configs, default) if args.profile else {}
    for round_ in range(args.repeats):
        for kind, dtype, _label in in_turn(configs, round_):
            if (kind, dtype) in unfinished:
                continue
            if round_ and best and best.get((kind, dtype), 0.0) > 5 * min(best.values()):
                continue  # far off the others (e.g. bfloat16 autocast without native support): once is enough
            extra, onednn_log = [], None
            if round_ == 0 and (kind, dtype) in traced:
                extra = [str(Path(args.profile).resolve() / traced[(kind, dtype)])]
                onednn_log = Path(extra[0], onednn_calls.LOG_NAME)
                onednn_log.unlink(missing_ok=True)
            res = _spawn(kind, dims_json, dtype, *sizes, *extra, limit=args.run_limit, onednn_log=onednn_log)
            if res and "timed_out" in res:
                unfinished.add((kind, dtype))
            elif res and res["step_time"] < best.get((kind, dtype), float("inf")):
                best[(kind, dtype)], timed_steps[(kind, dtype)] = res["step_time"], res["steps"]
    for kind, dtype, label in configs:
        if (kind, dtype) in unfinished and (kind, dtype) not in best:
            print(f"{label:<34}  unfinished: start-up and its first steps took over --run_limit={args.run_limit:.0f} s")
            continue
        if (kind, dtype) not in best:
            print(f"{label:<34}{'failed':>9}")
            continue
        t = best[(kind, dtype)]
        peak = peaks.get(default if dtype == "auto" else dtype)
        mfu = f"{100 * flops / t / peak:.1f}%" if peak else "n/a"
        results[(kind, dtype)] = tokens / t
        timed = timed_steps[(kind, dtype)]
        note = f"   (over {timed} step{'s' * (timed > 1)}: --step_budget)" if timed < steps else ""
        print(f"{label:<34}{t:>9.3f}{tokens / t:>11.0f}{mfu:>8}{note}")
    ours = max((v for (k, _), v in results.items() if k == "t2t"), default=None)
    peer = max((v for (k, _), v in results.items() if k.startswith("hf")), default=None)
    print()
    if peer:
        label = next(lbl for k, d, lbl in configs if results.get((k, d)) == peer)
        print(f"HF T5 best: {label}, {peer:.0f} tokens/s")
    if ours and peer:
        if ("t2t", "auto") in results:
            print(f"t2tcli default / HF T5 best tokens/s: {results[('t2t', 'auto')] / peer:.2f}x")
        print(f"t2tcli best / HF T5 best tokens/s: {ours / peer:.2f}x")
    elif not args.only:
        print("ratio not available (a side failed; is the `bench` extra installed?)")
    if args.profile and not traced:
        print("\n--profile: no t2tcli row ran, so no step was traced")
    if args.profile:
        for dtype in sorted(set(traced.values())):
            print(f"\nWhere a t2tcli {dtype} step's time goes (op types):")
            traces = sorted((Path(args.profile) / dtype).glob("timeline-*.json"))
            if not traces:
                print("(no trace written)")
                continue
            events = json.loads(traces[-1].read_text())["traceEvents"]
            print("\n".join(step_trace.report(traces[-1], events)))
            log = traces[-1].with_name(onednn_calls.LOG_NAME)
            if log.exists():
                print(f"What oneDNN ran in that step ({log}):")
                print("\n".join(onednn_calls.report(onednn_calls.parse(log.read_text().splitlines()))))


if __name__ == "__main__":
    main()
