"""Where a traced training step's time goes, read from the Chrome trace `bench/train.py
--profile` writes (TensorFlow's step stats of one step).

Op time summed by type says what the CPU was busy with, but on 2 cores two matmuls at
once count twice and a lone element-wise op once, so it hides what a step waits for.
The wall-time breakdown answers that: the moments when some matmul runs (the part a
faster kernel or a bfloat16-native CPU shortens) against those when none does, and
what runs then, sorted into the kinds of work that can be fused, moved or overlapped.
"""

from __future__ import annotations

import re
from pathlib import Path

# (kind of work, pattern on "op-name op-type"), first match wins.
Kinds = tuple[tuple[str, re.Pattern], ...]
# A training step's: the scopes t2tcli's model and mesh-tensorflow name their ops with.
KINDS: Kinds = (
    ("loss", re.compile(r"token_loss|/loss/|cross_entropy|logsumexp")),
    ("optimizer", re.compile(r"adafactor|/adam|ResourceApply|AssignSub|AssignAdd|AssignVariable", re.I)),
    ("input pipeline", re.compile(r"Iterator|input_fn")),
    ("layer norm", re.compile(r"layer_norm|rms_norm")),
    ("dropout", re.compile(r"dropout")),
    ("FFN activation", re.compile(r"DenseReluDense/\w+/(?:relu|gelu|silu|swish)")),
    ("attention: softmax, bias, mask, layout", re.compile(r"(?:SelfAttention|EncDecAttention)/")),
    ("embedding lookup", re.compile(r"gather_rows|embedding/")),
    ("residual adds", re.compile(r" (?:AddV2|Add)$")),
    ("casts", re.compile(r" Cast$")),
    ("transposes", re.compile(r"Transpose")),
)


def _op(event: dict) -> str:
    return event.get("args", {}).get("op") or event.get("name", "?")


def _is_matmul(event: dict) -> bool:
    kind = _op(event)
    return "Einsum" in kind or "MatMul" in kind


def kind_of_work(event: dict, kinds: Kinds = KINDS) -> str:
    """The label of one op event among `kinds`, else 'other: <op type>'."""
    key = f"{event.get('args', {}).get('name', event.get('name', ''))} {_op(event)}"
    for label, pattern in kinds:
        if pattern.search(key):
            return label
    return f"other: {_op(event)}"


def wall_time_breakdown(events: list[dict], kinds: Kinds = KINDS) -> dict:
    """Microseconds of the trace's span with some matmul running, with ops but no matmul
    (split by kind of work, each moment shared among the ops running then), and with no
    op at all."""
    out: dict = {"span": 0.0, "matmul": 0.0, "idle": 0.0, "no_matmul": {}}
    ops = [e for e in events if e.get("ph") == "X" and e.get("dur", 0) > 0]
    if not ops:
        return out
    edges = sorted(
        [(e["ts"], 1, i) for i, e in enumerate(ops)] + [(e["ts"] + e["dur"], -1, i) for i, e in enumerate(ops)]
    )
    running: set[int] = set()
    matmuls = 0
    last = edges[0][0]
    for when, change, index in edges:
        gap = when - last
        if gap > 0:
            out["span"] += gap
            if not running:
                out["idle"] += gap
            elif matmuls:
                out["matmul"] += gap
            else:
                for other in running:
                    label = kind_of_work(ops[other], kinds)
                    out["no_matmul"][label] = out["no_matmul"].get(label, 0.0) + gap / len(running)
        last = when
        if change > 0:
            running.add(index)
        else:
            running.discard(index)
        matmuls += change if _is_matmul(ops[index]) else 0
    return out


def wall_time_lines(events: list[dict], top: int = 12, kinds: Kinds = KINDS) -> list[str]:
    parts = wall_time_breakdown(events, kinds)
    span = parts["span"] or 1.0
    no_matmul = sum(parts["no_matmul"].values())
    lines = [
        f"trace span {parts['span'] / 1e6:.3f} s: some matmul running {parts['matmul'] / 1e6:.3f} s"
        f" ({100 * parts['matmul'] / span:.1f}%), ops but no matmul {no_matmul / 1e6:.3f} s"
        f" ({100 * no_matmul / span:.1f}%), no op {parts['idle'] / 1e6:.3f} s",
        "with no matmul running, by kind of work (ms, share of the span):",
    ]
    for label, micros in sorted(parts["no_matmul"].items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {label:<40}{micros / 1e3:>8.1f} {100 * micros / span:>6.1f}%")
    return lines


def op_time_summary(trace: Path, events: list[dict], top: int = 15) -> list[str]:
    """The traced step's op time by op type, largest first (ops of 2 cores overlap, so
    shares are of the summed op time, not of the step's wall time)."""
    by_type: dict[str, float] = {}
    for event in events:
        if event.get("ph") == "X" and "dur" in event:
            kind = event.get("args", {}).get("op") or event.get("name", "?")
            by_type[kind] = by_type.get(kind, 0.0) + event["dur"] / 1e6
    total = sum(by_type.values())
    lines = [f"summed op time {total:.2f} s in {trace.name}"]
    for kind, seconds in sorted(by_type.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {kind:<32}{seconds:>8.3f} s {100 * seconds / total:>6.1f}%")
    return lines


def attention_softmax_gaps(events: list[dict]) -> list[str]:
    """For each attention layer of the traced step's forward pass, the time from its logits
    einsum's end to its weighted sum's start: the softmax, bias, cast and dropout, which
    run with no matmul of that layer beside them."""
    einsums: dict[str, list[tuple[float, float]]] = {}
    softmax: dict[str, list[tuple[float, float]]] = {}
    layer = re.compile(r"((?:en|de)coder/block_\d+/layer_\d+/(?:SelfAttention|EncDecAttention))/")
    for event in events:
        name = event.get("args", {}).get("name", "")
        found = layer.match(name)
        if event.get("ph") != "X" or not found or "gradients" in name:
            continue
        span = (event["ts"] / 1e3, (event["ts"] + event.get("dur", 0)) / 1e3)
        if "Einsum" in event["args"].get("op", ""):
            einsums.setdefault(found.group(1), []).append(span)
        elif "/softmax" in name or "/reduce_logsumexp" in name:
            softmax.setdefault(found.group(1), []).append(span)
    gaps = []
    for key, spans in softmax.items():
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        before = [e for _, e in einsums.get(key, []) if e <= first]
        after = [s for s, _ in einsums.get(key, []) if s >= last]
        if before and after:
            gaps.append(min(after) - max(before))
    if not gaps:
        return []
    gaps.sort()
    return [
        f"attention layers' logits-to-weighted-sum time (forward): median {gaps[len(gaps) // 2]:.2f} ms"
        f" over {len(gaps)} layers, {sum(gaps):.1f} ms in all"
    ]


def report(trace: Path, events: list[dict], kinds: Kinds = KINDS) -> list[str]:
    """All of the above for one trace, as printed lines."""
    return op_time_summary(trace, events) + attention_softmax_gaps(events) + wall_time_lines(events, kinds=kinds)
