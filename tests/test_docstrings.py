"""The library's comments, docstrings and strings say why, not what was measured when.

A figure measured on one machine on one day goes stale in code, where nobody re-measures
it; BENCHMARKS.md (rendered from bench/results/) keeps figures with their CPU kind, date
and command, and docs/performance-design.md the reasons. This test holds t2tcli/ to that:
no dates, no machine names, no throughput or timing figures, no measured speed ratios.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted((REPO / "t2tcli").rglob("*.py"))

FORBIDDEN = {
    "a date": re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b"),
    "a FLOPS figure": re.compile(r"\d[\d.,]*\s*[GT]FLOP", re.I),
    "a throughput figure": re.compile(r"\d[\d.,]*\s*(tokens|sentences|steps|rows|lines)/s\b"),
    "a timing": re.compile(r"\b\d+(\.\d+)?\s?ms\b|\b\d+(\.\d+)? s (a|per) step\b|\b\d+(\.\d+)? s (against|instead)\b"),
    "a speed ratio": re.compile(
        r"\b\d+(\.\d+)?(-\d+(\.\d+)?)?x (slower|faster|as fast|as long)\b|\b\d+(\.\d+)?-\d+(\.\d+)?x\b"
    ),
    "a machine name": re.compile(r"\b(EPYC|Xeon|Sapphire Rapids|Ryzen|CPU family \d+|\d+-core)\b"),
}


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal (docstrings included) of `path`."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            found.append((token.start[0], token.string))
    return found


def offences(path: Path) -> list[str]:
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    out = []
    for line, text in _prose(path):
        for what, pattern in FORBIDDEN.items():
            match = pattern.search(text)
            if match:
                out.append(f"{shown}:{line}: {what} ({match.group(0)!r})")
    return out


def test_the_patterns_catch_what_they_are_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Ran at 100 GFLOPS on 2026-11-27 (2-core AMD EPYC), 661 tokens/s."""\n'
        'SLOWDOWN = "1.02-1.3x"  # a step took 7.21 s against 6.66, 3.4 ms per call\n'
        "# bfloat16 was 12x slower there\n"
        'RATE = f"{rate:.1f} tokens/s"  # formats a figure: fine\n'
        "MASK = 0x1F  # 0x01-0x1f: control characters, fine\n",
        encoding="utf-8",
    )
    found = " ".join(offences(sample))
    for what in FORBIDDEN:
        assert what in found, what
    assert "sample.py:4" not in found and "sample.py:5" not in found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_measured_figures_dates_or_machines_in_the_library(path):
    assert not offences(path), "move figures to BENCHMARKS.md and reasons to docs/performance-design.md:\n" + "\n".join(
        offences(path)
    )
