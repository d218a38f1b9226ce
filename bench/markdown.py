"""Markdown cells and tables for the benchmark's reports: figures as text, n/a where there is none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.figures import finite


def num(value: Any, digits: int = 2, unit: str = "") -> str:
    if not finite(value):
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def usd(value: Any) -> str:
    if not finite(value):
        return "n/a"
    return f"${value:,.4f}" if abs(value) >= 0.01 else f"${value:.6f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
