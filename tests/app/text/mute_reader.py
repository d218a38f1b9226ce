"""A reader process that reads its requests and never answers (a reader hung in a dictionary load, say)."""

from __future__ import annotations

import sys
import time

if __name__ == "__main__":
    for _ in sys.stdin:
        time.sleep(3600)
