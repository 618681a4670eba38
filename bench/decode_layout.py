"""Benchmark: the TensorFlow decode engine with each of its per-CPU kernel choices forced.

    python bench/decode_layout.py                  # t5_small, beam 4 and greedy, 6 rounds
    python bench/decode_layout.py --beams=4 --rounds=3 --lines=64
    python bench/decode_layout.py --variants=attention --beams=4   # a beam step's attention
    python bench/decode_layout.py --variants=packing --beams=1     # kernels laid out once by oneDNN
    python bench/decode_layout.py --variants=log-sum-exp --beams=4 # beam search's log-sum-exp
    python bench/decode_layout.py --variants=packing --activation_dtype=float32  # a float32 model's

t2tcli.model.kernel_layout picks, per CPU, whether the fast engine keeps the layers'
kernels as the checkpoint holds them ([in, out]) or transposed ([out, in]), whether an
FFN width of 2,048 gets 16 zero units, whether a beam step's attention runs on oneDNN
or Eigen, whether oneDNN lays the kernels out once a session, and how beam search takes
a step's log-sum-exp; each choice was measured, and this is the measurement. Each
variant decodes the same random lines
with `t2t-decode --decode_hparams=engine=fast` in a process of its own, the variants in
turns, --rounds times; the median of each is printed with its runs, the process's oneDNN
setting and the CPU kind, and the outputs of all variants are compared (they must be
the same). What a variant does not force follows this CPU's
policy. Set TF_ENABLE_ONEDNN_OPTS=0 to measure Eigen's GEMMs instead of oneDNN's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import decode as bench_decode  # bench/decode.py: the random model and its inputs (and t2tcli on sys.path)
from turns import in_turn

from t2tcli.model.kernel_layout import FFN_PADDING

# Variants: the kernel_layout choices each forces.
VARIANTS = {
    "layouts": {
        "as held": {"transposed_kernels": False, "ffn_padding": 0},
        "as held, FFN padded": {"transposed_kernels": False, "ffn_padding": FFN_PADDING},
        "transposed": {"transposed_kernels": True, "ffn_padding": 0},
        "transposed, FFN padded": {"transposed_kernels": True, "ffn_padding": FFN_PADDING},
    },
    "attention": {
        "beam attention on oneDNN": {"beam_attention_on_onednn": True},
        "beam attention on Eigen": {"beam_attention_on_onednn": False},
    },
    "packing": {
        "kernels laid out at each call": {"packed_kernels": False},
        "kernels laid out once": {"packed_kernels": True},
    },
    "log-sum-exp": {
        "log-sum-exp by exp and sum": {"log_sum_exp_by_softmax": False},
        "log-sum-exp by softmax": {"log_sum_exp_by_softmax": True},
    },
}


def force(forced: dict) -> None:
    """Makes each kernel_layout policy named in `forced` answer its value, whatever it is asked."""
    from t2tcli.model import kernel_layout

    for choice, value in forced.items():
        setattr(kernel_layout, choice, lambda *machine_and_width, value=value, **search: value)


def worker(forced: dict, decode_args: list[str]) -> None:
    """t2t-decode with the choices of `forced` made, whatever this CPU's policy says."""
    from t2tcli.cli.decode import run

    force(forced)
    sys.argv = ["t2t-decode", *decode_args]
    run()


def decode_seconds(model_dir: Path, src: Path, out: Path, beam: int, forced: dict) -> float:
    args = [
        f"--model_dir={model_dir}",
        f"--decode_from_file={src}",
        f"--decode_to_file={out}",
        "--raw_inputs",
        f"--decode_hparams=beam_size={beam},alpha=0.6,batch_size=64,max_decode_length=32,engine=fast",
    ]
    command = [sys.executable, __file__, f"--worker={json.dumps(forced)}", "--", *args]
    proc = subprocess.run(command, capture_output=True, text=True)
    match = bench_decode.SUMMARY.search(proc.stderr)
    if proc.returncode != 0 or not match:
        sys.exit(f"t2t-decode failed:\n{proc.stderr[-2000:]}")
    return bench_decode.decode_seconds(match)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small")
    parser.add_argument("--lines", type=int, default=128, help="random lines of 9 words")
    parser.add_argument("--beams", default="4,1")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--variants", default="layouts", choices=sorted(VARIANTS))
    parser.add_argument(
        "--activation_dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
        help="the model_dir's activation dtype (auto: what this CPU picks)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker:
        worker(json.loads(args.worker), rest[1:] if rest[:1] == ["--"] else rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    from t2tcli.model import hardware, kernel_layout

    machine = hardware.detect()
    print(f"CPU kind: {bench_decode.cpu_kind()}; TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS', '1')}")
    print(
        f"this CPU's policy: transposed_kernels {kernel_layout.transposed_kernels(machine)}, "
        f"ffn_padding {kernel_layout.ffn_padding(machine, 2048)} (at d_ff 2048), "
        f"beam_attention_on_onednn {kernel_layout.beam_attention_on_onednn(machine)}, "
        f"packed_kernels {kernel_layout.packed_kernels(machine, beam_search=False)} (greedy), "
        f"{kernel_layout.packed_kernels(machine, beam_search=True)} (beam search), "
        f"log_sum_exp_by_softmax {kernel_layout.log_sum_exp_by_softmax(machine)}"
    )
    variants = VARIANTS[args.variants]
    beams = [int(b) for b in args.beams.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hparams = f"activation_dtype={args.activation_dtype}" if args.activation_dtype != "auto" else ""
        _, model_dir = bench_decode.build_models(work, args.hparams_set, hparams)
        src = work / "in.txt"
        src.write_text("\n".join(bench_decode.inputs_random(args.lines, 9, 0)) + "\n")
        runs: dict[tuple[int, str], list[float]] = {}
        digests: dict[int, set[str]] = {}
        for turn in range(args.rounds):
            for beam in beams:
                for name, forced in in_turn(variants.items(), turn):
                    out = work / "out.txt"
                    runs.setdefault((beam, name), []).append(decode_seconds(model_dir, src, out, beam, forced))
                    digests.setdefault(beam, set()).add(hashlib.sha256(out.read_bytes()).hexdigest())
    print(
        f"{args.hparams_set}, activation_dtype={args.activation_dtype}, {args.lines} random lines, "
        "batch 64, 32 tokens a line: decode seconds"
    )
    for (beam, name), seconds in runs.items():
        listed = " ".join(f"{s:.2f}" for s in seconds)
        print(f"beam {beam}  {name:24s} median {statistics.median(seconds):6.2f}   runs {listed}")
    for beam, found in digests.items():
        print(f"beam {beam}: {'the same outputs' if len(found) == 1 else 'OUTPUTS DIFFER'} from every variant")


if __name__ == "__main__":
    main()
