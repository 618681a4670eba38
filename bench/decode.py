#!/usr/bin/env python3
"""Decoding throughput at T5's real shapes: t2t-decode beside HF generate and CTranslate2.

One random T5 of an hparams set's shape (t5_small by default: d_model 512, 6+6 layers,
8 heads, d_ff 2048, relu, embedding shared with the softmax, vocabulary 32,128 rows) is
written as a Hugging Face directory; every system decodes the same weights:

* t2t-decode, engine=fast (TensorFlow) and engine=ctranslate2 (float32 and int8), on a
  model_dir made from that directory by `t2t-train --init_checkpoint=DIR --train_steps=0`,
  run as a user runs it (a subprocess on a text file; its own sentences/s, start-up out);
* Hugging Face `generate` (float32, PyTorch) on the directory itself;
* bare CTranslate2 (float32, int8) on `ct2-transformers-converter`'s conversion of it, in
  both of its thread layouts: a batch to each core with batches in parallel (its throughput
  layout: inter_threads), and one batch at a time on all cores (intra_threads); the ratio
  lines take the faster;
* OpenVINO through optimum-intel's `OVModelForSeq2SeqLM` on its own export of it: OpenVINO's
  default precision (bfloat16 where the CPU has it), float32, and int8-compressed weights.
  Its pins clash with ours, so it runs in a venv of its own that the benchmark builds with
  pip on first use (--openvino_venv; bench/openvino_peer.py); where that fails, one line
  says why and the OpenVINO rows are left out (--openvino=off leaves them out outright).

All decode the same lines in the same batches (sorted by length, as t2t-decode sorts)
with the same search settings: each line runs until it ends, at most --max_decode_length
tokens, as users decode. A random model almost never ends a line, so every system runs
that many steps a batch; the steps column shows it, and a system that ran fewer is marked
NOT COMPARABLE. No peer is held to the full length: a minimum length slows OpenVINO's
beam search through `generate`, and spares CTranslate2 the end-of-line checks t2t-decode
makes. Two inputs: --lines lines of --words random words
(the fixed-shape case), and the shipped translation data's English sentences (mixed
lengths, where sorting batches by length counts). The systems run in turns, --repeats
times, in reverse order every other turn (bench/turns.py); each figure is a system's
median run, printed with the range of its runs, and the machine's CPU kind is printed
with them.

With --model_dir, a trained model is decoded instead, where lines end early and a system
that drops finished lines from its batches gains by it; the peers decode that model_dir's
Hugging Face export (`t2t-export --export_format=hf`).

    python bench/decode.py                       # t5_small, greedy and beam 4
    python bench/decode.py --hparams_set=t5_base --lines=128
    python bench/decode.py --data=random --beams=4 --repeats=6 \
        --systems "t2t-decode ctranslate2 int8" "CTranslate2 int8"   # two systems alone, in turns
    # a trained model_dir (a fine-tuned T5, say), each line decoded until it ends:
    python bench/decode.py --model_dir=runs/my_t5 --max_decode_length=64 --data=translation
    # an AVX2-class CPU's code paths, on a CPU with AVX-512 (every system is held back):
    ONEDNN_MAX_CPU_ISA=AVX2 CT2_FORCE_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python bench/decode.py

Needs the `bench` extra (torch, transformers, ctranslate2).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))

import openvino_peer  # noqa: E402
from peer import usable_cores  # noqa: E402
from train import T5_VOCAB  # noqa: E402  # the vocabulary bench/train.py trains with
from turns import in_turn  # noqa: E402

# How the ratio lines name the row engine=auto chose, for bench/report.py to read.
DEFAULT_IS = "t2t-decode default is"
# The row of each engine engine=auto may choose on one CPU.
ENGINE_ROWS = {"ctranslate2": "t2t-decode ctranslate2 float32", "fast": "t2t-decode fast (TF)"}
# t2t-decode's summary: lines, output tokens, and lines a second once the first batch was
# read (to three or more digits, where its seconds are printed to one decimal).
SUMMARY = re.compile(r"(\d+) lines .*?(\d+) output tokens in [\d.]+ s \([\d.]+ s start-up\): ([\d.]+) sentences/s")


def decode_seconds(summary: re.Match) -> float:
    """t2t-decode's decoding time, start-up left out, from its SUMMARY line."""
    lines, rate = int(summary.group(1)), float(summary.group(3))
    return lines / rate if rate > 0 else 0.0


STEPS = re.compile(r"(\d+) batch(?:es)?, (\d+) decode steps")
ENGINE_TIME = re.compile(r"([\d.]+) s of the ([\d.]+) s waiting on the engine")
# What holds this CPU's vector units back for every system measured (set them all to
# measure an AVX2-class CPU on a newer one).
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "CT2_FORCE_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
SHAPE = ("d_model", "d_ff", "num_heads", "d_kv", "num_encoder_layers", "ffn_activation")


def binary(name: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(REPO / "bin" / name), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return proc


def cpu_kind() -> str:
    """The CPU kind and the ISA_CAPS set; not CTranslate2's instruction set where it is the
    one t2t-decode sets here itself (run_ct2 sets it in this process too)."""
    from t2tcli.decode import ct2_cpu
    from t2tcli.model import hardware

    machine = hardware.detect()
    own = {ct2_cpu.ISA_VARIABLE: ct2_cpu.fastest_isa(machine)}
    caps = [f"{name}={value}" for name in ISA_CAPS if (value := os.environ.get(name)) and value != own.get(name)]
    return machine.cpu_kind() + (f" held back by {', '.join(caps)}" if caps else "")


def build_models(work: Path, hparams_set: str, hparams: str = "") -> tuple[Path, Path]:
    """(HF directory, t2tcli model_dir) of one random T5 with the set's shape; `hparams`
    (t2t-train's --hparams) is kept in the model_dir, so its decodes follow it."""
    import random_hf_t5

    from t2tcli import registry

    hp = registry.hparams(hparams_set)
    hf_dir, model_dir = work / "hf", work / "model"
    random_hf_t5.build(
        str(hf_dir),
        "v1_0" if hp.ffn_activation == "relu" else "v1_1",
        pieces=2000,
        d_model=hp.d_model,
        layers=hp.num_encoder_layers,
        seed=0,
        d_ff=hp.d_ff,
        num_heads=hp.num_heads,
        d_kv=hp.d_kv,
        vocab_size=T5_VOCAB,
    )
    extra = [f"--hparams={hparams}"] if hparams else []
    binary("t2t-train", f"--init_checkpoint={hf_dir}", f"--model_dir={model_dir}", "--train_steps=0", *extra)
    return hf_dir, model_dir


def export_model(model_dir: Path, work: Path) -> Path:
    """The HF directory of a trained model_dir."""
    hf_dir = work / "hf"
    binary("t2t-export", f"--model_dir={model_dir}", "--export_format=hf", f"--export_dir={hf_dir}")
    return hf_dir


def convert_peer(hf_dir: Path, work: Path, quantization: str) -> Path:
    """CTranslate2's own conversion of the directory, as its users make it (tokenizer
    files included: the converted model names its rows by the tokenizer's pieces)."""
    out = work / f"ct2_{quantization}"
    converter = Path(sys.executable).parent / "ct2-transformers-converter"
    subprocess.run(
        [str(converter), "--model", str(hf_dir), "--output_dir", str(out), "--quantization", quantization],
        check=True,
        capture_output=True,
    )
    return out


def token_names(ct2_dir: Path, batches: list[list[list[int]]]) -> list[str]:
    """The converted model's name of each row. Ids go into CTranslate2 as these names, so
    each id used must have a name of its own (the converter names rows past the
    tokenizer's pieces after sentinels again)."""
    names = json.loads((ct2_dir / "shared_vocabulary.json").read_text())
    first = {}
    for i, name in enumerate(names):
        first.setdefault(name, i)
    clash = sorted({i for chunk in batches for row in chunk for i in row if first[names[i]] != i})
    if clash:
        sys.exit(f"{ct2_dir}: ids {clash[:5]} share their token name with another row; CTranslate2 cannot take them")
    return names


def inputs_random(n: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    with open(REPO / "problems" / "data" / "quora" / "train.csv", encoding="utf-8", newline="") as f:
        vocabulary = sorted({w for row in csv.DictReader(f) for w in row["question1"].lower().split() if w.isalpha()})
    return [" ".join(rng.choice(vocabulary) for _ in range(words)) for _ in range(n)]


def inputs_translation(n: int) -> list[str]:
    with open(REPO / "problems" / "data" / "translate_en_es.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return ["translate English to Spanish: " + r["english"] for r in rows[:n]]


def batches_of(ids: list[list[int]], batch: int) -> list[list[list[int]]]:
    """Batches as t2t-decode makes them: sorted by length, longest first."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
    return [[ids[i] for i in order[start : start + batch]] for start in range(0, len(order), batch)]


def run_t2t(model_dir: Path, src: Path, beam: int, batch: int, length: int, engine: str, quantization: str) -> dict:
    started = time.monotonic()
    proc = binary(
        "t2t-decode",
        f"--model_dir={model_dir}",
        f"--decode_from_file={src}",
        "--decode_to_file=-",
        "--raw_inputs",
        f"--decode_hparams=beam_size={beam},alpha=0.6,batch_size={batch},max_decode_length={length},"
        f"engine={engine},quantization={quantization}",
    )
    wall = time.monotonic() - started
    match = SUMMARY.search(proc.stderr)
    if not match:
        sys.exit(f"no summary in t2t-decode's log:\n{proc.stderr[-2000:]}")
    lines, tokens = int(match.group(1)), int(match.group(2))
    result = {"lines": lines, "tokens": tokens, "decode_s": decode_seconds(match), "wall_s": wall}
    steps = STEPS.search(proc.stderr)
    if steps:  # how many steps its searches took
        result["steps_per_batch"] = int(steps.group(2)) / int(steps.group(1))
    engine_time = ENGINE_TIME.search(proc.stderr)
    if engine_time:  # the share of its decode time t2t-decode spent around CTranslate2
        result["own_share"] = 1 - float(engine_time.group(1)) / float(engine_time.group(2))
    return result


def run_hf(hf_dir: Path, batches: list[list[list[int]]], beam: int, length: int) -> dict:
    """HF generate, each line until it ends (at most `length` tokens)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from t2tcli.data.vocabulary.vocab import EOS_ID

    torch.set_num_threads(usable_cores())
    model = AutoModelForSeq2SeqLM.from_pretrained(str(hf_dir)).eval()
    started = time.monotonic()
    lines = tokens = steps = 0
    with torch.inference_mode():
        for chunk in batches:
            width = max(len(x) for x in chunk)
            ids = torch.tensor([x + [0] * (width - len(x)) for x in chunk])
            out = model.generate(
                input_ids=ids,
                attention_mask=(ids != 0).long(),
                max_new_tokens=length,
                num_beams=beam,
                do_sample=False,
            )[:, 1:]  # the decoder's start token
            lines += len(chunk)
            # The tokens a line says: padding (after its end) and EOS left out.
            tokens += int((out > EOS_ID).sum())
            steps += out.shape[1]
    return {
        "lines": lines,
        "tokens": tokens,
        "decode_s": time.monotonic() - started,
        "steps_per_batch": steps / len(batches),
    }


def run_ct2(
    ct2_dir: Path,
    batches: list[list[list[int]]],
    beam: int,
    length: int,
    compute_type: str,
    parallel: bool,
) -> dict:
    """Bare CTranslate2, each line until it ends as t2t-decode asks it; `parallel`: a batch
    to each core, all batches queued at once (else one batch at a time on all cores)."""
    import ctranslate2

    from t2tcli.data.vocabulary.vocab import EOS_ID, PAD_ID
    from t2tcli.decode import ct2_cpu

    cores = usable_cores()
    ct2_cpu.use_fastest_isa()  # the instruction set t2t-decode's CTranslate2 engine runs on here
    translator = ctranslate2.Translator(
        str(ct2_dir),
        device="cpu",
        compute_type=compute_type,
        inter_threads=cores if parallel else 1,
        intra_threads=1 if parallel else cores,
    )
    names = token_names(ct2_dir, batches)
    unsaid = {names[PAD_ID], names[EOS_ID]}  # as run_hf counts
    started = time.monotonic()
    submitted = [
        translator.translate_batch(
            [[names[i] for i in row] for row in chunk],
            beam_size=beam,
            max_decoding_length=length,
            max_input_length=0,
            return_end_token=True,  # so a hypothesis's length is the steps it ran
            asynchronous=parallel,
        )
        for chunk in batches
    ]
    lines = tokens = steps = 0
    for results in submitted:
        lines += len(results)
        done = [r.result() for r in results] if parallel else results
        tokens += sum(token not in unsaid for r in done for token in r.hypotheses[0])
        steps += max(len(r.hypotheses[0]) for r in done)
    return {
        "lines": lines,
        "tokens": tokens,
        "decode_s": time.monotonic() - started,
        "steps_per_batch": steps / len(batches),
    }


SYSTEMS = (
    "t2t-decode fast (TF)",
    "t2t-decode ctranslate2 float32",
    "t2t-decode ctranslate2 int8",
    "HF generate float32",
    "CTranslate2 float32",
    "CTranslate2 int8",
    "CTranslate2 float32, a batch at a time",
    "CTranslate2 int8, a batch at a time",
)
OPENVINO_SYSTEMS = ("OpenVINO default", "OpenVINO float32", "OpenVINO int8")
# Every name --systems may ask for, in the order the table prints them.
ALL_SYSTEMS = SYSTEMS + OPENVINO_SYSTEMS
# The rows a peer's "best" in the ratio lines is the fastest of (its int8 is compared with ours).
BEST_OF = {
    "OpenVINO best": ("OpenVINO default", "OpenVINO float32"),
    "CTranslate2 float32 best": ("CTranslate2 float32", "CTranslate2 float32, a batch at a time"),
    "CTranslate2 int8 best": ("CTranslate2 int8", "CTranslate2 int8, a batch at a time"),
}


def openvino_paths(venv: Path, hf_dir: Path, work: Path) -> tuple[dict, str]:
    """({"ov_float": IR dir, "ov_int8": IR dir}, '') with the peer's venv ready, else ({}, why not)."""
    if error := openvino_peer.ensure_venv(venv):
        return {}, error
    paths = {}
    for weights in ("float", "int8"):
        out = openvino_peer.export(venv, hf_dir, work / f"ov_{weights}", weights)
        if "error" in out:
            return {}, f"export of {weights} weights failed: {out['error']}"
        paths[f"ov_{weights}"] = work / f"ov_{weights}"
    return paths, ""


def measure(name: str, beam: int, src: Path, batches: list, paths: dict, args: argparse.Namespace) -> dict:
    """One run of one system (t2t-decode reads `src` as text; the peers get `batches` of ids)."""
    length = args.max_decode_length
    if name.startswith("t2t-decode"):
        engine = "fast" if "fast" in name else "ctranslate2"
        quantization = "int8" if name.endswith("int8") else "float32"
        return run_t2t(paths["model_dir"], src, beam, args.batch_size, length, engine, quantization)
    if name.startswith("OpenVINO"):
        from t2tcli.data.vocabulary.vocab import EOS_ID

        ir_dir = paths["ov_int8"] if name.endswith("int8") else paths["ov_float"]
        precision = "float32" if name.endswith("float32") else "default"
        return openvino_peer.decode(paths["ov_venv"], ir_dir, batches, beam, length, precision, EOS_ID, paths["work"])
    if name.startswith("HF"):
        return run_hf(paths["hf_dir"], batches, beam, length)
    quantization = name.split(",")[0].split()[-1]
    return run_ct2(paths[quantization], batches, beam, length, quantization, parallel="," not in name)


def rate(result: dict) -> float:
    return result["lines"] / result["decode_s"]


def median_run(runs: list[dict]) -> dict:
    """The run of median speed (the slower middle one of an even count). A median rather
    than a best: a VM's speed drifts within minutes, and the best of a few runs ranks
    systems by which one met a fast minute."""
    ranked = sorted(runs, key=rate)
    return ranked[(len(ranked) - 1) // 2]


def ratios(results: list[dict]) -> list[str]:
    """The targets: the default CPU path against CTranslate2 float32, TensorFlow's fast
    engine against HF generate, t2t-decode's CTranslate2 int8 against CTranslate2's own,
    each peer in its faster layout (BEST_OF); a line for each pair whose two sides ran."""

    def best(by: dict[str, float], peer: str) -> float | None:
        return max((by[name] for name in BEST_OF[peer] if name in by), default=None)

    out = []
    for data in dict.fromkeys(r["data"] for r in results):
        for beam in dict.fromkeys(r["beam"] for r in results):
            by = {r["system"]: rate(r) for r in results if r["data"] == data and r["beam"] == beam}
            search = "greedy" if beam == 1 else f"beam {beam}"
            # What engine=auto chose on this machine for this search.
            default_system = next(r["default_system"] for r in results if r["data"] == data and r["beam"] == beam)
            default = by.get(default_system)
            int8 = by.get("t2t-decode ctranslate2 int8")
            pairs = (
                ("t2t-decode default / CTranslate2 float32 best", default, best(by, "CTranslate2 float32 best")),
                ("t2t-decode fast (TF) / HF generate", by.get("t2t-decode fast (TF)"), by.get("HF generate float32")),
                ("t2t-decode ctranslate2 int8 / CTranslate2 int8 best", int8, best(by, "CTranslate2 int8 best")),
                ("t2t-decode default / OpenVINO best", default, best(by, "OpenVINO best")),
                ("t2t-decode ctranslate2 int8 / OpenVINO int8", int8, by.get("OpenVINO int8")),
            )
            if default is not None:
                out.append(f"{data}, {search}: {DEFAULT_IS} {default_system}")
            out += [
                f"{data}, {search}: {label}: {ours / peer:.2f}x"
                for label, ours, peer in pairs
                if ours is not None and peer is not None
            ]
            # Drift-free: t2t-decode's own work, timed within each run.
            own = [
                share
                for r in results
                if r["data"] == data and r["beam"] == beam and r["system"] == "t2t-decode ctranslate2 int8"
                for share in r["own_shares"]
            ]
            if own:
                out.append(
                    f"{data}, {search}: t2t-decode ctranslate2 int8, its own share of its decode time: "
                    f"{min(own):.1%}-{max(own):.1%}"
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams_set", default="t5_small", help="the random model's shape")
    parser.add_argument(
        "--model_dir", help="decode this trained model_dir instead of a random model, each line until it ends"
    )
    parser.add_argument("--data", default="random,translation", help="inputs: random words, translation sentences")
    parser.add_argument("--lines", type=int, default=256, help="random lines (and translation sentences)")
    parser.add_argument("--words", type=int, default=9, help="words per random line (about 24 tokens)")
    parser.add_argument("--max_decode_length", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--repeats", type=int, default=3, help="each system's median of this many runs, in turns")
    parser.add_argument(
        "--systems",
        nargs="+",
        metavar="NAME",
        help="run only these systems, each name as the table prints it (an A/B of two in turns); default: all",
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--quick", action="store_true", help="smoke run: 64 lines, greedy, 1 repeat")
    parser.add_argument(
        "--openvino",
        choices=("auto", "off"),
        default="auto",
        help="auto: OpenVINO rows, building their venv on first use (a one-line note where it cannot); off: none",
    )
    parser.add_argument(
        "--openvino_venv",
        default=str(REPO / "bench" / "out" / "venv-openvino"),
        help="the OpenVINO peer's own virtual environment (built here with pip if missing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.lines, args.beams, args.repeats = 64, "1", 1

    if args.systems and (unknown := set(args.systems) - set(ALL_SYSTEMS)):
        sys.exit(f"--systems: unknown {', '.join(sorted(unknown))} (known: {'; '.join(ALL_SYSTEMS)})")

    from t2tcli.data.vocabulary.vocab import Vocabulary
    from t2tcli.decode import batching, settings
    from t2tcli.model import loading, weight_names

    data_sets = args.data.split(",")
    if unknown := set(data_sets) - {"random", "translation"}:
        sys.exit(f"--data: unknown {', '.join(sorted(unknown))} (random, translation)")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.model_dir:
            model_dir = Path(args.model_dir)
            hf_dir = export_model(model_dir, work)
        else:
            hf_dir, model_dir = build_models(work, args.hparams_set)
        paths = {
            "hf_dir": hf_dir,
            "model_dir": model_dir,
            **{q: convert_peer(hf_dir, work, q) for q in ("float32", "int8")},
            "work": work,
            "ov_venv": Path(args.openvino_venv).resolve(),
        }
        wanted = set(args.systems or ALL_SYSTEMS)
        systems = [name for name in SYSTEMS if name in wanted]
        openvino_note = "OpenVINO rows left out: --openvino=off"
        wanted_openvino = [name for name in OPENVINO_SYSTEMS if name in wanted]
        if args.openvino == "auto" and not wanted_openvino:
            openvino_note = "OpenVINO rows left out: --systems"
        elif args.openvino == "auto":
            found, why = openvino_paths(paths["ov_venv"], hf_dir, work)
            paths.update(found)
            if found:
                systems += wanted_openvino
                openvino_note = ""
            else:
                openvino_note = f"OpenVINO rows left out: {why}"
                print(openvino_note, file=sys.stderr)
        vocab = Vocabulary(str(model_dir / "vocab.model"))
        loaded = loading.load(str(model_dir))
        shape = {k: loaded.hparams.get(k) for k in SHAPE}
        rows = weight_names.padded_vocab_size(vocab.vocab_size, loaded.hparams.vocab_divisor)
        inputs = {
            "random": (f"{args.words} random words", lambda: inputs_random(args.lines, args.words, seed=1)),
            "translation": ("translation sentences", lambda: inputs_translation(args.lines)),
        }
        for data, make_lines in (inputs[name] for name in data_sets):
            lines = make_lines()
            src = work / "inputs.txt"
            src.write_text("\n".join(lines) + "\n")
            # Cut as t2t-decode cuts them, to the model's inputs_length (EOS kept).
            ids = [batching.fit(vocab.encode(x), loaded.hparams.inputs_length)[0] for x in lines]
            batches = batches_of(ids, args.batch_size)
            mean_tokens = sum(map(len, ids)) / len(ids)
            for beam in [int(b) for b in args.beams.split(",")]:
                chosen, _ = settings.choose(loaded, {"engine": "auto", "beam_size": beam, "alpha": 0.6})
                default_system = ENGINE_ROWS[chosen]
                runs: dict[str, list[dict]] = {name: [] for name in systems}
                for turn in range(args.repeats):  # in turns, so every system sees the same weather
                    for name in in_turn(systems, turn):
                        if name not in systems:  # left out after a failed run
                            continue
                        result = measure(name, beam, src, batches, paths, args)
                        if "error" in result:  # only the OpenVINO peer's subprocess answers so
                            openvino_note = f"OpenVINO rows left out: {name} failed: {result['error']}"
                            print(openvino_note, file=sys.stderr)
                            systems = [s for s in systems if s not in OPENVINO_SYSTEMS]
                            continue
                        runs[name].append(result)
                for name, measured in runs.items():
                    if name not in systems:
                        continue
                    results.append(
                        dict(
                            median_run(measured),
                            rates=[rate(r) for r in measured],
                            own_shares=[r["own_share"] for r in measured if "own_share" in r],
                            system=name,
                            beam=beam,
                            data=data,
                            mean_input_tokens=mean_tokens,
                            default_system=default_system,
                        )
                    )
    model = f"{args.model_dir} (trained)" if args.model_dir else f"{args.hparams_set} (random)"
    lengths = (
        f"each line until it ends, at most {args.max_decode_length} output tokens"
        if args.model_dir
        else f"{args.max_decode_length} output tokens a line"
    )
    print(
        f"{model} {shape} vocabulary {rows} rows, batch {args.batch_size}, {lengths}, "
        f"{usable_cores()} cores, {cpu_kind()} CPU"
    )
    print(
        f"{'data':<24}{'tokens in':>10}  {'search':<8}{'system':<40}{'sent/s':>9}{'range':>12}{'tok/s':>9}"
        f"{'decode s':>10}{'steps':>7}"
    )
    for r in results:
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        steps = f"{r['steps_per_batch']:>7.1f}" if "steps_per_batch" in r else f"{'-':>7}"
        spread = f"{min(r['rates']):.1f}-{max(r['rates']):.1f}"
        print(
            f"{r['data']:<24}{r['mean_input_tokens']:>10.1f}  {search:<8}{r['system']:<40}{rate(r):>9.1f}"
            f"{spread:>12}"
            f"{r['tokens'] / r['decode_s']:>9.0f}{r['decode_s']:>10.2f}{steps}"
        )
    print(f"sent/s: the median of {args.repeats} runs in turns; range: the slowest and fastest of them.")
    chosen_precision = {r["precision"] for r in results if r["system"] == "OpenVINO default"}
    if chosen_precision:
        print(f"OpenVINO default: the inference precision OpenVINO picked on this CPU, {', '.join(chosen_precision)}.")
    if openvino_note:
        print(openvino_note)
    print("tok/s counts the tokens written, EOS and padding left out (a random model's output is mostly padding).")
    print("steps: decode steps a batch took, on average (CTranslate2's: its longest line's, EOS counted).")
    if not args.model_dir:
        short = sorted(
            {r["system"] for r in results if r.get("steps_per_batch", args.max_decode_length) < args.max_decode_length}
        )
        if short:
            print(f"NOT COMPARABLE: {', '.join(short)} ran fewer than {args.max_decode_length} steps a batch")
    print()
    print("\n".join(ratios(results)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
