#!/usr/bin/env python3
"""What int8 changes in a trained model's outputs: CTranslate2 int8 against float32.

Speed figures (bench/decode.py) use random weights, whose outputs say nothing about
quality. This script trains a small English -> Spanish model on the shipped translation
data (the demo's shape: d_model 128, 2+2 layers, float32; kept under --work, so a second
run reuses it), then decodes the dev split with t2t-decode as a user would: the fast
TensorFlow engine, and engine=ctranslate2 at quantization float32 and int8, greedy and
beam 4. It reports each system's BLEU against the references, the share of lines it
decodes exactly as CTranslate2 float32 and as the TensorFlow engine do, and how far int8
moves the teacher-forced log-likelihood of the references (`--score_file`).

    python bench/int8_agreement.py                    # trains 1,500 steps the first time
    python bench/int8_agreement.py --model_dir=RUN --data_dir=DATA --problem=P  # your model

Needs the `bench` extra (ctranslate2, sacrebleu).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from decode import SUMMARY, binary, cpu_kind

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROBLEM = "translate_en_es"
# examples/demo.sh's model, in float32 so that the float32 rows are the model as trained.
HPARAMS = (
    "d_model=128,d_ff=512,num_heads=4,d_kv=32,inputs_length=96,targets_length=64,batch_size=48,"
    "learning_rate=0.01,warmup_steps=100,activation_dtype=float32"
)
SYSTEMS = (("fast", "float32"), ("ctranslate2", "float32"), ("ctranslate2", "int8"))


def trained_model(work: Path, steps: int) -> Path:
    """The model_dir, trained to `steps` (t2t-train resumes a run cut short and does
    nothing when the steps are done)."""
    data_dir, model_dir = work / "data", work / "model"
    binary("t2t-datagen", f"--problem={PROBLEM}", f"--data_dir={data_dir}")
    binary(
        "t2t-train",
        f"--problem={PROBLEM}",
        "--hparams_set=mtf_transformer_tiny",
        f"--hparams={HPARAMS}",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        f"--train_steps={steps}",
        f"--save_checkpoints_steps={steps}",
        "--log_every_steps=100",
    )
    return model_dir


def dev_pairs(data_dir: Path, problem: str, vocab_file: Path, limit: int) -> list[tuple[str, str]]:
    """(formatted input, reference) of the dev split, read back from its shards."""
    from t2tcli.compat import tf
    from t2tcli.data.layout import data_files
    from t2tcli.data.vocabulary.vocab import Vocabulary

    vocab = Vocabulary(str(vocab_file))
    pairs = []
    for path in data_files(str(data_dir), problem, "dev"):
        for record in tf.compat.v1.io.tf_record_iterator(path):
            feature = tf.train.Example.FromString(record).features.feature
            texts = [vocab.decode(list(feature[key].int64_list.value)) for key in ("inputs", "targets")]
            if all("\t" not in t and "\n" not in t for t in texts):
                pairs.append((texts[0], texts[1]))
    return pairs[:limit] if limit else pairs


def decode(model_dir: Path, src: Path, out: Path, beam: int, engine: str, quantization: str) -> float:
    """Runs t2t-decode; its decode seconds (start-up excluded)."""
    proc = binary(
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={src}",
        f"--decode_to_file={out}",
        "--raw_inputs",
        f"--decode_hparams=beam_size={beam},engine={engine},quantization={quantization}",
    )
    return float(SUMMARY.search(proc.stderr).group(3))


def scores(model_dir: Path, pairs_file: Path, out: Path, quantization: str) -> list[float]:
    binary(
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--score_file={pairs_file}",
        f"--decode_to_file={out}",
        "--raw_inputs",
        f"--decode_hparams=engine=ctranslate2,quantization={quantization}",
    )
    return [float(line) for line in out.read_text().splitlines()]


def int8_sums() -> str:
    """Where CTranslate2's int8 products would saturate on this CPU, the header says so: its
    int8 figures then hold for the 7-bit weights t2t-decode stores there, not for 8-bit ones."""
    from t2tcli.decode import ct2_cpu

    if ct2_cpu.narrow(ct2_cpu.int8_weight_limit("int8")):
        return "; int8 weights in 7 bits (CTranslate2 on oneDNN without VNNI sums pairs of products in 16 bits)"
    use_mkl = os.environ.get(ct2_cpu.MKL_VARIABLE)
    return f"; {ct2_cpu.MKL_VARIABLE}={use_mkl}" if use_mkl else ""


def same(a: list[str], b: list[str]) -> float:
    return 100.0 * sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default=str(REPO / "bench" / "out" / "int8"), help="data, model and outputs")
    parser.add_argument("--train_steps", type=int, default=1500)
    parser.add_argument("--model_dir", help="a trained model_dir instead of training one")
    parser.add_argument("--data_dir", help="its data_dir (default: --work/data)")
    parser.add_argument("--problem", default=PROBLEM, help="whose dev split is decoded")
    parser.add_argument("--lines", type=int, default=0, help="dev lines to decode (0: all)")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--quick", action="store_true", help="smoke run: 60 training steps, 64 lines, greedy")
    args = parser.parse_args()
    if args.quick:
        args.train_steps, args.lines, args.beams = 60, 64, "1"
        args.work = str(Path(args.work) / "quick")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model_dir) if args.model_dir else trained_model(work, args.train_steps)
    data_dir = Path(args.data_dir) if args.data_dir else work / "data"

    import sacrebleu

    from t2tcli.data.vocabulary.vocab import Vocabulary
    from t2tcli.model import checkpoints

    pairs = dev_pairs(data_dir, args.problem, model_dir / "vocab.model", args.lines)
    src, pairs_file = work / "dev.inputs.txt", work / "dev.pairs.tsv"
    src.write_text("".join(f"{x}\n" for x, _ in pairs), encoding="utf-8")
    pairs_file.write_text("".join(f"{x}\t{y}\n" for x, y in pairs), encoding="utf-8")
    references = [y for _, y in pairs]
    step, _ = checkpoints.resolve(str(model_dir), None)
    described = "its own hparams" if args.model_dir else f"mtf_transformer_tiny with {HPARAMS}"
    print(
        f"{args.problem} model_dir {model_dir.name} at step {step} ({described}); "
        f"{len(pairs)} dev lines; {os.cpu_count()} cores, {cpu_kind()} CPU{int8_sums()}"
    )
    header = f"{'search':<8}{'system':<30}{'BLEU':>6}{'same as CT2 f32':>17}{'same as TF':>12}"
    print(header + f"{'BLEU vs CT2 f32':>17}{'sent/s':>8}")
    headlines = []
    for beam in [int(b) for b in args.beams.split(",")]:
        search = "greedy" if beam == 1 else f"beam {beam}"
        outputs, rates = {}, {}
        for engine, quantization in SYSTEMS:
            out = work / f"dev.beam{beam}.{engine}.{quantization}.txt"
            rates[engine, quantization] = decode(model_dir, src, out, beam, engine, quantization)
            outputs[engine, quantization] = out.read_text(encoding="utf-8").splitlines()
        ct2_f32, tf_fast = outputs["ctranslate2", "float32"], outputs["fast", "float32"]
        bleus = {system: sacrebleu.corpus_bleu(lines, [references]).score for system, lines in outputs.items()}
        headlines.append(
            f"int8 agreement, {search}: {same(outputs['ctranslate2', 'int8'], ct2_f32):.1f}% of lines as float32, "
            f"BLEU {bleus['ctranslate2', 'int8']:.2f} (int8) vs {bleus['ctranslate2', 'float32']:.2f} (float32)"
        )
        for system, lines in outputs.items():
            name = "t2t-decode fast (TF) float32" if system[0] == "fast" else f"t2t-decode ctranslate2 {system[1]}"
            vs_f32 = sacrebleu.corpus_bleu(lines, [ct2_f32]).score
            print(
                f"{search:<8}{name:<30}{bleus[system]:>6.2f}{same(lines, ct2_f32):>16.1f}%"
                f"{same(lines, tf_fast):>11.1f}%{vs_f32:>17.2f}{rates[system]:>8.1f}"
            )
    f32 = scores(model_dir, pairs_file, work / "scores.float32.txt", "float32")
    int8 = scores(model_dir, pairs_file, work / "scores.int8.txt", "int8")
    vocab = Vocabulary(str(model_dir / "vocab.model"))
    tokens = [len(vocab.encode(y)) + 1 for y in references]  # + EOS
    per_token = [abs(a - b) / n for a, b, n in zip(f32, int8, tokens, strict=True)]
    print()
    print(
        "references' teacher-forced log-likelihood per token: "
        f"float32 {sum(f32) / sum(tokens):.4f}, int8 {sum(int8) / sum(tokens):.4f}; "
        f"|int8 - float32| per token: mean {statistics.fmean(per_token):.4f}, "
        f"median {statistics.median(per_token):.4f}, max {max(per_token):.4f}"
    )
    print("\n".join(headlines))


if __name__ == "__main__":
    main()
