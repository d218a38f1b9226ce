"""A stand-in inference process that closes the pipe its `Spec` would come on, says so with one byte, and exits
when the server closes its other pipe: a process started early that died before its Spec reached it
(`test_early`)."""

from __future__ import annotations

import os
import select
import sys


def main(argv: list[str]) -> None:
    os.close(int(argv[0]))
    out = int(argv[1])
    os.write(out, b"x")
    waiting = select.poll()
    waiting.register(out, 0)  # POLLERR: the reading end closed
    waiting.poll()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
