"""Benchmark: does span-corruption pretraining on unlabeled text help a later fine-tune?

    python bench/pretrain.py                     # mtf_transformer_small (3 layers a side), 2,000 + 600 steps
    python bench/pretrain.py --pretrain_steps=4000 --finetune_steps=1000
    python bench/pretrain.py --quick             # mtf_transformer_tiny, 300 + 100 steps (a smoke run)

The recipe T5 follows, at a size a CPU trains in minutes: pretrain a model with span
corruption on the verses of the shipped translation data (`verses_span_corruption`: its
English and Spanish text, the train split only), then fine-tune it on `translate_en_es`
generated with the pretrained vocabulary. Beside it the same model, same vocabulary and
same data is trained from scratch for the same fine-tuning steps. Both are scored by
t2t-eval on translate_en_es's dev split (verses the pretraining never read): BLEU of the
greedy decode, and the teacher-forced loss. Every step runs through the binaries, as a
user would; the commands are printed as they run.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from binaries import cpu_kind, run, work_dir


def last_eval(model_dir: Path, problem: str) -> dict:
    """The newest checkpoint's metrics of `problem`, from eval_dev/metrics.jsonl."""
    records = [json.loads(line) for line in (model_dir / "eval_dev" / "metrics.jsonl").read_text().splitlines()]
    mine = [r for r in records if r["problem"] == problem]
    return max(mine, key=lambda r: r["step"])["metrics"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", help="where the data, models and logs go (default: a new private temp folder)")
    parser.add_argument("--hparams_set", default="mtf_transformer_small")
    small = (
        "inputs_length=64,targets_length=64,batch_size=32,warmup_steps=500,num_encoder_layers=3,num_decoder_layers=3"
    )
    parser.add_argument("--hparams", default=small)
    parser.add_argument("--pretrain_steps", type=int, default=2000)
    parser.add_argument("--finetune_steps", type=int, default=600)
    parser.add_argument("--eval_examples", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.hparams_set, args.hparams = "mtf_transformer_tiny", ""
        args.pretrain_steps, args.finetune_steps, args.eval_examples = 300, 100, 50

    work = work_dir(args.work_dir, "pretrain")
    pre_data, ft_data = work / "data_pretrain", work / "data_finetune"
    models = {name: work / name for name in ("pretrained", "finetuned", "scratch")}
    hp = [f"--hparams_set={args.hparams_set}", *([f"--hparams={args.hparams}"] if args.hparams else [])]
    seconds = {}
    run("t2t-datagen", "--problem=verses_span_corruption", f"--data_dir={pre_data}")
    vocab = pre_data / "vocab.verses.model"
    run("t2t-datagen", "--problem=translate_en_es", f"--data_dir={ft_data}", f"--vocab_from={vocab}")
    for model in models.values():
        if model.exists():
            raise SystemExit(f"{model} exists: remove {work} or pass another --work_dir")
    seconds["pretrain"], _ = run(
        "t2t-train",
        "--problem=verses_span_corruption",
        f"--data_dir={pre_data}",
        f"--model_dir={models['pretrained']}",
        f"--train_steps={args.pretrain_steps}",
        "--random_seed=1",
        *hp,
    )
    run("t2t-eval", f"--model_dir={models['pretrained']}", f"--max_examples={args.eval_examples}")
    for name, init in (("finetuned", [f"--init_checkpoint={models['pretrained']}"]), ("scratch", [])):
        seconds[name], _ = run(
            "t2t-train",
            "--problem=translate_en_es",
            f"--data_dir={ft_data}",
            f"--model_dir={models[name]}",
            f"--train_steps={args.finetune_steps}",
            "--random_seed=1",
            *init,
            *hp,
        )
        run("t2t-eval", f"--model_dir={models[name]}", f"--max_examples={args.eval_examples}")

    pre = last_eval(models["pretrained"], "verses_span_corruption")
    rows = {name: last_eval(models[name], "translate_en_es") for name in ("finetuned", "scratch")}
    print()
    print(f"CPU: {cpu_kind()}, {os.cpu_count()} cores; {' '.join(hp)}")
    print(
        f"pretraining: {args.pretrain_steps} steps in {seconds['pretrain']:.0f} s; dev span corruption "
        f"token_accuracy {pre['token_accuracy']:.1f}, loss {pre['loss']:.3f}"
    )
    print(f"\n| translate_en_es, {args.finetune_steps} steps | dev BLEU | dev loss | train seconds |")
    print("|---|---|---|---|")
    for name, label in (("finetuned", "pretrained, then fine-tuned"), ("scratch", "from scratch")):
        m = rows[name]
        print(f"| {label} | {m['bleu']:.2f} | {m['loss']:.3f} | {seconds[name]:.0f} |")


if __name__ == "__main__":
    main()
