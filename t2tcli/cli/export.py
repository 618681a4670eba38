"""t2t-export (its work lands with its own module)."""

from __future__ import annotations

from t2tcli.cli import common
from t2tcli.errors import UserError


def main() -> None:
    raise UserError("not available yet")


def run() -> None:
    common.run(main)
