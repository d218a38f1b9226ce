"""A stand-in inference process that dies slowly: it answers loads, and on its first inference closes the
pipe it answers on and lingers `LINGER_S` before exiting. So does a killed inference process whose threads
take their time to end: its pipes close before the kernel reports it gone (`test_proxy_restart`)."""

from __future__ import annotations

import os
import sys
import time
from multiprocessing.connection import Connection

from app.runtime import messages
from app.runtime.backends.base import Resolved

LINGER_S = 2.0


def main(argv: list[str]) -> None:
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    inbox.recv()  # the spec
    while True:
        match inbox.recv():
            case messages.Load():
                outbox.send(messages.Loaded(Resolved("fake", 1, 1, 1, "f32", 0.0, None)))
            case messages.Infer():
                outbox.close()
                time.sleep(LINGER_S)  # the server's load may still reach this process's pipe meanwhile
                os._exit(1)
            case messages.Exit():
                os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
