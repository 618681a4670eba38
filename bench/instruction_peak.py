"""The rate at which this CPU's cores can issue the multiply-add instructions a matmul runs on.

`bench/train.py` measures its matmul peak with TensorFlow's own products, which is what a
step can reach through oneDNN; this measures the ceiling above that: a loop of nothing but
independent multiply-adds in registers, no memory traffic, on one core and then on every
core. Its last column is the training tokens/s of `bench/train.py`'s shape if a step were
nothing but its products at that rate (the same FLOP count): a tokens/s target above it
cannot be met on the machine whatever the code does. The loops are C, compiled here with
the system's `cc`, one per instruction the CPU has (float32 FMA on 256 and 512 bits,
AVX512-BF16's bfloat16 dot product); AMX's tile products are not covered.

    .venv/bin/python bench/instruction_peak.py [--seconds=0.5] [--hparams_set=t5_small]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "bench" / "out" / "instruction_peak"
ACCUMULATORS = 12  # independent chains: enough to cover each instruction's latency on two pipes

SOURCE = r"""
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ACC %(accumulators)d
typedef %(vector)s vec;

static long iterations;
static double sums[256];

static void *loop(void *arg) {
  long id = (long)arg;
  vec acc[ACC];
  for (int i = 0; i < ACC; i++) acc[i] = %(zero)s;
  %(operand)s a = %(one)s, b = %(one)s;
  for (long it = 0; it < iterations; it++) {
#pragma GCC unroll 16
    for (int i = 0; i < ACC; i++) acc[i] = %(step)s;
    __asm__ volatile("" : "+x"(a), "+x"(b)); /* keeps the operands opaque to the compiler */
  }
  float lanes[sizeof(vec) / sizeof(float)];
  double sum = 0;
  for (int i = 0; i < ACC; i++) {
    %(store)s;
    for (unsigned j = 0; j < sizeof(vec) / sizeof(float); j++) sum += lanes[j];
  }
  sums[id] = sum;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  int threads = atoi(argv[1]);
  iterations = atol(argv[2]);
  if (threads < 1 || threads > 256 || iterations < 1) return 2;
  pthread_t handles[256];
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (long t = 0; t < threads; t++) pthread_create(&handles[t], NULL, loop, (void *)t);
  for (int t = 0; t < threads; t++) pthread_join(handles[t], NULL);
  clock_gettime(CLOCK_MONOTONIC, &end);
  double total = 0;
  for (int t = 0; t < threads; t++) total += sums[t];
  printf("{\"seconds\": %%.9f, \"sum\": %%.1f}\n",
         (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) * 1e-9, total);
  return 0;
}
"""


@dataclass(frozen=True)
class Instruction:
    """One multiply-add instruction: what it needs, how it is written, what it computes."""

    name: str
    dtype: str  # of the products it multiplies
    cpu_flags: tuple[str, ...]
    cc_flags: tuple[str, ...]
    lanes: int  # float32 results per instruction
    products_per_lane: int  # multiply-adds each lane does per instruction
    code: dict[str, str]

    @property
    def mnemonic(self) -> str:
        return self.name[self.name.index("(") + 1 : -1]

    @property
    def flops(self) -> int:
        """FLOPs of one instruction: a multiply and an add per product."""
        return 2 * self.lanes * self.products_per_lane

    def source(self) -> str:
        return SOURCE % {"accumulators": ACCUMULATORS, **self.code}


INSTRUCTIONS = (
    Instruction(
        "float32 FMA, 256 bits (vfmadd231ps ymm)",
        "float32",
        ("avx2", "fma"),
        ("-mavx2", "-mfma"),
        8,
        1,
        {
            "vector": "__m256",
            "operand": "__m256",
            "zero": "_mm256_setzero_ps()",
            "one": "_mm256_set1_ps(1.0f)",
            "step": "_mm256_fmadd_ps(a, b, acc[i])",
            "store": "_mm256_storeu_ps(lanes, acc[i])",
        },
    ),
    Instruction(
        "float32 FMA, 512 bits (vfmadd231ps zmm)",
        "float32",
        ("avx512f",),
        ("-mavx512f",),
        16,
        1,
        {
            "vector": "__m512",
            "operand": "__m512",
            "zero": "_mm512_setzero_ps()",
            "one": "_mm512_set1_ps(1.0f)",
            "step": "_mm512_fmadd_ps(a, b, acc[i])",
            "store": "_mm512_storeu_ps(lanes, acc[i])",
        },
    ),
    Instruction(
        "bfloat16 dot product, 512 bits (vdpbf16ps zmm)",
        "bfloat16",
        ("avx512f", "avx512_bf16"),
        ("-mavx512f", "-mavx512bf16"),
        16,
        2,
        {
            "vector": "__m512",
            "operand": "__m512bh",
            "zero": "_mm512_setzero_ps()",
            "one": "(__m512bh)_mm512_set1_epi16(0x3f80)",  # bfloat16 1.0 in every half
            "step": "_mm512_dpbf16_ps(acc[i], a, b)",
            "store": "_mm512_storeu_ps(lanes, acc[i])",
        },
    ),
)


def available(instruction: Instruction, flags: frozenset[str]) -> bool:
    return all(f in flags for f in instruction.cpu_flags)


def build(instruction: Instruction, compiler: str, folder: Path = BUILD) -> Path:
    """The loop's executable, compiled once per source and flags."""
    source = instruction.source()
    key = hashlib.sha256("\0".join((compiler, *instruction.cc_flags, source)).encode()).hexdigest()[:16]
    binary = folder / f"{key}.bin"
    if not binary.exists():
        folder.mkdir(parents=True, exist_ok=True)
        c_file = folder / f"{key}.c"
        c_file.write_text(source, encoding="utf-8")
        partial = binary.with_suffix(".partial")
        command = [compiler, "-O2", *instruction.cc_flags, "-pthread", str(c_file), "-o", str(partial)]
        compiled = subprocess.run(command, capture_output=True, text=True)
        if compiled.returncode != 0:
            last = (compiled.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"{compiler} could not build the {instruction.mnemonic} loop ({c_file}): {last}")
        partial.replace(binary)
    return binary


def fastest_for(dtype: str, measured: list[tuple[Instruction, float]]) -> tuple[Instruction, float]:
    """The fastest measured instruction of `dtype`'s own, where the CPU has one; else of
    float32, on which a CPU without bfloat16 instructions multiplies bfloat16 once converted."""
    usable = [(i, r) for i, r in measured if i.dtype == dtype] or [(i, r) for i, r in measured if i.dtype == "float32"]
    return max(usable, key=lambda pair: pair[1])


def run(binary: Path, threads: int, iterations: int) -> tuple[float, float]:
    """(seconds, the sum of every accumulator's lanes) of one run of the loop."""
    out = subprocess.run([str(binary), str(threads), str(iterations)], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    return float(result["seconds"]), float(result["sum"])


def expected_sum(instruction: Instruction, threads: int, iterations: int) -> float:
    """What the accumulators hold after the loop: each product is 1 x 1, so each lane gains
    its products per instruction, exactly while the totals stay within float32's integers."""
    return float(threads * ACCUMULATORS * instruction.lanes * instruction.products_per_lane * iterations)


def rate(instruction: Instruction, binary: Path, threads: int, seconds: float) -> float:
    """FLOP/s of `threads` cores issuing the instruction for about `seconds`, best of five: a
    VM's other work only ever slows a run."""
    iterations = 1000
    while True:
        took, _ = run(binary, threads, iterations)
        if took >= seconds / 4:
            break
        iterations *= 4
    iterations = max(iterations, int(iterations * seconds / took))
    best = min(run(binary, threads, iterations)[0] for _ in range(5))
    return threads * iterations * ACCUMULATORS * instruction.flops / best


def c_compiler() -> str | None:
    """The user's `CC`, else the system's `cc` or `gcc`."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="how long each timed run lasts")
    parser.add_argument("--hparams_set", default="t5_small", help="the shape of the last column")
    args = parser.parse_args()
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    compiler = c_compiler()
    if not compiler:
        raise SystemExit("instruction_peak: error: no C compiler found (set CC)")
    sys.path.insert(0, str(REPO))
    import train
    from binaries import cpu_kind
    from peer import usable_cores

    from t2tcli.model import hardware

    flags = hardware.cpu_flags()
    cores = usable_cores()
    batch, length = 16, 128
    step_flops = train.model_flops_per_step(train.model_dims(args.hparams_set, train.T5_VOCAB), batch, length, length)
    print(f"CPU kind: {cpu_kind()}; {cores} cores; compiler {compiler}")
    print(f"{args.hparams_set} step (batch {batch}, lengths {length}/{length}): {step_flops / 1e9:.1f} GFLOP")
    measured: list[tuple[Instruction, float]] = []
    print(f"{'instruction':<48}{'1 core':>16}{f'{cores} cores':>16}{'step of products alone':>28}")
    for instruction in INSTRUCTIONS:
        if not available(instruction, flags):
            print(f"{instruction.name:<48}{'(not on this CPU)':>32}")
            continue
        try:
            binary = build(instruction, compiler)
        except RuntimeError as error:
            print(f"{instruction.name:<48}  {error}")
            continue
        one, every = (rate(instruction, binary, n, args.seconds) for n in (1, cores))
        measured.append((instruction, every))
        tokens = 2 * batch * length * every / step_flops
        print(f"{instruction.name:<48}{one / 1e12:>8.3f} TFLOP/s{every / 1e12:>8.3f} TFLOP/s{tokens:>14,.0f} tokens/s")
    if not measured:
        raise SystemExit("instruction_peak: error: no instruction above could be timed on this CPU")
    for dtype in ("bfloat16", "float32"):
        instruction, ceiling = fastest_for(dtype, measured)
        peak = train.worker_peak(dtype)["flops"]
        print(
            f"bench/train.py's {dtype} matmul peak (TensorFlow, 2048^2): {peak / 1e12:.3f} TFLOP/s, "
            f"{peak / ceiling:.0%} of {instruction.mnemonic}'s rate"
        )


if __name__ == "__main__":
    main()
