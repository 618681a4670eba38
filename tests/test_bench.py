"""The benchmarks' own code: what they import from t2tcli still exists, the trace
reading behind `bench/train.py --profile` splits a step's time as it says, and the results
kept per CPU kind render to BENCHMARKS.md."""

import dataclasses
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import step_trace  # noqa: E402

FROM_IMPORT = re.compile(r"from (t2tcli[\w.]*) import ([\w, ]+)")


def test_every_name_the_benchmarks_import_from_t2tcli_exists():
    """Benchmarks are not run by the tests; a module moved in the library must not leave
    one of them (or bench/run's inline Python) importing from where it was."""
    imports = set()
    for script in [*BENCH.glob("*.py"), BENCH / "run"]:
        for module, names in FROM_IMPORT.findall(script.read_text()):
            for name in filter(None, (n.split(" as ")[0].strip() for n in names.split(","))):
                imports.add((module, name, script.name))
    assert len(imports) > 20
    for module, name, script in sorted(imports):
        where = f"{script}: from {module} import {name}"
        spec = importlib.util.find_spec(module)
        assert spec is not None, where
        if spec.submodule_search_locations is not None and importlib.util.find_spec(f"{module}.{name}"):
            continue  # a module of a package
        if module.startswith("t2tcli.cli"):  # a binary's module defines its flags when imported
            source = Path(spec.origin).read_text()
            assert re.search(rf"^(def|class) {name}\b|^{name}\b.*=", source, re.M), where
        else:
            assert hasattr(importlib.import_module(module), name), where


def op(start, end, name, kind):
    return {"ph": "X", "ts": start, "dur": end - start, "args": {"name": name, "op": kind}}


def test_time_with_no_matmul_is_split_among_the_ops_running_then():
    events = [
        op(0, 100, "encoder/block_000/layer_001/DenseReluDense/wi/einsum/parallel_0/einsum/Einsum", "_MklEinsum"),
        op(20, 60, "encoder/block_000/layer_001/layer_norm/square/parallel_0/Square", "Square"),  # beside a matmul
        op(100, 150, "decoder/token_loss/parallel_0/PartitionedCall", "PartitionedCall"),
        op(150, 170, "shared/embedding/adafactor/square/parallel_0/Square", "Square"),
        op(150, 170, "decoder/block_001/layer_002/DenseReluDense/dropout/einsum/parallel_0/Mul", "Mul"),
        op(180, 200, "decoder/einsum_3/gradients/einsum/parallel_0/einsum/Einsum", "_MklEinsum"),
        op(200, 206, "decoder/block_001/layer_000/SelfAttention/softmax/parallel_0/Softmax", "_MklSoftmax"),
        {"ph": "s", "ts": 300, "name": "flow"},  # not an op
    ]
    parts = step_trace.wall_time_breakdown(events)
    assert parts["span"] == 206
    assert parts["matmul"] == 120
    assert parts["idle"] == 10
    assert parts["no_matmul"] == {
        "loss": 50,
        "optimizer": 10,
        "dropout": 10,
        "attention: softmax, bias, mask, layout": 6,
    }
    lines = step_trace.wall_time_lines(events)
    assert lines[0].startswith("trace span 0.000 s") and "ops but no matmul 0.000 s (36.9%)" in lines[0]
    assert lines[2].split() == ["loss", "0.1", "24.3%"]


def test_ops_are_sorted_into_kinds_of_work_by_scope_then_type():
    kinds = {
        "decoder/block_000/layer_002/DenseReluDense/wi/relu/parallel_0/Relu Relu": "FFN activation",
        "encoder/block_000/layer_000/SelfAttention/transpose/parallel_0/transpose _MklTranspose": (
            "attention: softmax, bias, mask, layout"
        ),
        "encoder/gather_rows/parallel_0/GatherV2 GatherV2": "embedding lookup",
        "decoder/block_000/layer_001/add_2/parallel_0/Add AddV2": "residual adds",
        "decoder/cast_1/parallel_0/Cast Cast": "casts",
        "shared/embedding/adafactor/scaled_assign_sub/x ResourceApplyGradientDescent": "optimizer",
        "decoder/einsum/parallel_0/Mul Mul": "other: Mul",
    }
    for key, kind in kinds.items():
        name, op_type = key.rsplit(" ", 1)
        assert step_trace.kind_of_work(op(0, 1, name, op_type)) == kind, key


def test_an_empty_trace_has_nothing_to_split():
    assert step_trace.wall_time_breakdown([])["span"] == 0.0


ONEDNN_LINES = [
    "onednn_verbose,info,oneDNN v3.2.1 (commit N/A)",
    "onednn_verbose,exec,cpu,matmul,brg:avx512_core_amx,undef,src_bf16::blocked:ab::f0 wei_bf16::blocked:ab::f0"
    " dst_bf16::blocked:ab::f0,attr-scratchpad:user ,,2048x512:512x2048,4.0",
    "onednn_verbose,exec,cpu,matmul,brg:avx512_core_amx,undef,src_bf16::blocked:ab::f0 wei_bf16::blocked:ab::f0"
    " dst_bf16::blocked:ab::f0,attr-scratchpad:user ,,2048x512:512x2048,4.0",
    "onednn_verbose,exec,cpu,matmul,gemm:jit:bf16,undef,src_bf16::blocked:abcd::f0 wei_bf16::blocked:abcd::f0"
    " dst_bf16::blocked:abcd::f0,attr-scratchpad:user ,,16x8x128x64:1x8x64x128,10.0",
    "onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_bf16::blocked:abcd::f0 dst_bf16::blocked:acbd::f0,,,"
    "16x128x8x64,2.0",
    "onednn_verbose,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 wei_f32::blocked:ab:f0 dst_f32::blocked:ab:f0,,,"
    "1x512:512x512,0.5",
    "onednn_verbose,exec,cpu,softmax,jit:avx512_core,forward_inference,src_f32::blocked:abcd::f0,,alg:softmax_accurate"
    " axis:3,16x8x128x128,not-a-time",
    "some other line a worker printed",
]


def test_onednn_s_log_of_the_traced_step_is_cut_from_all_a_worker_printed():
    import onednn_calls as oc

    printed = ["a", oc.BEGIN, "step 1", oc.END, "b", oc.BEGIN, "step 2", "more", oc.END, "c"]
    assert oc.traced_step("\n".join(printed)) == ["step 2", "more"]
    assert oc.traced_step("\n".join([oc.BEGIN, oc.END])) == []
    assert oc.traced_step("\n".join(["a", oc.BEGIN, "cut short"])) is None
    assert oc.traced_step("a\nb") is None


def test_onednn_calls_are_summed_by_kernel_and_products_rated_by_shape():
    import onednn_calls as oc

    calls = oc.parse(ONEDNN_LINES)
    assert [(c.primitive, c.implementation, c.ms) for c in calls] == [
        ("matmul", "brg:avx512_core_amx", 4.0),
        ("matmul", "brg:avx512_core_amx", 4.0),
        ("matmul", "gemm:jit:bf16", 10.0),
        ("reorder", "jit:uni", 2.0),
        ("gemm_api", "-", 0.5),
    ]
    assert oc.product_flops("2048x512:512x2048") == 2.0 * 2048 * 512 * 2048
    assert oc.product_flops("16x8x128x64:1x8x64x128") == 2.0 * 16 * 8 * 128 * 64 * 128  # broadcast batch
    assert oc.product_flops("16x128x8x64") is None and oc.product_flops("8x4:5x2") is None
    lines = oc.report(calls)
    assert lines[0] == "oneDNN calls in the traced step: 5, 20.5 ms summed"
    # Kernels by time: the slow bf16 fallback first, then AMX's two calls.
    assert re.match(r"\s+matmul\s+gemm:jit:bf16\s+1 calls\s+10\.0 ms\s+48\.8%", lines[1])
    assert re.match(r"\s+matmul\s+brg:avx512_core_amx\s+2 calls\s+8\.0 ms\s+39\.0%", lines[2])
    shapes = lines[lines.index(next(x for x in lines if x.startswith("costliest"))) + 1 :]
    # 2 calls of 4.295 GFLOP in 8 ms: 1073.7 GFLOP/s.
    assert "2048x512:512x2048" in shapes[1] and shapes[1].endswith("1073.7 GFLOP/s")
    assert "16x8x128x64:1x8x64x128" in shapes[0] and "reorder" not in "".join(shapes)
    assert oc.report([]) == ["(no oneDNN calls logged in the traced step: TensorFlow ran it on its own kernels)"]


def test_any_run_s_onednn_log_is_read_whole_or_by_its_traced_step(tmp_path, capsys):
    import onednn_calls as oc

    log = tmp_path / "run.log"
    log.write_text("\n".join(ONEDNN_LINES))
    oc.main([str(log)])
    assert capsys.readouterr().out.startswith(f"oneDNN calls in {log}: 5, 20.5 ms summed")
    log.write_text("\n".join([*ONEDNN_LINES, oc.BEGIN, ONEDNN_LINES[3], oc.END]))
    oc.main([str(log), "--top=1"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "oneDNN calls in the traced step: 1, 10.0 ms summed" and len(out) == 4
    with pytest.raises(SystemExit) as exit_info:
        oc.main([str(tmp_path / "missing.log")])
    assert exit_info.value.code == 2 and "missing.log" in capsys.readouterr().err


@pytest.mark.slow
def test_a_profiled_training_worker_logs_the_onednn_calls_of_its_traced_step_alone(tmp_path):
    """The log holds one call for each oneDNN op of the traced step: no more (the steps
    before it) and no fewer (lines still buffered when the step ended)."""
    import onednn_calls
    import train

    profile = tmp_path / "float32"
    log = profile / "onednn.log"
    out = train._spawn("t2t", json.dumps(TINY), "float32", "2", "4", "4", "1", "30", str(profile), onednn_log=log)
    assert out and out["steps"] == 1
    (trace,) = profile.glob("timeline-*.json")
    ops = [e.get("args", {}).get("op", "") for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    calls = onednn_calls.parse(log.read_text().splitlines())
    products = sum(op in ("_MklEinsum", "_MklMatMul", "_MklBatchMatMulV2") for op in ops)
    assert products > 0 and sum(c.primitive == "matmul" for c in calls) == products
    assert sum(c.primitive == "softmax" for c in calls) == ops.count("_MklSoftmax")


def clock_run(monkeypatch, step_seconds: list[float], warmup: int = 3, steps: int = 10, budget: float = 180):
    """Drives bench/train.py's StepClock with steps of the given lengths; returns how many
    steps ran and the clock's result."""
    import train

    now = [0.0]
    monkeypatch.setattr(train.time, "perf_counter", lambda: now[0])
    clock = train.StepClock(warmup=warmup, steps=steps, budget=budget)
    ran = 0
    for seconds in step_seconds:
        now[0] += seconds
        ran += 1
        if not clock.step_done():
            break
    return ran, clock.result()


def test_a_row_warms_up_then_times_its_steps(monkeypatch):
    ran, result = clock_run(monkeypatch, [40.0, 9.0, 7.0] + [6.0] * 5 + [8.0] * 5 + [99.0] * 5)
    assert ran == 13
    assert result == {"step_time": 7.0, "steps": 10}


def test_a_row_far_slower_than_the_budget_is_timed_over_fewer_steps(monkeypatch):
    """The peer's bfloat16 autocast on an AVX2-only CPU: over 100 s a step."""
    ran, result = clock_run(monkeypatch, [130.0, 110.0, 100.0, 100.0, 100.0])
    assert ran == 3  # one warm-up step (past half the budget), then two timed ones reach it
    assert result == {"step_time": 105.0, "steps": 2}
    ran, result = clock_run(monkeypatch, [30.0, 70.0, 400.0, 1.0], budget=180)
    assert ran == 3  # warm-up ends after 100 s; one step past the budget is enough
    assert result == {"step_time": 400.0, "steps": 1}


def test_a_clock_that_timed_nothing_says_so(monkeypatch):
    with pytest.raises(RuntimeError, match="no step was timed"):
        clock_run(monkeypatch, [1.0, 1.0])


@pytest.mark.parametrize("dims", [(512, 2048, 8, 64, 6), (768, 3072, 12, 64, 12)], ids=["t5_small", "t5_base"])
def test_the_products_measured_one_at_a_time_are_the_steps_flops(dims):
    """`bench/einsum_shapes.py` sums its products' times into a step's least matmul time;
    its list of shapes must add up to the FLOPs MFU is computed from, no product missed or
    counted twice."""
    import einsum_shapes
    import train

    d_model, d_ff, num_heads, d_kv, layers = dims
    shape = {"d_model": d_model, "d_ff": d_ff, "num_heads": num_heads, "d_kv": d_kv, "layers": layers}
    shape["vocab"] = 32128
    products = einsum_shapes.step_products(16, 128, shape)
    total = sum(einsum_shapes.einsum_flops(eq, left, right) * n for _, eq, left, right, n in products)
    assert total == pytest.approx(train.model_flops_per_step(shape, 16, 128, 128), rel=1e-12)
    assert einsum_shapes.einsum_flops("abc,cd->abd", [2, 3, 4], [4, 5]) == 2 * 2 * 3 * 4 * 5


def test_each_instruction_loop_does_the_multiply_adds_its_rate_is_counted_from(tmp_path):
    """`bench/instruction_peak.py` divides FLOPs it counts by the time its loop took: on every
    instruction this CPU has, the accumulators must end holding exactly that many products
    (each 1 x 1), on one thread and on two."""
    import instruction_peak

    from t2tcli.model import hardware

    compiler = instruction_peak.c_compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    flags = hardware.cpu_flags()
    if "avx2" not in flags:
        pytest.skip("not an x86 CPU with AVX2")
    here = [i for i in instruction_peak.INSTRUCTIONS if instruction_peak.available(i, flags)]
    assert here
    for instruction in here:
        binary = instruction_peak.build(instruction, compiler, tmp_path)
        for threads in (1, 2):
            seconds, total = instruction_peak.run(binary, threads, 1000)
            assert seconds > 0
            assert total == instruction_peak.expected_sum(instruction, threads, 1000), instruction.name
    ymm, zmm, bf16 = instruction_peak.INSTRUCTIONS
    assert bf16.flops == 64  # 16 float32 lanes, each adding two bfloat16 products
    # A float32 product runs on FMA only; a bfloat16 one on its dot product where the CPU has
    # it (however a noisy run timed it), else on FMA.
    rates = [(ymm, 2.0), (zmm, 3.0), (bf16, 5.0)]
    assert instruction_peak.fastest_for("float32", rates) == (zmm, 3.0)
    assert instruction_peak.fastest_for("bfloat16", rates) == (bf16, 5.0)
    assert instruction_peak.fastest_for("bfloat16", [*rates[:2], (bf16, 1.0)]) == (bf16, 1.0)
    assert instruction_peak.fastest_for("bfloat16", rates[:2]) == (zmm, 3.0)


def test_an_instruction_loop_the_compiler_cannot_build_is_named_not_left_half_built(tmp_path):
    import instruction_peak

    ymm = instruction_peak.INSTRUCTIONS[0]
    with pytest.raises(RuntimeError, match=r"/bin/false could not build the vfmadd231ps ymm loop"):
        instruction_peak.build(ymm, "/bin/false", tmp_path)
    assert not list(tmp_path.glob("*.bin"))


TRAIN_LOG = """\
Model: t5_small {'d_model': 512}; batch 16, inputs/targets length 128/128 (4096 tokens/step), Adafactor
Measured matmul peak (TF, 2048^2; median): bfloat16 0.098 TFLOP/s (0.091), float32 0.136 TFLOP/s (0.133)
system                               step s   tokens/s     MFU   (best of 1 runs each, in turns)
t2tcli default (auto: float32)        6.200        661   78.5%
t2tcli (mesh-tf) bfloat16             6.439        700  103.8%
t2tcli (mesh-tf) float32              6.100        671   79.8%
HF transformers T5 float32            9.746        420   50.0%
HF transformers T5 bf16 autocast    347.448         12    1.9%   (over 1 step: --step_budget)

t2tcli default / HF T5 best tokens/s: 1.57x
t2tcli best / HF T5 best tokens/s: 1.67x
"""
BASE_FLOAT32 = "t2tcli (mesh-tf) float32             19.900        206   80.5%"  # the default's own configuration
TRAIN_BASE_LOG = """\
Model: t5_base {'d_model': 768}; batch 16, inputs/targets length 128/128 (4096 tokens/step), Adafactor
Measured matmul peak (TF, 2048^2; median): bfloat16 0.095 TFLOP/s (0.090), float32 0.140 TFLOP/s (0.131)
system                               step s   tokens/s     MFU   (best of 1 runs each, in turns)
t2tcli default (auto: float32)       20.000        205   80.1%
HF T5 float32 eager                  30.000        137   53.4%
HF T5 float32 torch.compile          28.000        146   57.2%

t2tcli default / HF T5 best tokens/s: 1.40x
t2tcli best / HF T5 best tokens/s: 1.40x
"""
DECODE_LOG = """\
data                     tokens in  search  system                              sent/s       range    tok/s
9 random words                25.4  greedy  t2t-decode fast (TF)                  19.8   17.4-20.5
9 random words                25.4  greedy  HF generate float32                   12.2   10.5-13.3
9 random words                25.4  greedy  CTranslate2 float32                   21.6   19.3-22.5
9 random words                25.4  greedy  OpenVINO default                      20.1   19.0-21.0
9 random words                25.4  greedy  OpenVINO float32                      22.0   21.2-22.5
9 random words                25.4  greedy  OpenVINO int8                         24.0   23.1-24.4
9 random words, greedy: t2t-decode default / CTranslate2 float32: 1.10x
9 random words, greedy: t2t-decode fast (TF) / HF generate: 1.63x
9 random words, greedy: t2t-decode default / OpenVINO best: 1.08x
9 random words, greedy: t2t-decode ctranslate2 int8, its own share of its decode time: 0.1%-0.2%
"""


def test_a_run_s_logs_become_rows_naming_ours_and_the_peer():
    import report

    train = report.parse_train(TRAIN_LOG)
    assert [(r["ours"], r["ours_figure"], r["peer"], r["peer_figure"], r["ratio"]) for r in train] == [
        ("t2tcli default (auto: float32)", "661 tokens/s", "HF transformers T5 float32", "420 tokens/s", 1.57),
        ("t2tcli (mesh-tf) bfloat16", "700 tokens/s", "HF transformers T5 float32", "420 tokens/s", 1.67),
    ]
    peak = "bfloat16 0.098, float32 0.136"
    assert [(r["mfu"], r["peak"]) for r in train] == [("78.5% / 50.0%", peak), ("103.8% / 50.0%", peak)]
    decode = report.parse_decode(DECODE_LOG)
    assert [(r["case"], r["ours"], r["peer"], r["peer_figure"], r["ratio"]) for r in decode] == [
        ("9 random words, greedy", "t2t-decode default", "CTranslate2 float32", "21.6 sent/s", 1.10),
        ("9 random words, greedy", "t2t-decode fast (TF)", "HF generate", "12.2 sent/s", 1.63),
        ("9 random words, greedy", "t2t-decode default", "OpenVINO float32", "22.0 sent/s", 1.08),
    ]
    assert decode[1]["ours_figure"] == "19.8 sent/s"


def test_the_default_decode_row_shows_the_figure_its_engine_measured():
    """The log names t2t-decode's default only in its ratio lines: the row shows the engine
    row whose ratio is the printed one, not the ratio times the peer rounded anew; OpenVINO's
    best is of its unquantised rows, though its int8 row was faster."""
    import report

    log = (
        "9 random words                25.4  greedy  t2t-decode fast (TF)                  38.2   36.6-42.7\n"
        "9 random words                25.4  greedy  t2t-decode ctranslate2 float32        20.3   19.2-23.3\n"
        "9 random words                25.4  greedy  CTranslate2 float32                   21.3   20.0-21.4\n"
        "9 random words                25.4  greedy  OpenVINO default                      37.4   36.9-37.8\n"
        "9 random words                25.4  greedy  OpenVINO int8                         38.7   37.0-39.4\n"
        "9 random words, greedy: t2t-decode default / CTranslate2 float32: 1.79x\n"
        "9 random words, greedy: t2t-decode default / OpenVINO best: 1.02x\n"
    )
    rows = report.parse_decode(log)
    assert [(r["ours_figure"], r["peer"], r["peer_figure"]) for r in rows] == [
        ("38.2 sent/s", "CTranslate2 float32", "21.3 sent/s"),
        ("38.2 sent/s", "OpenVINO default", "37.4 sent/s"),
    ]


def _decode_results(rates: dict[str, float]) -> list[dict]:
    """bench/decode.py's results for one greedy case, a system per rate (sentences/s)."""
    return [
        {"data": "9 random words", "beam": 1, "system": system, "lines": 10 * rate, "decode_s": 10.0,
         "default_system": "t2t-decode fast (TF)", "own_shares": []}
        for system, rate in rates.items()
    ]  # fmt: skip


def _decode_table(rates: dict[str, float]) -> list[str]:
    """The table lines bench/decode.py prints for those results."""
    return [f"9 random words                25.4  greedy  {system:<40}{rate:>6.1f}" for system, rate in rates.items()]


def test_the_default_decode_row_is_the_one_decode_py_names():
    """Where two engine rows lie within rounding of the printed ratio, only the row
    bench/decode.py names as the default can tell which figure the default measured."""
    import decode
    import report

    rates = {
        "t2t-decode fast (TF)": 21.0,
        "t2t-decode ctranslate2 float32": 20.8,
        "t2t-decode ctranslate2 int8": 25.0,
        "HF generate float32": 12.0,
        "CTranslate2 float32": 21.3,
        "CTranslate2 int8": 26.0,
    }
    table = _decode_table(rates)
    lines = decode.ratios(_decode_results(rates))
    assert "9 random words, greedy: t2t-decode default is t2t-decode fast (TF)" in lines
    rows = report.parse_decode("\n".join(table + lines) + "\n")
    default = next(r for r in rows if r["ours"] == "t2t-decode default")
    assert (default["ours_figure"], default["peer_figure"], default["ratio"]) == ("21.0 sent/s", "21.3 sent/s", 0.99)
    unnamed = [line for line in lines if decode.DEFAULT_IS not in line]
    inferred = report.parse_decode("\n".join(table + unnamed) + "\n")
    assert next(r for r in inferred if r["ours"] == "t2t-decode default")["ours_figure"] == "21.1 sent/s"


def test_a_run_of_some_systems_prints_the_ratios_whose_two_sides_ran():
    """`--systems` runs an A/B of two: the engine auto picks and the other peers did not run."""
    import decode

    lines = decode.ratios(_decode_results({"t2t-decode ctranslate2 int8": 19.0, "CTranslate2 int8": 20.0}))
    assert lines == ["9 random words, greedy: t2t-decode ctranslate2 int8 / CTranslate2 int8 best: 0.95x"]


def test_an_unknown_system_name_exits_with_one_line_naming_the_flag_before_any_work():
    """A mistyped --systems name would otherwise run nothing and print no ratio."""
    import subprocess

    run = subprocess.run(
        [sys.executable, str(BENCH / "decode.py"), "--systems", "CTranslate2 int8", "CTranslate2 int9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr.startswith("--systems: unknown CTranslate2 int9 (known: ")
    assert run.stderr.count("\n") == 1 and "CTranslate2 int8, a batch at a time; OpenVINO default" in run.stderr


def test_a_bench_work_folder_is_the_user_s_or_a_new_private_one(tmp_path, monkeypatch):
    """A fixed /tmp path could be made first by another local user; the default is fresh."""
    import binaries

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    first, second = binaries.work_dir(None, "dtype-losses"), binaries.work_dir(None, "dtype-losses")
    assert first != second and first.parent == tmp_path and first.name.startswith("t2tcli-bench-dtype-losses-")
    assert first.stat().st_mode & 0o777 == 0o700
    assert binaries.work_dir(str(tmp_path / "mine"), "pretrain") == tmp_path / "mine"


@pytest.mark.parametrize(
    "model, family, flags, named",
    [
        ("Intel Xeon", "6", "avx512f avx512_bf16 amx_bf16", "Intel Xeon with amx_bf16 and avx512_bf16 (CPU family 6)"),
        ("AMD EPYC", "25", "avx2 avx512f avx512_bf16", "AMD EPYC with avx512_bf16, no AMX (CPU family 25)"),
        ("AMD EPYC", "25", "avx2 avx512f", "AMD EPYC with avx512f, no avx512_bf16, no AMX (CPU family 25)"),
        ("AMD EPYC", "25", "sse4_2 avx2 fma", "AMD EPYC with avx2, no AVX-512, no AMX (CPU family 25)"),
    ],
)
def test_a_recorded_machine_is_named_by_the_flags_that_set_its_kind(tmp_path, model, family, flags, named):
    """VMs report a bare model name ("AMD EPYC" for both kinds seen on that family), so
    bench/run's record names the flags that decide the kind, from the first processor."""
    import binaries

    cpuinfo = tmp_path / "cpuinfo"
    first = f"processor\t: 0\nmodel name\t: {model}\ncpu family\t: {family}\nflags\t\t: {flags}\n"
    cpuinfo.write_text(first + "\nprocessor\t: 1\nmodel name\t: other\ncpu family\t: 1\nflags\t\t: avx2\n")
    described = binaries.machine(str(cpuinfo))
    assert re.fullmatch(re.escape(named) + r", \d+ cores, \d+ GiB", described), described
    assert "--machine" not in (BENCH / "run").read_text()  # bench/run records with this name


def test_the_dtype_losses_verdict_is_recorded_with_the_spread_it_was_judged_against():
    """bench/dtype_losses.py prints what bench/report.py records: the two means, their
    ratio, and whether bfloat16 sits inside float32's own seed-to-seed spread."""
    import dtype_losses
    import report

    losses = {
        ("float32", 1): {50: 6.0, 100: 5.10},
        ("float32", 2): {50: 6.1, 100: 5.30},
        ("bfloat16", 1): {50: 6.0, 100: 5.15},
        ("bfloat16", 2): {50: 6.2, 100: 5.35},
    }
    text = dtype_losses.summary(losses, [1, 2], "--hparams_set=mtf_transformer_tiny --hparams=a=1,b=2", 100)
    (row,) = report.parse_dtype_losses("$ t2t-train ...\n\n" + text + "\n")
    assert (row["case"], row["ours_figure"], row["peer_figure"], row["ratio"]) == (
        "mtf_transformer_tiny, 100 steps, mean of 2 seeds",
        "dev loss 5.2500",
        "dev loss 5.2000",
        1.01,
    )
    assert (
        row["note"] == "within float32's seed spread: 0.0500 against 0.2000 (bfloat16 minus float32 by seed: "
        "+0.0500, +0.0500)"
    )
    losses["bfloat16", 1][100] = 5.65  # mean 5.50: 0.30 above float32's, whose seeds span 0.20
    (row,) = report.parse_dtype_losses(dtype_losses.summary(losses, [1, 2], "--hparams_set=x --hparams=", 100))
    assert row["note"].startswith("outside float32's seed spread: 0.3000 against 0.2000")
    assert report.parse_dtype_losses(text.split("at step")[0]) == []  # a run cut short records nothing


def test_each_shape_in_a_train_log_is_a_case_of_its_own_against_its_own_peak():
    """`bench/run` runs t5_small's shape, then t5_base's, into one log."""
    import report

    rows = report.parse_train(TRAIN_LOG + "\n" + TRAIN_BASE_LOG.replace("  80.1%", "  80.1%\n" + BASE_FLOAT32))
    small, base = "bfloat16 0.098, float32 0.136", "bfloat16 0.095, float32 0.140"
    assert [(r["case"], r["ours_figure"], r["peer"], r["ratio"], r["mfu"], r["peak"]) for r in rows] == [
        ("t5_small", "661 tokens/s", "HF transformers T5 float32", 1.57, "78.5% / 50.0%", small),
        ("t5_small", "700 tokens/s", "HF transformers T5 float32", 1.67, "103.8% / 50.0%", small),
        ("t5_base", "205 tokens/s", "HF T5 float32 torch.compile", 1.40, "80.1% / 57.2%", base),
    ]
    text = report.render([{"cpu_kind": "AVX2", "machine": "m", "benchmarks": {"train": {
        "measured": "d", "command": "c", "rows": rows}}}])  # fmt: skip
    assert "| ours / peer | MFU, ours / peer | matmul peak of the run, TFLOP/s |" in text
    assert "| 1.40x | 80.1% / 57.2% | bfloat16 0.095, float32 0.140 |" in text
    assert "| train (t5_base) | t2tcli default (auto: float32) | HF T5 float32 torch.compile | 1.40x |" in text


def test_a_run_replaces_only_its_own_kind_and_benchmarks(tmp_path):
    import report

    report.record("AVX2", "an AVX2 box", "bench/run", {"train": TRAIN_LOG}, tmp_path, "2000-01-01")
    report.record("AMX", "an AMX box", "bench/run", {"decode": DECODE_LOG}, tmp_path, "2000-01-02")
    report.record("AVX2", "an AVX2 box", "bench/run --x", {"decode": DECODE_LOG, "datagen": "no rows"}, tmp_path, "d3")
    avx2 = json.loads((tmp_path / "avx2-only.json").read_text())
    assert set(avx2["benchmarks"]) == {"train", "decode"}  # a log without rows keeps nothing and drops nothing
    assert avx2["benchmarks"]["train"]["measured"] == "2000-01-01"
    assert avx2["benchmarks"]["decode"]["command"] == "bench/run --x"
    assert json.loads((tmp_path / "amx.json").read_text())["benchmarks"]["decode"]["measured"] == "2000-01-02"


def test_bench_run_only_runs_the_named_benchmarks_and_refuses_unknown_names():
    import subprocess

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(BENCH / "run"), *args], capture_output=True, text=True, timeout=60)

    listed = run("--only=train,decode", "--list", "--quick")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "bench/train.py --quick",
        "bench/train.py --hparams_set=t5_base --quick",
        "bench/decode.py --quick",
    ]
    assert listed.stderr == "bench/run: results into bench/out/results/, rendered into bench/out/BENCHMARKS.md\n"
    # --quick anywhere among the arguments keeps a smoke run's figures out of the committed files.
    later = run("--only=decode", "--repeats=1", "--quick", "--list")
    assert later.stdout == "bench/decode.py --repeats=1 --quick\n"
    assert later.stderr == listed.stderr
    assert run("--only=decode", "--quic", "--list").stderr == listed.stderr  # as argparse reads it
    everything = run("--list")
    assert everything.stderr == "bench/run: results into bench/results/, rendered into BENCHMARKS.md\n"
    everything = everything.stdout.splitlines()
    assert everything[0] == "bench/datagen.py"
    import report  # bench/run names its benchmarks in bash; they must be the ones the results record

    assert {line.split()[0] for line in everything} == {f"bench/{name}.py" for name in report.PARSERS}
    unknown = run("--only=train,decoder", "--list")  # refused as the arguments are read
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr == (
        "bench/run: --only: no benchmark 'decoder' "
        "(known: datagen datagen_beam train decode int8_agreement dtype_losses)\n"
    )


def test_recording_takes_only_the_named_benchmarks_logs(tmp_path):
    """`bench/run --only=...` leaves the other benchmarks' logs of an earlier run in its log
    folder; they must not be recorded again as measured today."""
    import subprocess

    logs, results = tmp_path / "logs", tmp_path / "results"
    logs.mkdir()
    (logs / "train.log").write_text(TRAIN_LOG)
    (logs / "decode.log").write_text(DECODE_LOG)
    record = [sys.executable, str(BENCH / "report.py"), "record", f"--log_dir={logs}", f"--results_dir={results}"]
    done = subprocess.run([*record, "--benchmarks=decode"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (kind,) = results.glob("*.json")
    assert set(json.loads(kind.read_text())["benchmarks"]) == {"decode"}
    bad = subprocess.run([*record, "--benchmarks=decode,trian"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--benchmarks: unknown trian (known: datagen, " in bad.stderr


def test_benchmarks_md_is_rendered_from_the_committed_results():
    """Every row names its CPU kind and peer, every kind its VM by the flags that set the
    kind; BENCHMARKS.md is what the results render to."""
    import report

    kinds = [json.loads(p.read_text()) for p in sorted(report.RESULTS.glob("*.json"))]
    assert {k["cpu_kind"] for k in kinds} >= {"AVX2", "AVX512-BF16", "AMX"}
    text = report.render(kinds)
    assert (REPO / "BENCHMARKS.md").read_text() == text, "re-render: python bench/report.py render"
    assert len(text.splitlines()) <= 300
    rows = [line for line in text.splitlines() if re.match(r"\| (AVX2-only|AVX512-BF16|AMX) \|", line)]
    assert len(rows) > 20
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert all(cells[:5]) and re.fullmatch(r"[\d.]+(-[\d.]+)?x", cells[4]), line
    named_by = {
        "AMX": "with amx_bf16",
        "AVX512-BF16": "with avx512_bf16, no AMX",
        "AVX-512": "with avx512f, no avx512_bf16",
        "AVX2": "with avx2, no AVX-512",
    }
    for kind in kinds:
        for bench in kind["benchmarks"].values():
            assert bench["measured"] and bench["command"] and bench["rows"]
        assert named_by[kind["cpu_kind"]] in kind["machine"], f"{kind['cpu_kind']}: {kind['machine']}"


def test_each_recorded_command_runs_as_a_shell_line():
    """A results file's command is what a reader pastes to measure again: shell commands
    joined by ';', each bench/run or one of bench/'s scripts under the venv's python, with
    flags only (a label or remark belongs in the note, where the shell does not read it)."""
    import shlex

    import report

    for path in sorted(report.RESULTS.glob("*.json")):
        for name, bench in json.loads(path.read_text())["benchmarks"].items():
            for command in bench["command"].split(";"):
                words = shlex.split(command)
                where = f"{path.name} {name}: {command.strip()!r}"
                if words[:1] == ["bench/run"]:
                    flags = words[1:]
                else:
                    assert words[:1] == [".venv/bin/python"] and len(words) > 1, where
                    assert re.fullmatch(r"bench/\w+\.py", words[1]) and (REPO / words[1]).is_file(), where
                    flags = words[2:]
                assert all(flag.startswith("--") for flag in flags), where


TINY = {"d_model": 8, "d_ff": 16, "num_heads": 2, "d_kv": 4, "layers": 1, "vocab": 64, "dropout_rate": 0.25}


def test_the_peer_trains_with_torch_adafactor_and_our_dropout():
    """The peer at its best: PyTorch's own Adafactor, not transformers' Python one, and the
    dropout the hparams set gives ours (read from it, so the two cannot drift apart)."""
    torch = pytest.importorskip("torch")
    import train

    model, opt, step = train.peer_training(TINY, "float32", batch=2, li=4, lt=4, compiled=False)
    assert type(opt) is torch.optim.Adafactor
    assert model.config.dropout_rate == 0.25
    assert model.training
    before = [p.detach().clone() for p in model.parameters()]
    step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    from t2tcli import registry

    assert train.model_dims("t5_small", 32128)["dropout_rate"] == registry.hparams("t5_small").dropout_rate


def test_the_peer_rows_cover_eager_and_compile_in_both_dtypes():
    import train

    rows = train.select_configs("float32", "", "eager,compile")
    peer = [(kind, dtype) for kind, dtype, _ in rows if kind.startswith("hf")]
    assert peer == [("hf", "float32"), ("hf", "bfloat16"), ("hf_compile", "float32"), ("hf_compile", "bfloat16")]
    assert [k for k, _, _ in train.select_configs("float32", "hf", "eager,compile")] == ["hf"] * 2 + ["hf_compile"] * 2
    assert [(k, d) for k, d, _ in train.select_configs("float32", "hf_compile:bfloat16,t2t:auto", "compile")] == [
        ("t2t", "auto"),
        ("hf_compile", "bfloat16"),
    ]
    assert {k for k, _, _ in train.select_configs("float32", "", "eager")} == {"t2t", "hf"}
    with pytest.raises(SystemExit, match="--peer_modes=jit"):
        train.select_configs("float32", "", "jit")
    with pytest.raises(SystemExit, match="--only: unknown system tf"):
        train.select_configs("float32", "tf", "eager")


def test_profile_traces_one_t2tcli_row_a_dtype_the_default_too():
    """`--only=t2t:auto --profile` traces the default's step too, once for its dtype."""
    import train

    def traced(only: str) -> dict[tuple[str, str], str]:
        return train.traced_rows(train.select_configs("float32", only, "eager"), "float32")

    assert traced("t2t:auto") == {("t2t", "auto"): "float32"}
    assert traced("t2t:auto,hf") == {("t2t", "auto"): "float32"}
    assert traced("") == {("t2t", "bfloat16"): "bfloat16", ("t2t", "float32"): "float32"}
    assert traced("t2t:auto,t2t:bfloat16") == {("t2t", "bfloat16"): "bfloat16", ("t2t", "auto"): "float32"}
    assert traced("hf") == {}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_peer_worker_times_its_steps_eager_and_compiled(dtype):
    """Both peer modes end to end in the worker, at the smallest shape."""
    pytest.importorskip("torch")
    import train

    for compiled in (False, True):
        out = train.worker_hf(TINY, dtype, 2, 4, 4, steps=1, budget=60, compiled=compiled)
        assert out["steps"] == 1 and out["step_time"] > 0


def test_a_built_openvino_venv_is_reused_and_a_half_built_one_is_not(tmp_path, monkeypatch):
    """The peer's venv is built once; a build that stopped part way (no marker) is built again,
    and a failed step comes back as one line naming it, with no marker written."""
    import openvino_peer

    venv, site = tmp_path / "venv", tmp_path / "site"
    site.mkdir()
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho {site}\n")
    python.chmod(0o755)
    steps = []

    def run(step, cmd, timeout):
        steps.append(step)
        return "pip download failed: ERROR: No matching distribution found for openvino" if "download" in step else ""

    monkeypatch.setattr(openvino_peer, "_run", run)
    error = openvino_peer.ensure_venv(venv)
    assert error == "pip download failed: ERROR: No matching distribution found for openvino"
    assert steps == [f"pip download {openvino_peer.OPENVINO} {openvino_peer.OPTIMUM_INTEL}"]
    assert not (venv / openvino_peer.READY).exists()
    shared = (site / openvino_peer.SHARED).read_text().split()
    assert any(Path(p, "torch").is_dir() or Path(p, "pytest").is_dir() for p in shared)  # our site-packages

    monkeypatch.setattr(openvino_peer, "_run", lambda step, cmd, timeout: steps.append(step) or "")
    assert openvino_peer.ensure_venv(venv) == ""
    assert len(steps) == 1 + 4  # download, install, install --no-deps, the import probe
    assert openvino_peer.ensure_venv(venv) == ""  # built: nothing runs again
    assert len(steps) == 5


def test_a_failed_build_step_says_its_last_error_line():
    import openvino_peer

    cmd = [sys.executable, "-c", "import sys; print('Collecting x'); sys.exit('ERROR: no wheel for x')"]
    assert openvino_peer._run("pip install x", cmd, 60) == "pip install x failed: ERROR: no wheel for x"
    assert openvino_peer._run("python -c pass", [sys.executable, "-c", "pass"], 60) == ""


def test_openvino_rows_get_their_ratios():
    import decode

    def row(system, lines_per_s, default="t2t-decode fast (TF)"):
        return {
            "system": system,
            "lines": lines_per_s,
            "decode_s": 1.0,
            "data": "random",
            "beam": 1,
            "default_system": default,
            "own_shares": [],
        }

    rates = {
        "t2t-decode fast (TF)": 300,
        "t2t-decode ctranslate2 float32": 250,
        "t2t-decode ctranslate2 int8": 240,
        "HF generate float32": 100,
        "CTranslate2 float32": 200,
        "CTranslate2 int8": 220,
        "OpenVINO default": 150,
        "OpenVINO float32": 120,
        "OpenVINO int8": 160,
    }
    lines = decode.ratios([row(name, r) for name, r in rates.items()])
    assert "random, greedy: t2t-decode default / OpenVINO best: 2.00x" in lines
    assert "random, greedy: t2t-decode ctranslate2 int8 / OpenVINO int8: 1.50x" in lines
    without = decode.ratios([row(name, r) for name, r in rates.items() if not name.startswith("OpenVINO")])
    assert not [line for line in without if "OpenVINO" in line]


def test_ctranslate2_is_compared_in_its_faster_thread_layout():
    """Each CTranslate2 ratio is against the faster of its two layouts, whichever that is,
    and the report names that row and its figure."""
    import decode
    import report

    rates = {
        "t2t-decode fast (TF)": 30.0,
        "t2t-decode ctranslate2 float32": 25.0,
        "t2t-decode ctranslate2 int8": 24.0,
        "HF generate float32": 10.0,
        "CTranslate2 float32": 20.0,
        "CTranslate2 int8": 22.0,
        "CTranslate2 float32, a batch at a time": 25.0,
        "CTranslate2 int8, a batch at a time": 11.0,
    }
    lines = decode.ratios(_decode_results(rates))
    assert "9 random words, greedy: t2t-decode default / CTranslate2 float32 best: 1.20x" in lines
    assert "9 random words, greedy: t2t-decode ctranslate2 int8 / CTranslate2 int8 best: 1.09x" in lines
    rows = report.parse_decode("\n".join(_decode_table(rates) + lines) + "\n")
    assert [(r["peer"], r["peer_figure"]) for r in rows if r["peer"].startswith("CTranslate2")] == [
        ("CTranslate2 float32, a batch at a time", "25.0 sent/s"),
        ("CTranslate2 int8", "22.0 sent/s"),
    ]


@pytest.mark.parametrize("beam_size", [1, 2])
def test_a_traced_decode_is_split_by_the_sublayer_each_op_sits_in(beam_size):
    """bench/decode_step.py sorts a decode's ops by the scopes the fast engine names them
    with: each kind it prints must hold ops of a real decode, greedy and beam."""
    import argparse

    import decode_step
    import numpy as np

    args = argparse.Namespace(
        hparams_set="mtf_transformer_tiny",
        batch_size=2,
        inputs_length=5,
        max_decode_length=3,
        beam_size=beam_size,
        seed=0,
        narrow=0,
    )
    session, inputs, fetches, _ = decode_step.build(args)
    trace = decode_step.traced(session, fetches, {inputs: np.full([2, 5], 7, np.int32)})
    events = [e for e in json.loads(trace)["traceEvents"] if e.get("ph") == "X"]
    kinds = {step_trace.kind_of_work(e, decode_step.DECODE_KINDS) for e in events}
    assert {label for label, _ in decode_step.DECODE_KINDS} <= kinds


def test_a_narrowed_decode_graph_runs_the_same_ops_on_narrower_tensors():
    """`bench/decode_step.py --narrow` runs the same ops a step, with next to no arithmetic in
    its layers (outside the loop, weights of other widths are built and prepared otherwise)."""
    import argparse
    from collections import Counter

    import decode_step

    from t2tcli.compat import tf

    def graph(narrow: int) -> tuple[Counter, dict[str, int]]:
        args = argparse.Namespace(
            hparams_set="t5_small", batch_size=2, inputs_length=5, max_decode_length=3, beam_size=2, seed=0
        )
        args.narrow = narrow
        session, _, _, _ = decode_step.build(args)
        with session.graph.as_default():
            sizes = {v.name: v.shape.num_elements() for v in tf.compat.v1.global_variables()}
        # The decode loop's body is a function of the graph's library.
        functions = session.graph.as_graph_def().library.function
        ops = Counter(node.op for function in functions for node in function.node_def)
        session.close()
        return ops, sizes

    (full_ops, full_sizes), (ops, sizes) = graph(0), graph(8)
    assert sum(ops.values()) > 500 and ops == full_ops and sizes.keys() == full_sizes.keys()
    assert sum(full_sizes.values()) > 50_000_000 and sum(sizes.values()) < 300_000  # the vocabulary's 32,128 x 8 rows


def test_every_decode_system_runs_the_same_search_each_line_until_it_ends(tmp_path, monkeypatch):
    """bench/decode.py's ratios are fair only if every system is asked for the same thing:
    the same lines in batches of the same size, the same beam, at most the same number of
    new tokens, no sampling, and no minimum length that would hold a peer to the full
    length where t2t-decode stops at EOS."""
    torch = pytest.importorskip("torch")
    import subprocess
    import types

    import decode
    import openvino_peer

    length, beam, batches = 7, 4, [[[5, 6, 1], [7, 1]], [[8, 1]]]
    src = tmp_path / "in.txt"
    src.write_text("a b\nc\nd\n")
    asked: dict[str, dict] = {}

    def ask(system: str, rows: int, **search) -> None:
        seen = asked.setdefault(system, {"lines": 0, "batch": 0})
        seen.update(search, lines=seen["lines"] + rows, batch=max(seen["batch"], rows))

    def generate_for(system):
        def generate(**kw):
            least = kw.get("min_new_tokens", 0) or max(0, kw.get("min_length", 0) - 1)
            rows = len(kw["input_ids"])
            ask(system, rows, beam=kw.get("num_beams", 1), most=kw.get("max_new_tokens"), least=least)
            ask(system, 0, sampled=kw.get("do_sample", False))
            return torch.ones((rows, length + 1), dtype=torch.long)

        generator = types.SimpleNamespace(generate=generate)
        generator.eval = lambda: generator
        return generator

    class Translator:
        def __init__(self, *args, **kwargs):
            pass

        def translate_batch(self, sources, **kw):
            system = "CTranslate2 int8" if kw["asynchronous"] else "CTranslate2 int8, a batch at a time"
            # Defaults as CTranslate2 has them.
            most, least = kw.get("max_decoding_length", 256), kw.get("min_decoding_length", 0)
            ask(system, len(sources), beam=kw.get("beam_size", 2), most=most, least=least)
            ask(system, 0, sampled=kw.get("sampling_topk", 1) != 1)
            done = types.SimpleNamespace(hypotheses=[["x"] * length])
            return [types.SimpleNamespace(result=lambda d=done: d) if kw["asynchronous"] else done for _ in sources]

    def t2t(name, *args):
        flags = dict(a[2:].split("=", 1) for a in args if "=" in a)
        hp = dict(kv.split("=") for kv in flags["decode_hparams"].split(","))
        # What each line's search is asked for; a line ends at its EOS (there is no minimum).
        assert set(hp) <= {"beam_size", "alpha", "batch_size", "max_decode_length", "engine", "quantization"}
        lines = len(Path(flags["decode_from_file"]).read_text().splitlines())
        system = "t2t-decode fast (TF)"
        ask(system, lines, beam=int(hp["beam_size"]), most=int(hp["max_decode_length"]), least=0, sampled=False)
        asked[system]["batch"] = int(hp["batch_size"])
        summary = "3 lines (0 empty), 9 output tokens in 2.0 s (1.0 s start-up): 3.0 sentences/s"
        return subprocess.CompletedProcess(args, 0, "", summary)

    model_for: dict[str, Any] = {}
    model = types.SimpleNamespace(from_pretrained=lambda path, **kw: model_for[path])
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(AutoModelForSeq2SeqLM=model))
    monkeypatch.setitem(sys.modules, "ctranslate2", types.SimpleNamespace(Translator=Translator))
    core = types.SimpleNamespace(get_property=lambda device, key: "bf16")
    monkeypatch.setitem(sys.modules, "openvino", types.SimpleNamespace(Core=lambda: core))
    monkeypatch.setitem(sys.modules, "optimum", types.ModuleType("optimum"))
    monkeypatch.setitem(sys.modules, "optimum.intel", types.SimpleNamespace(OVModelForSeq2SeqLM=model))
    monkeypatch.setattr(decode, "binary", t2t)
    monkeypatch.setattr(decode, "token_names", lambda ct2_dir, b: [str(i) for i in range(16)])
    monkeypatch.setattr(openvino_peer, "_peer", lambda venv, cmd, ir, req, timeout: openvino_peer._decode_here(ir, req))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    args = types.SimpleNamespace(max_decode_length=length, batch_size=2)
    paths = {"model_dir": tmp_path / "model", "hf_dir": tmp_path / "hf", "int8": tmp_path / "ct2", "work": tmp_path}
    paths |= {"ov_venv": tmp_path / "venv", "ov_float": tmp_path / "ov", "ov_int8": tmp_path / "ov"}
    systems = ["t2t-decode fast (TF)", "HF generate float32", "CTranslate2 int8", "CTranslate2 int8, a batch at a time"]
    systems += ["OpenVINO default"]
    for name in systems:
        model_for[str(paths["hf_dir"])] = model_for[str(paths["ov_float"])] = generate_for(name)
        decode.measure(name, beam, src, batches, paths, args)
    assert list(asked) == systems
    want = {"lines": 3, "batch": 2, "beam": beam, "most": length, "least": 0, "sampled": False}
    assert {name: want for name in asked} == asked


def test_systems_swap_ends_every_other_turn():
    """Under a steady drift, a system that always ran first would meet a faster or slower
    machine than the one that always ran last: over two turns every system's slots add up
    to the same."""
    import turns

    systems = ["ours", "peer eager", "peer compiled"]
    orders = [turns.in_turn(systems, turn) for turn in range(4)]
    assert orders[0] == orders[2] == systems
    assert orders[1] == orders[3] == systems[::-1]
    slots = {name: sum(order.index(name) for order in orders[:2]) for name in systems}
    assert len(set(slots.values())) == 1, slots
    assert systems == ["ours", "peer eager", "peer compiled"]  # the caller's list is left as it was


@pytest.mark.parametrize("hparams_set", ["t5_small", "t5_v1_1_small"])
def test_the_packed_weights_step_is_each_decoder_layer_s_products_then_the_logits(hparams_set):
    """`bench/packed_weights.py` times one decoder step's products: per layer the joined
    q, k and v, the output projections, encoder-decoder attention's query and a (gated)
    FFN with the engine's zero units, then the logits; none missed or counted twice."""
    import packed_weights

    from t2tcli import registry

    hp = registry.hparams(hparams_set)
    inner, gated = hp.num_heads * hp.d_kv, 2 if hp.ffn_activation.startswith("gated-") else 1
    products = packed_weights.step_products(hp, 32128, ffn_padding=16)
    assert len(products) == 6 * hp.num_decoder_layers + 1
    assert products[-1] == ("logits", hp.d_model, 32128)
    d, f = hp.d_model, hp.d_ff + 16
    per_layer = d * 3 * inner + inner * d + d * inner + inner * d + d * gated * f + f * d
    assert sum(n_in * n_out for _, n_in, n_out in products) == hp.num_decoder_layers * per_layer + d * 32128


def test_packed_weights_times_the_engine_s_packed_product_against_its_matmul():
    """The two sides of `bench/packed_weights.py` must be what they say: the same products of
    the same kernels, the packed side on oneDNN's fused MatMul (the engine's packed product),
    the held side on MatMul, in a session configured as the benchmark's and the engine's."""
    import numpy as np
    import packed_weights

    from t2tcli.compat import tf

    tf1 = tf.compat.v1
    products = [("ffn wi", 8, 12), ("logits", 8, 20)]
    rng = np.random.default_rng(0)
    kernels = [rng.standard_normal((n_in, n_out)).astype(np.float32) for _, n_in, n_out in products]
    outputs, ran = {}, {}
    for side in packed_weights.SIDES:
        graph, init, fetches = packed_weights.build(side, products, kernels, 3, tf.float32, transposed=True)
        with tf1.Session(graph=graph, config=packed_weights.session_config()) as session:
            session.run(init)
            metadata = tf1.RunMetadata()
            options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
            outputs[side] = session.run(fetches, options=options, run_metadata=metadata)
        stats = metadata.step_stats.dev_stats
        ran[side] = [n.timeline_label.split(" = ")[-1].split("(")[0] for d in stats for n in d.node_stats]
    for held, packed in zip(outputs["held"], outputs["packed"], strict=True):
        np.testing.assert_allclose(packed, held, rtol=1e-5, atol=1e-5)
    assert ran["packed"].count("_MklNativeFusedMatMul") == len(products), ran["packed"]
    assert "_MklNativeFusedMatMul" not in ran["held"], ran["held"]


def test_each_session_runs_its_rounds_in_turn_order_and_keeps_its_best_median(monkeypatch):
    """What bench/projections.py and bench/packed_weights.py time: every session's rounds in
    each turn's order (reversed every other turn), a median per turn, the best one kept."""
    import turns

    calls = []

    class Session:
        def __init__(self, name, seconds):
            self.name, self.seconds = name, seconds

        def run(self, fetches):
            calls.append(self.name)
            clock[0] += self.seconds.pop(0)

    clock = [0.0]
    runs = {"a": (Session("a", [1.0, 3.0, 2.0, 2.0]), None), "b": (Session("b", [5.0, 5.0, 1.0, 1.0]), None)}
    monkeypatch.setattr(turns.time, "perf_counter", lambda: clock[0])
    best = turns.best_session_medians(runs, rounds=2, turns=2)
    assert calls == ["a", "a", "b", "b", "b", "b", "a", "a"]
    assert best == {"a": 2.0, "b": 1.0}


@pytest.mark.parametrize(
    "variable, value, label",
    [
        (None, None, "AVX512-BF16"),
        ("CT2_FORCE_CPU_ISA", "AVX512", "AVX512-BF16"),  # the instruction set t2t-decode sets here itself
        ("CT2_FORCE_CPU_ISA", "AVX2", "AVX512-BF16 held back by CT2_FORCE_CPU_ISA=AVX2"),
        ("ONEDNN_MAX_CPU_ISA", "AVX2", "AVX512-BF16 held back by ONEDNN_MAX_CPU_ISA=AVX2"),
    ],
)
def test_decode_bench_names_what_holds_a_cpu_back_and_not_its_own_isa_choice(monkeypatch, variable, value, label):
    import decode
    import test_numerics

    from t2tcli.model import hardware

    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo="": test_numerics.AVX512_BF16)
    for name in decode.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    if variable:
        monkeypatch.setenv(variable, value)
    assert decode.cpu_kind() == label


def test_decode_layout_refuses_a_flag_it_does_not_know(monkeypatch, capsys):
    """Only its workers pass arguments on (to t2t-decode); a mistyped flag given to the
    benchmark itself must stop it rather than be dropped while the default run goes ahead."""
    import decode_layout

    monkeypatch.setattr(sys, "argv", ["decode_layout.py", "--beams=4", "--lenght=64"])
    monkeypatch.setattr(decode_layout.bench_decode, "build_models", lambda *a: pytest.fail("the run went ahead"))
    with pytest.raises(SystemExit) as stopped:
        decode_layout.main()
    assert stopped.value.code == 2
    assert "unrecognized arguments: --lenght=64" in capsys.readouterr().err


@pytest.mark.parametrize("variants", ["layouts", "attention", "packing", "log-sum-exp"])
def test_each_decode_layout_variant_forces_its_choices_however_the_engine_asks(monkeypatch, variants):
    """bench/decode_layout.py's worker replaces kernel_layout's policies; the engine asks them
    with a machine, a width or a search, and each must answer the forced value."""
    import decode_layout

    from t2tcli.decode import fast_kernels
    from t2tcli.model import hardware, kernel_layout

    machine = hardware.detect()
    for forced in decode_layout.VARIANTS[variants].values():
        for choice in forced:  # restored after the test
            monkeypatch.setattr(kernel_layout, choice, getattr(kernel_layout, choice))
        decode_layout.force(forced)
        answers = dataclasses.asdict(kernel_layout.for_machine(machine, 2048))
        answers["beam_attention_on_onednn"] = fast_kernels.beam_attention_on_onednn()
        answers["log_sum_exp_by_softmax"] = fast_kernels.log_sum_exp_by_softmax()
        for choice, value in forced.items():
            assert answers[choice] == value, (forced, choice)
            if choice == "packed_kernels":
                assert answers["packed_kernels_in_beam_search"] == value, forced
