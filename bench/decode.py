#!/usr/bin/env python3
"""Decoding throughput: t2t-decode beside Hugging Face T5 `generate`, same model shape.

Both sides run an encoder-decoder of the same dimensions (taken from an hparams set)
on the same input token ids with the same batch size, in one run on one machine.
t2t-decode runs as a user runs it (a subprocess on a text file) on a model trained
for a few steps on copy_sequence, so its outputs have real lengths; the peer is a
weights-free random init, which never emits EOS on purpose, so it is made to do the
same work: its inputs are batched in the same length-sorted order and each batch
decodes exactly as many steps as t2t-decode's loop ran for that batch (as its debug
log reports: the longest output + EOS for greedy; for beam search, until no live
hypothesis can beat a finished one). Compute does not depend on weight values, so
the comparison is like for like.
Decoding rates exclude model start-up on both sides (the peer's model construction is
outside its timer); end-to-end wall times are reported too. Each side reports its best
of --repeats runs, taken in turns.

    python bench/decode.py --hparams_set=mtf_transformer_small --lines=512

Needs the `bench` extra (torch, transformers). Prints a table and the ratio of
sentences/s (t2t / peer) for greedy and beam search; with --mesh_engine, `t2t-decode
(mesh)` rows run the same model through mesh-tensorflow's decode loop (`engine=mesh`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BATCH_STEPS = re.compile(r"batch (\d+): (\d+) rows, (\d+) decode steps")
SUMMARY = re.compile(r"(\d+) lines .*?(\d+) output tokens in ([\d.]+) s \(([\d.]+) s start-up\): ([\d.]+) sentences/s")


def binary(name: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / name), *args], capture_output=True, text=True, input=stdin
    )
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return proc


def toy_model(work: Path, hparams_set: str, hparams: str, train_steps: int) -> Path:
    """A model_dir of `hparams_set` trained briefly on copy_sequence."""
    data_dir, model_dir = work / "data", work / "model"
    binary("t2t-datagen", "--problem=copy_sequence", f"--data_dir={data_dir}")
    binary(
        "t2t-train",
        "--problem=copy_sequence",
        f"--hparams_set={hparams_set}",
        f"--hparams={hparams}",
        f"--data_dir={data_dir}",
        f"--model_dir={model_dir}",
        f"--train_steps={train_steps}",
        f"--save_checkpoints_steps={train_steps}",
    )
    return model_dir


def make_inputs(n: int, max_words: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, max_words))) for _ in range(n)]


def run_t2t(model_dir: Path, src: Path, beam: int, batch: int, length: int, engine: str) -> tuple[dict, list[int]]:
    """t2t-decode's timings, and the steps its decode loop ran for each batch."""
    started = time.monotonic()
    proc = binary(
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={src}",
        "--decode_to_file=-",
        f"--decode_hparams=beam_size={beam},alpha=0.6,batch_size={batch},max_decode_length={length},engine={engine}",
        "--verbosity=1",
    )
    wall = time.monotonic() - started
    match = SUMMARY.search(proc.stderr)
    if not match:
        sys.exit(f"no summary in t2t-decode's log:\n{proc.stderr[-2000:]}")
    lines, tokens, total, startup, _ = match.groups()
    decode_s = float(total) - float(startup)
    stats = {"lines": int(lines), "tokens": int(tokens), "decode_s": decode_s, "wall_s": wall}
    return stats, [int(m.group(3)) for m in BATCH_STEPS.finditer(proc.stderr)]


def rate(result: dict) -> float:
    return result["lines"] / result["decode_s"]


def peer_batches(inputs: list[list[int]], steps: list[int], batch: int) -> list[tuple[list[list[int]], int]]:
    """t2t-decode's batches (inputs sorted longest first), each with its decode steps."""
    order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]), reverse=True)
    chunks = [order[start : start + batch] for start in range(0, len(order), batch)]
    if len(chunks) != len(steps):
        sys.exit(f"t2t-decode reported decode steps for {len(steps)} batches, expected {len(chunks)}")
    return [([inputs[i] for i in chunk], n) for chunk, n in zip(chunks, steps, strict=True)]


def run_peer(hp: dict, vocab_size: int, batches: list[tuple[list[list[int]], int]], beam: int, dtype: str) -> dict:
    import torch
    import transformers  # noqa: F401  (imported before the timer starts, like torch)
    from peer import t5_peer

    started = time.monotonic()
    model = t5_peer(hp, vocab_size, dropout_rate=0.0).eval()
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    built = time.monotonic()
    lines = 0
    with torch.inference_mode():
        for chunk, steps in batches:
            width = max(len(x) for x in chunk)
            ids = torch.tensor([x + [0] * (width - len(x)) for x in chunk])
            model.generate(
                input_ids=ids,
                attention_mask=(ids != 0).long(),
                max_new_tokens=steps,
                min_new_tokens=steps,
                num_beams=beam,
                do_sample=False,
            )
            lines += len(chunk)
    done = time.monotonic()
    return {"lines": lines, "decode_s": done - built, "wall_s": done - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="mtf_transformer_small")
    parser.add_argument("--activation_dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--lines", type=int, default=512)
    parser.add_argument("--max_words", type=int, default=24, help="input lengths are uniform in 1..max_words")
    parser.add_argument("--max_decode_length", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="each system's best of this many runs is reported")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument(
        "--mesh_engine",
        action="store_true",
        help="also time t2t-decode with engine=mesh (mesh-tensorflow's decode loop)",
    )
    parser.add_argument("--train_steps", type=int, default=300, help="training of t2t-decode's model")
    parser.add_argument(
        "--train_hparams", default="batch_size=16", help="extra hparams for that training (decoding ignores batch_size)"
    )
    parser.add_argument("--model_dir", help="decode with this trained model_dir instead of training one")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: tiny model, 128 lines, 200 training steps, 1 repeat"
    )
    args = parser.parse_args()
    if args.quick:
        args.hparams_set, args.lines, args.train_steps, args.repeats = "mtf_transformer_tiny", 128, 200, 1

    from t2tcli.vocab import EOS_ID, Vocabulary

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.model_dir:
            model_dir = Path(args.model_dir)
        else:
            model_dir = toy_model(
                work,
                args.hparams_set,
                f"activation_dtype={args.activation_dtype},{args.train_hparams}",
                args.train_steps,
            )
        hp = json.loads((model_dir / "hparams.json").read_text())
        dtype = hp["activation_dtype"]
        vocab = Vocabulary(str(model_dir / "vocab.model"))
        padded_vocab = -(-vocab.vocab_size // hp["vocab_divisor"]) * hp["vocab_divisor"]
        lines = make_inputs(args.lines, args.max_words, seed=1)
        src = work / "inputs.txt"
        src.write_text("\n".join(lines) + "\n")
        ids = [vocab.encode(x)[: hp["inputs_length"] - 1] + [EOS_ID] for x in lines]
        results = []
        for beam in [int(b) for b in args.beams.split(",")]:
            runs = [run_t2t(model_dir, src, beam, args.batch_size, args.max_decode_length, "auto")]
            batches = peer_batches(ids, runs[0][1], args.batch_size)
            # Timings on a shared machine swing by tens of percent from run to run: each
            # side gets the best of --repeats runs, alternating, so both see the same weather.
            peer_runs = []
            for repeat in range(args.repeats):
                if repeat:
                    runs.append(run_t2t(model_dir, src, beam, args.batch_size, args.max_decode_length, "auto"))
                    if runs[-1][1] != runs[0][1]:
                        sys.exit(f"t2t-decode ran different decode steps in two runs: {runs[0][1]} vs {runs[-1][1]}")
                # The peer's float32 and bfloat16 both run (on CPU, PyTorch's float32 is
                # often the faster one); it gets the best of them.
                for d in ("float32", "bfloat16"):
                    peer_runs.append(dict(run_peer(hp, padded_vocab, batches, beam, d), dtype=d))
            ours = max((r for r, _ in runs), key=rate)
            ours["decode_steps"] = sum(runs[0][1])
            peer = max(peer_runs, key=rate)
            peer["tokens"] = ours["tokens"]  # the same outputs' worth of decoding steps
            peer["decode_steps"] = sum(n for _, n in batches)
            ours["dtype"] = dtype
            for name, r in (("t2t-decode", ours), ("hf-t5-generate", peer)):
                r.update(system=name, beam=beam, sentences_per_s=r["lines"] / r["decode_s"])
                r["tokens_per_s"] = r["tokens"] / r["decode_s"]
                results.append(r)
            results[-2]["ratio_vs_peer"] = ours["sentences_per_s"] / peer["sentences_per_s"]
            if args.mesh_engine:
                mesh, _ = run_t2t(model_dir, src, beam, args.batch_size, args.max_decode_length, "mesh")
                mesh.update(
                    system="t2t-decode (mesh)", beam=beam, dtype=dtype, sentences_per_s=mesh["lines"] / mesh["decode_s"]
                )
                mesh["tokens_per_s"] = mesh["tokens"] / mesh["decode_s"]
                mesh["ratio_vs_peer"] = mesh["sentences_per_s"] / peer["sentences_per_s"]
                results.append(mesh)
    hp_name = f"model_dir {args.model_dir}" if args.model_dir else args.hparams_set
    shape = {k: hp[k] for k in ("d_model", "d_ff", "num_heads", "d_kv", "num_encoder_layers", "num_decoder_layers")}
    print(
        f"{hp_name} {shape} vocab={padded_vocab}, {args.lines} lines, "
        f"batch {args.batch_size}, at most {args.max_decode_length} decode steps, {os.cpu_count()} CPUs"
    )
    print("steps: decode-loop steps summed over batches (the peer runs t2t-decode's count for each batch)")
    header = f"{'system':<20}{'dtype':>9}{'beam':>5}{'steps':>7}{'sent/s':>10}{'tok/s':>10}"
    print(f"{header}{'decode s':>10}{'wall s':>9}{'ratio':>8}")
    for r in results:
        ratio = f"{r['ratio_vs_peer']:.2f}x" if "ratio_vs_peer" in r else ""
        steps = r.get("decode_steps", "")
        print(
            f"{r['system']:<20}{r['dtype']:>9}{r['beam']:>5}{steps:>7}{r['sentences_per_s']:>10.1f}"
            f"{r['tokens_per_s']:>10.1f}{r['decode_s']:>10.2f}{r['wall_s']:>9.1f}{ratio:>8}"
        )
    print()
    for r in results:
        if r["system"] == "t2t-decode":
            search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
            print(f"t2t-decode / HF T5 generate sentences/s, {search}: {r['ratio_vs_peer']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
