"""The benchmarks' results, kept per CPU kind, and BENCHMARKS.md rendered from them.

    python bench/report.py record --log_dir=bench/out --command="bench/run" [--machine="..."]
    python bench/report.py render                    # bench/results/*.json -> BENCHMARKS.md

A figure holds for the kind of CPU it was measured on (AVX2-only, AVX512-BF16, AMX run
different kernels and dtypes), so each kind keeps its own file, bench/results/<kind>.json,
and a run replaces only the benchmarks it ran on its own kind. `bench/run` calls both
steps; the renderer reads nothing but those files, so BENCHMARKS.md always says which
kind, machine, date and command each figure comes from.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as metadata
import json
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path

import decode

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
VERSIONED = ["tensorflow", "mesh-tensorflow", "sentencepiece", "pandas", "torch", "transformers", "ctranslate2"]

# What each benchmark compares, in one line; the order is BENCHMARKS.md's.
METHODS = {
    "datagen": "rows/s of `t2t-datagen qp_is_duplicate` on a 400k-row CSV against a pandas `iterrows` loop "
    "writing one `tf.train.Example` a row (`bench/datagen.py`); wall clock, fresh processes.",
    "datagen_beam": "rows/s of the same generation on Beam's DirectRunner against the local run, output compared "
    "byte for byte (`bench/datagen_beam.py`).",
    "train": "tokens/s of a training step at T5's shapes (batch 16, lengths 128/128, vocabulary 32,128, Adafactor, "
    "the set's dropout) against Hugging Face T5 in PyTorch at its best (`torch.optim.Adafactor`; its fastest row of "
    "float32 and bfloat16 autocast, eager and `torch.compile`) (`bench/train.py`). MFU divides the model's FLOPs by "
    "the matmul peak the same run measured for the row's dtype.",
    "decode": "sentences/s of t5_small (random weights, batch 64, every system decoding each line until it ends, "
    "at most 32 tokens: on random weights, all 32), medians of runs in turns, against CTranslate2 (its faster thread "
    "layout), HF `generate` and OpenVINO (its fastest precision) on the same weights (`bench/decode.py`).",
    "int8_agreement": "BLEU of CTranslate2 int8 against float32, and how many dev lines it decodes as float32 does, "
    "on a small model trained on the shipped verses (`bench/int8_agreement.py`).",
    "dtype_losses": "the whole dev split's loss after short `t2t-train` runs on the shipped translate_en_es with "
    "bfloat16 activations against the same runs in float32, means over the same seeds; ours / peer is bfloat16's "
    "loss over float32's (1.00x: the same), and a difference within float32's own spread over its seeds is seed "
    "noise (`bench/dtype_losses.py`).",
}
# Benchmarks of what a choice costs in quality, not speed: their own tables only, no summary row.
QUALITY = {"int8_agreement", "dtype_losses"}
NUMBER = r"[\d,]+(?:\.\d+)?"
# Optional fields of a row, each a column of its benchmark's table where any row has it:
# (field, column title, what a row without it shows).
EXTRA_COLUMNS = (
    ("mfu", "MFU, ours / peer", "not recorded"),
    ("peak", "matmul peak of the run, TFLOP/s", "not recorded"),
    ("note", "note", ""),
)


def kind_stem(kind: str) -> str:
    """bench/results/<stem>.json of a CPU kind as `t2tcli.model.hardware` names it ('AVX2' is AVX2-only)."""
    return "avx2-only" if kind == "AVX2" else re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _row(case: str, ours: str, ours_figure: str | None, peer: str, peer_figure: str | None, ratio: float) -> dict:
    return {
        "case": case,
        "ours": ours,
        "ours_figure": ours_figure,
        "peer": peer,
        "peer_figure": peer_figure,
        "ratio": round(ratio, 2),
    }


def parse_datagen(log: str) -> list[dict]:
    rates = {
        m["name"].strip(): m["rate"]
        for m in re.finditer(rf"^(?P<name>\S.*?)\s+{NUMBER}\s+{NUMBER}\s+(?P<rate>{NUMBER})\s", log, re.M)
    }
    baseline = next((rate for name, rate in rates.items() if name.startswith("baseline")), None)
    rows = []
    for m in re.finditer(rf"^speed-up over the baseline, (?P<name>.+?): (?P<ratio>{NUMBER})x wall", log, re.M):
        name = m["name"]
        ours = rates.get(name)
        rows.append(
            _row(
                name.removeprefix("t2t-datagen, "),
                "t2t-datagen",
                ours and f"{ours} rows/s",
                "pandas iterrows writer",
                baseline and f"{baseline} rows/s",
                _num(m["ratio"]),
            )
        )
    return rows


def parse_datagen_beam(log: str) -> list[dict]:
    pattern = rf"^(?P<input>\d+ CSVs?)\s+(?P<run>\S.*?)\s+{NUMBER}\s+(?P<rate>{NUMBER})\s+(?P<vs>{NUMBER})"
    local: dict[str, str] = {}
    rows = []
    for m in re.finditer(pattern, log, re.M):
        if m["run"] == "local":
            local[m["input"]] = m["rate"]
            continue
        ours = f"t2t-datagen, {m['run']}"
        rows.append(_row(m["input"], ours, f"{m['rate']} rows/s", "t2t-datagen, local", None, _num(m["vs"])))
    for row in rows:
        rate = local.get(row["case"])
        row["peer_figure"] = rate and f"{rate} rows/s"
    return rows


def _same_dtype(default: str, other: str) -> bool:
    """Whether a t2tcli row of one dtype ('... float32') runs what the default ('... (auto: float32)') runs."""
    auto = re.search(r"\(auto: (\w+)\)", default)
    return bool(auto) and other.endswith(f" {auto[1]}")


def _train_section(log: str) -> list[dict]:
    """The rows of one `bench/train.py` run (one shape): ours against the peer's best row,
    each with its MFU, and the matmul peak the run measured, which the MFU divides by."""
    system = rf"^(?P<name>(?:t2tcli|HF) .*?)\s+{NUMBER}\s+(?P<tokens>{NUMBER})\s+(?P<mfu>{NUMBER}%|n/a)"
    systems = {m["name"].strip(): (_num(m["tokens"]), m["mfu"]) for m in re.finditer(system, log, re.M)}
    ours_rows = {name: t for name, (t, _) in systems.items() if name.startswith("t2tcli")}
    peer_rows = {name: t for name, (t, _) in systems.items() if name.startswith("HF")}
    if not ours_rows or not peer_rows:
        return []
    peer = max(peer_rows, key=peer_rows.get)
    shape = re.search(r"^Model: (\S+)", log, re.M)
    case = shape[1] if shape else "t5_small"
    peaks = re.search(r"^Measured matmul peak [^:]*: (?P<peaks>.+)$", log, re.M)
    peak = ", ".join(re.findall(rf"(\w+ {NUMBER}) TFLOP/s", peaks["peaks"])) if peaks else None
    rows = []
    for m in re.finditer(rf"^t2tcli (?P<which>default|best) / HF T5 best tokens/s: (?P<ratio>{NUMBER})x", log, re.M):
        if m["which"] == "default":
            ours = next((name for name in ours_rows if name.startswith("t2tcli default")), None)
        else:
            ours = max(ours_rows, key=ours_rows.get)
        if ours is None or any(row["ours"] == ours or _same_dtype(row["ours"], ours) for row in rows):
            continue  # the best row is the default's configuration: one row says both
        row = _row(
            case,
            ours,
            f"{ours_rows[ours]:,.0f} tokens/s",
            peer,
            f"{peer_rows[peer]:,.0f} tokens/s",
            _num(m["ratio"]),
        )
        row["mfu"] = f"{systems[ours][1]} / {systems[peer][1]}"
        if peak:
            row["peak"] = peak
        rows.append(row)
    return rows


def parse_train(log: str) -> list[dict]:
    """Rows of each run in the log: `bench/run` runs t5_small's shape, then t5_base's, into one log."""
    starts = [m.start() for m in re.finditer(r"^Model: ", log, re.M)] or [0]
    ends = starts[1:] + [len(log)]
    return [row for start, end in zip(starts, ends, strict=True) for row in _train_section(log[start:end])]


def _default_rate(rates: dict, key: tuple[str, str], peer_rate: float | None, ratio: float) -> float | None:
    """For a log that does not name the default's row (one written before decode.DEFAULT_IS):
    the measured rate of the engine row whose ratio to the peer is the printed one (the
    printed rates are rounded, so within 2%); the ratio times the peer's rate where not
    exactly one engine row matches."""
    if not peer_rate:
        return None
    matching = [
        rates[(*key, row)]
        for row in decode.ENGINE_ROWS.values()
        if (*key, row) in rates and abs(rates[(*key, row)] / peer_rate / ratio - 1) <= 0.02
    ]
    return matching[0] if len(matching) == 1 else peer_rate * ratio


def parse_decode(log: str) -> list[dict]:
    rates = {}
    table = rf"^(?P<data>\S.*?)\s+{NUMBER}\s+(?P<search>greedy|beam \d+)\s+(?P<system>\S.*?)\s+(?P<rate>{NUMBER})\s"
    for m in re.finditer(table, log, re.M):
        rates[m["data"].strip(), m["search"], m["system"].strip()] = _num(m["rate"])
    named = rf"^(?P<data>[^,\n]+), (?P<search>greedy|beam \d+): {decode.DEFAULT_IS} (?P<system>.+)$"
    defaults = {(m["data"], m["search"]): m["system"].strip() for m in re.finditer(named, log, re.M)}
    rows = []
    ratio_line = (
        rf"^(?P<data>[^,\n]+), (?P<search>greedy|beam \d+): (?P<ours>[^:/]+?) / (?P<peer>[^:]+?): (?P<r>{NUMBER})x"
    )
    for m in re.finditer(ratio_line, log, re.M):
        key = (m["data"], m["search"])
        peer = m["peer"]
        if peer in decode.BEST_OF:  # the fastest of the rows decode.py's "best" is of, named
            rows_of = {system: rates[(*key, system)] for system in decode.BEST_OF[peer] if (*key, system) in rates}
            peer = max(rows_of, key=rows_of.get, default=peer)
        peer_rate = rates.get((*key, peer)) or rates.get((*key, f"{peer} float32"))
        ratio = _num(m["r"])
        ours = defaults.get(key, m["ours"]) if m["ours"] == "t2t-decode default" else m["ours"]
        ours_rate = rates.get((*key, ours)) or _default_rate(rates, key, peer_rate, ratio)
        rows.append(
            _row(
                f"{m['data']}, {m['search']}",
                m["ours"],
                ours_rate and f"{ours_rate:.1f} sent/s",
                peer,
                peer_rate and f"{peer_rate:.1f} sent/s",
                ratio,
            )
        )
    return rows


def parse_int8_agreement(log: str) -> list[dict]:
    pattern = (
        rf"^int8 agreement, (?P<search>[^:]+): (?P<same>{NUMBER})% of lines as float32, "
        rf"BLEU (?P<int8>{NUMBER}) \(int8\) vs (?P<f32>{NUMBER}) \(float32\)"
    )
    return [
        {
            **_row(
                m["search"],
                "t2t-decode ctranslate2 int8",
                f"BLEU {m['int8']}",
                "t2t-decode ctranslate2 float32",
                f"BLEU {m['f32']}",
                _num(m["int8"]) / _num(m["f32"]),
            ),
            "note": f"{m['same']}% of lines the same",
        }
        for m in re.finditer(pattern, log, re.M)
    ]


def parse_dtype_losses(log: str) -> list[dict]:
    found = [
        re.search(r"^CPU kind: .*; --hparams_set=(?P<set>\S+) --hparams=[^;]*; (?P<steps>\d+) steps$", log, re.M),
        re.search(rf"^  mean: float32 (?P<f32>{NUMBER}), bfloat16 (?P<b16>{NUMBER})$", log, re.M),
        re.search(rf"^  float32's spread over (?P<seeds>\d+) seeds \(max - min\): (?P<spread>{NUMBER})$", log, re.M),
        re.search(r"^  bfloat16 minus float32, seed by seed: (?P<by_seed>.+)$", log, re.M),
        re.search(
            rf"^  bfloat16's mean is (?P<verdict>within|OUTSIDE) float32's seed spread \((?P<difference>{NUMBER})",
            log,
            re.M,
        ),
    ]
    if not all(found):
        return []
    fields = {key: value for m in found for key, value in m.groupdict().items()}
    return [
        {
            **_row(
                f"{fields['set']}, {fields['steps']} steps, mean of {fields['seeds']} seeds",
                "t2t-train bfloat16",
                f"dev loss {fields['b16']}",
                "t2t-train float32",
                f"dev loss {fields['f32']}",
                _num(fields["b16"]) / _num(fields["f32"]),
            ),
            "note": f"{fields['verdict'].lower()} float32's seed spread: {fields['difference']} against "
            f"{fields['spread']} (bfloat16 minus float32 by seed: {fields['by_seed']})",
        }
    ]


PARSERS: dict[str, Callable[[str], list[dict]]] = {
    "datagen": parse_datagen,
    "datagen_beam": parse_datagen_beam,
    "train": parse_train,
    "decode": parse_decode,
    "int8_agreement": parse_int8_agreement,
    "dtype_losses": parse_dtype_losses,
}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def record(kind: str, machine: str, command: str, logs: dict[str, str], results: Path, today: str) -> Path:
    """Merges the parsed logs into results/<kind>.json; a benchmark that gave no rows keeps its old ones."""
    path = results / f"{kind_stem(kind)}.json"
    data = json.loads(path.read_text()) if path.exists() else {"cpu_kind": kind, "benchmarks": {}}
    data["machine"], data["versions"] = machine, versions()
    for name, log in logs.items():
        rows = PARSERS[name](log)
        if rows:
            data["benchmarks"][name] = {"measured": today, "command": f"{command}", "rows": rows}
    results.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def _title(kind: str) -> str:
    return "AVX2-only" if kind == "AVX2" else kind


def _ratio(rows: list[dict]) -> str:
    low, high = min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)
    return f"{low:.2f}x" if low == high else f"{low:.2f}-{high:.2f}x"


def render(kinds: list[dict]) -> str:
    """BENCHMARKS.md: a summary per CPU kind, the machines, then one table per benchmark."""
    order = {"AVX2": 0, "AVX512-BF16": 1, "AMX": 2}
    kinds = sorted(kinds, key=lambda k: (order.get(k["cpu_kind"], 9), k["cpu_kind"]))
    out = [
        "# Benchmarks",
        "",
        "Rendered by `bench/run` from the results it keeps per CPU kind in `bench/results/`: each kind's",
        "figures were measured on a machine of that kind, on the date and with the command its rows name.",
        "Compare ratios within one CPU kind. Why the code computes as it does:",
        "[docs/performance-design.md](docs/performance-design.md); the tools: [bench/README.md](bench/README.md).",
        "",
        "## Summary per CPU kind",
        "",
        "ours / peer, higher is better; a range spans the benchmark's cases.",
        "",
        "| CPU kind | benchmark | ours | peer | ours / peer |",
        "|---|---|---|---|---|",
    ]
    for kind in kinds:
        for name in METHODS:
            bench = kind["benchmarks"].get(name)
            if not bench or name in QUALITY:
                continue
            pairs: dict[tuple[str, str], list[dict]] = {}
            for row in bench["rows"]:
                pairs.setdefault((row["ours"], row["peer"]), []).append(row)
            several_cases = len({row["case"] for row in bench["rows"]}) > 1
            for (ours, peer), rows in pairs.items():
                cases = {row["case"] for row in rows}
                label = f"{name} ({cases.pop()})" if several_cases and len(cases) == 1 else name
                out.append(f"| {_title(kind['cpu_kind'])} | {label} | {ours} | {peer} | {_ratio(rows)} |")
    out += ["", "## Machines", ""]
    for kind in kinds:
        shown = ", ".join(f"{name} {version}" for name, version in kind.get("versions", {}).items())
        out.append(f"- **{_title(kind['cpu_kind'])}**: {kind['machine']}. {shown}.")
    for name, method in METHODS.items():
        measured = [(kind, kind["benchmarks"][name]) for kind in kinds if name in kind["benchmarks"]]
        if not measured:
            continue
        out += ["", f"## {name}", "", method, ""]
        extras = [column for column in EXTRA_COLUMNS if any(column[0] in r for _, b in measured for r in b["rows"])]
        header = "| CPU kind | case | ours | peer | ours / peer |" + "".join(f" {title} |" for _, title, _ in extras)
        out += [header, "|" + "---|" * (header.count("|") - 1)]
        for kind, bench in measured:
            for row in bench["rows"]:
                ours = row["ours"] + (f" ({row['ours_figure']})" if row.get("ours_figure") else "")
                peer = row["peer"] + (f" ({row['peer_figure']})" if row.get("peer_figure") else "")
                line = f"| {_title(kind['cpu_kind'])} | {row['case']} | {ours} | {peer} | {row['ratio']:.2f}x |"
                out.append(line + "".join(f" {row.get(key, missing)} |" for key, _, missing in extras))
        out.append("")
        for kind, bench in measured:
            note = f" {bench['note']}" if bench.get("note") else ""
            out.append(f"- {_title(kind['cpu_kind'])}: measured {bench['measured']} with `{bench['command']}`.{note}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["record", "render"])
    parser.add_argument("--results_dir", default=str(RESULTS))
    parser.add_argument("--log_dir", default=str(REPO / "bench" / "out"))
    parser.add_argument("--command", default="bench/run")
    parser.add_argument("--machine", help="record: this VM's name (default: model, CPU flags, cores, memory)")
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    parser.add_argument(
        "--benchmarks", default=",".join(PARSERS), help="record: these benchmarks' logs only (others' may be stale)"
    )
    args = parser.parse_args()
    results = Path(args.results_dir)
    if args.action == "record":
        sys.path.insert(0, str(REPO / "bench"))
        from binaries import cpu_kind, machine

        names = args.benchmarks.split(",")
        if unknown := sorted(set(names) - set(PARSERS)):
            parser.error(f"--benchmarks: unknown {', '.join(unknown)} (known: {', '.join(PARSERS)})")
        logs = {name: p.read_text() for name in names if (p := Path(args.log_dir) / f"{name}.log").exists()}
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        print(f"recorded {record(cpu_kind(), args.machine or machine(), args.command, logs, results, today)}")
    else:
        kinds = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
        Path(args.out).write_text(render(kinds))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
