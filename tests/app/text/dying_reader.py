"""A reader process that dies on the first request it reads while the file ``DYING_READER_MARKER`` names exists
(removing it first, so the next process lives), as a reader killed in the middle of a call would; else the real
reader."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.text import readers

if __name__ == "__main__":
    marker = Path(os.environ["DYING_READER_MARKER"])
    if marker.exists():
        sys.stdin.readline()
        marker.unlink()
        os._exit(9)
    readers.main()
