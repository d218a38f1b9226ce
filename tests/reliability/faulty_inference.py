"""The inference process with the faults of `tests.reliability.faulty_app` injected."""

from __future__ import annotations

import sys

import tests.reliability.faulty_app  # noqa: F401  (patches OpenVINO's infer)
from app.runtime.child import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
