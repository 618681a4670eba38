"""Benchmark: does a run in bfloat16 learn as one in float32 does? Short runs, side by side.

    python bench/dtype_losses.py                 # mtf_transformer_small, 4 layers a side, 200 steps, seeds 1-3
    python bench/dtype_losses.py --steps=400 --seeds=1,2,3,4
    python bench/dtype_losses.py --quick         # mtf_transformer_tiny, 60 steps, seeds 1-2 (a smoke run)

bfloat16 keeps 8 bits of mantissa, and t2tcli trains with bfloat16 activations (float32
variables, optimizer and loss) where the CPU runs it fastest. Whether that costs
anything is judged against float32's own noise: runs with another --random_seed
(initial weights, data order, dropout) differ too, so a bfloat16 run is as good as
float32 when its dev loss differs from float32's by no more than float32's seeds
differ from each other. Every run trains translate_en_es on the shipped data through
t2t-train with --schedule=train_and_evaluate, which scores the whole dev split's
teacher-forced loss halfway and at the end. On a CPU without native bfloat16 the
bfloat16 einsums are emulated (float32 products of bfloat16 operands, rounded once, as
oneDNN's bfloat16 kernels accumulate): the numbers are the same kind there, only slower.
"""

from __future__ import annotations

import argparse
import re
import statistics

from binaries import cpu_kind, run, work_dir

DEV_LOSS = re.compile(r"step (\d+)  dev loss ([\d.]+)  perplexity")
DTYPES = ("float32", "bfloat16")


def dev_losses(log: str) -> dict[int, float]:
    """{step: dev loss} from t2t-train's log."""
    return {int(step): float(loss) for step, loss in DEV_LOSS.findall(log)}


def spread(values: list[float]) -> float:
    return max(values) - min(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", help="where the data, models and logs go (default: a new private temp folder)")
    parser.add_argument("--hparams_set", default="mtf_transformer_small")
    small = "inputs_length=32,targets_length=32,batch_size=32,warmup_steps=100"
    parser.add_argument("--hparams", default=small, help="overrides for both dtypes (activation_dtype is set here)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", default="1,2,3", help="--random_seed values, each run in both dtypes")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.hparams_set, args.hparams, args.steps, args.seeds = "mtf_transformer_tiny", "warmup_steps=30", 60, "1,2"
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise SystemExit(f"--seeds={args.seeds}: not a comma-separated list of integers") from None
    if len(set(seeds)) < 2 or args.steps < 2:
        raise SystemExit("--seeds needs two seeds or more (their spread is the yardstick) and --steps at least 2")

    work = work_dir(args.work_dir, "dtype-losses")
    data = work / "data"
    runs = {(dtype, seed): work / f"{dtype}_seed{seed}" for dtype in DTYPES for seed in seeds}
    for model_dir in runs.values():
        if model_dir.exists():
            raise SystemExit(f"{model_dir} exists: remove {work} or pass another --work_dir")
    run("t2t-datagen", "--problem=translate_en_es", f"--data_dir={data}")
    losses: dict[tuple[str, int], dict[int, float]] = {}
    for seed in seeds:  # both dtypes of a seed one after the other, so a slow spell hits both
        for dtype in DTYPES:
            _, log = run(
                "t2t-train",
                "--problem=translate_en_es",
                f"--data_dir={data}",
                f"--model_dir={runs[dtype, seed]}",
                f"--hparams_set={args.hparams_set}",
                f"--hparams={','.join(filter(None, [args.hparams, f'activation_dtype={dtype}']))}",
                f"--train_steps={args.steps}",
                f"--eval_every_steps={args.steps // 2}",
                f"--random_seed={seed}",
                "--schedule=train_and_evaluate",
                f"--log_every_steps={max(1, args.steps // 4)}",
            )
            (work / f"{dtype}_seed{seed}.log").write_text(log)
            losses[dtype, seed] = dev_losses(log)
            if args.steps not in losses[dtype, seed]:
                raise SystemExit(f"no dev loss at step {args.steps} in the log of {runs[dtype, seed]}")

    print()
    print(summary(losses, seeds, f"--hparams_set={args.hparams_set} --hparams={args.hparams}", args.steps))


def summary(losses: dict[tuple[str, int], dict[int, float]], seeds: list[int], setup: str, steps: int) -> str:
    """The runs' dev losses by step, then the verdict at the last step that `bench/report.py` records."""
    evaluated = sorted(set.intersection(*(set(v) for v in losses.values())))
    lines = [
        f"CPU kind: {cpu_kind()}; {setup}; {steps} steps",
        f"dev loss (whole dev split) at step {''.join(f'{s:>9}' for s in evaluated)}",
    ]
    for dtype in DTYPES:
        for seed in seeds:
            by_step = "".join(f"{losses[dtype, seed][s]:>9.4f}" for s in evaluated)
            lines.append(f"{dtype:<9} --random_seed={seed:<12}{by_step}")
    last = evaluated[-1]
    f32 = [losses["float32", s][last] for s in seeds]
    b16 = [losses["bfloat16", s][last] for s in seeds]
    same_seed = [b - f for b, f in zip(b16, f32, strict=True)]
    difference, f32_spread = abs(statistics.mean(b16) - statistics.mean(f32)), spread(f32)
    within = difference <= f32_spread
    lines += [
        "",
        f"at step {last}:",
        f"  mean: float32 {statistics.mean(f32):.4f}, bfloat16 {statistics.mean(b16):.4f}",
        f"  float32's spread over {len(seeds)} seeds (max - min): {f32_spread:.4f}",
        f"  bfloat16 minus float32, seed by seed: {', '.join(f'{d:+.4f}' for d in same_seed)}",
        f"  bfloat16's mean is {'within' if within else 'OUTSIDE'} float32's seed spread"
        f" ({difference:.4f} against {f32_spread:.4f})",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
