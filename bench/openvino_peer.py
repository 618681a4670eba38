"""OpenVINO as a decode peer: Hugging Face optimum-intel's `OVModelForSeq2SeqLM`, in a
virtual environment of its own.

optimum-intel pins another transformers than ours, so the benchmark builds a venv for it
(on demand, with pip) and runs the peer there in a subprocess. That venv holds only what
clashes or is missing (openvino, optimum, optimum-intel, transformers, nncf for the int8
weight compression); torch and the rest come from our venv through a `.pth` line placed
after the venv's own packages, which spares a second multi-gigabyte torch download. The
export to OpenVINO IR needs optimum-intel too, so it runs in that venv as well; the two
sides exchange a Hugging Face directory (in) and JSON results (out).

Used two ways:
* imported by bench/decode.py (our venv): `ensure_venv`, `export`, `decode`;
* run by the venv's python: `openvino_peer.py export HF_DIR IR_DIR {float,int8}` and
  `openvino_peer.py decode IR_DIR REQUEST_JSON`, each printing one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

OPENVINO = "openvino==2026.4.1"
OPTIMUM_INTEL = "optimum-intel==2.2.0"
# optimum-intel's own requirements, less torch (ours serves) and torchvision and
# openvino-tokenizers (neither used to export or run a seq2seq model from ids).
REQUIREMENTS = ("optimum~=2.3.0", "transformers>=4.51,<5.6", "nncf>=3.3.0")
READY = ".t2tcli-openvino-ready"  # written last: a venv without it is half built
SHARED = "_t2tcli_shared.pth"
# INFERENCE_PRECISION_HINT of each row: None lets OpenVINO pick (bfloat16 where the CPU has it).
PRECISIONS = {"default": None, "float32": "f32"}


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _run(step: str, cmd: list[str], timeout: float) -> str:
    """Runs one build step; '' on success, else one line naming the step and its last error line."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{step} failed: {err}"
    if proc.returncode:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line or "Error" in line] or lines
        return f"{step} failed: {errors[-1].strip() if errors else f'exit status {proc.returncode}'}"
    return ""


def ensure_venv(venv: Path, timeout: float = 1800) -> str:
    """Builds the peer's venv unless it is already built with these pins; '' when ready,
    else the one line that says which step failed and why."""
    pins = "\n".join((OPENVINO, OPTIMUM_INTEL, *REQUIREMENTS))
    marker = venv / READY
    if marker.is_file() and marker.read_text() == pins:
        return ""
    python = venv_python(venv)
    if not python.exists():
        if error := _run("python -m venv", [sys.executable, "-m", "venv", "--clear", str(venv)], timeout):
            return error
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not site:
        return f"{python}: cannot find its site-packages"
    ours = dict.fromkeys((sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]))
    Path(site, SHARED).write_text("\n".join(ours) + "\n")
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    wheels = venv / "wheels"
    steps = [
        # The pins resolve before anything is installed.
        ("pip download " + " ".join((OPENVINO, OPTIMUM_INTEL)), [*pip, "download", "--no-deps", "-d", str(wheels)]),
        ("pip install " + " ".join((OPENVINO, *REQUIREMENTS)), [*pip, "install", "--find-links", str(wheels)]),
        ("pip install --no-deps " + OPTIMUM_INTEL, [*pip, "install", "--no-deps", "--find-links", str(wheels)]),
    ]
    packages = [[OPENVINO, OPTIMUM_INTEL], [OPENVINO, *REQUIREMENTS], [OPTIMUM_INTEL]]
    for (step, cmd), names in zip(steps, packages, strict=True):
        if error := _run(step, cmd + names, timeout):
            return error
    probe = "from optimum.intel import OVModelForSeq2SeqLM"
    if error := _run(f"{python} -c '{probe}'", [str(python), "-c", probe], timeout):
        return error
    marker.write_text(pins)
    return ""


def _peer(venv: Path, *args: str, timeout: float) -> dict:
    """One JSON result of this script run by the venv's python; {"error": line} if it failed."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        proc = subprocess.run(
            [str(venv_python(venv)), __file__, *args], capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-1:]
        return {"error": last[0] if last else f"exit status {proc.returncode}"}
    return json.loads(lines[-1])


def export(venv: Path, hf_dir: Path, ir_dir: Path, weights: str, timeout: float = 1800) -> dict:
    """OpenVINO IR of the HF directory, float weights or int8-compressed ones."""
    return _peer(venv, "export", str(hf_dir), str(ir_dir), weights, timeout=timeout)


def decode(
    venv: Path,
    ir_dir: Path,
    batches: list,
    beam: int,
    length: int,
    precision: str,
    eos_id: int,
    work: Path,
) -> dict:
    """One decode run of the peer: {"lines", "tokens", "decode_s", "steps_per_batch", "precision"}."""
    request = work / "openvino_request.json"
    request.write_text(
        json.dumps(
            {
                "batches": batches,
                "beam": beam,
                "length": length,
                "precision": precision,
                "eos_id": eos_id,
                "threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            }
        )
    )
    return _peer(venv, "decode", str(ir_dir), str(request), timeout=3600)


def _export_here(hf_dir: str, ir_dir: str, weights: str) -> dict:
    from optimum.intel import OVModelForSeq2SeqLM, OVWeightQuantizationConfig

    # Float weights stay float (optimum-intel compresses large models to int8 by itself).
    compression = {"quantization_config": OVWeightQuantizationConfig(bits=8)} if weights == "int8" else {}
    model = OVModelForSeq2SeqLM.from_pretrained(
        hf_dir, export=True, compile=False, **(compression or {"load_in_8bit": False})
    )
    model.save_pretrained(ir_dir)
    return {"ir_dir": ir_dir, "weights": weights}


def _decode_here(ir_dir: str, request_file: str) -> dict:
    import openvino as ov
    import torch
    from optimum.intel import OVModelForSeq2SeqLM

    req = json.loads(Path(request_file).read_text())
    torch.set_num_threads(req["threads"])
    config = {"INFERENCE_NUM_THREADS": str(req["threads"])}
    hint = PRECISIONS[req["precision"]]
    if hint:
        config["INFERENCE_PRECISION_HINT"] = hint
    model = OVModelForSeq2SeqLM.from_pretrained(ir_dir, ov_config=config)
    picked = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")  # an ov.Type: f32, bf16, f16
    precision = hint or getattr(picked, "to_string", picked.__str__)()
    length, eos = req["length"], req["eos_id"]
    started = time.monotonic()
    lines = tokens = steps = 0
    for chunk in req["batches"]:
        width = max(len(x) for x in chunk)
        ids = torch.tensor([x + [0] * (width - len(x)) for x in chunk])
        out = model.generate(
            input_ids=ids,
            attention_mask=(ids != 0).long(),
            max_new_tokens=length,
            num_beams=req["beam"],
            do_sample=False,
        )[:, 1:]  # the decoder's start token
        lines += len(chunk)
        tokens += int((out > eos).sum())  # padding and EOS left out, as the other rows count
        steps += out.shape[1]
    return {
        "lines": lines,
        "tokens": tokens,
        "decode_s": time.monotonic() - started,
        "steps_per_batch": steps / len(req["batches"]),
        "precision": precision,
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["export"] and len(argv) == 4:
        print(json.dumps(_export_here(*argv[1:])))
    elif argv[:1] == ["decode"] and len(argv) == 3:
        print(json.dumps(_decode_here(*argv[1:])))
    else:
        sys.exit("usage: openvino_peer.py export HF_DIR IR_DIR {float,int8} | decode IR_DIR REQUEST_JSON")


if __name__ == "__main__":
    main(sys.argv[1:])
