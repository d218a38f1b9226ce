"""The inference state the lifecycle releases and restores: the runtime's model and the text front end.

`InferenceState` satisfies `lifecycle.protocol.Reclaimable` without knowing the lifecycle exists, so `lifecycle/`
stays independent of `app/`; the engine uses the same runtime and front end to serve requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.runtime.protocol import Runtime
from app.text.frontend import Frontend

log = logging.getLogger(__name__)


class InferenceState:
    """The runtime and the front end, built and dropped together.

    Contract: the lifecycle manager calls `restore`, `release`, `files` and `intact` from a worker thread, one at a
    time and never while a request uses the state; the server's lifespan calls `close` once at shutdown. A lock
    serializes them all the same. `restore` loads the front end in a thread of its own (``frontend-load``) beside
    the runtime's load and joins it before it returns.
    """

    def __init__(self, runtime: Runtime, frontend: Frontend, *, default_lang: str,
                 standby: Callable[[], None] | None = None) -> None:
        self.runtime = runtime
        self.frontend = frontend
        self.default_lang = default_lang
        """The language whose reader a restore loads."""
        self.standby = standby
        """Called at the end of each release (`app.runtime.proxy.ProcessRuntime.idle_standby`: the next inference
        process started and waiting); None: nothing is kept."""
        self._lock = threading.Lock()

    def restore(self) -> dict[str, float]:
        """Build inference state and the front end, in parallel; seconds per part.

        The runtime's load is native code that releases the GIL, the front end's is mostly Python: run side by
        side, a restore costs the longer of the two, not their sum.
        """
        with self._lock:
            timings: dict[str, float] = {}
            start = time.perf_counter()
            frontend: threading.Thread | None = None
            if not self.frontend.loaded:
                def load_frontend() -> None:
                    try:
                        timings["frontend_s"] = self.frontend.load((self.default_lang,))
                    except Exception:
                        log.exception("the text front end failed to load")

                frontend = threading.Thread(target=load_frontend, name="frontend-load", daemon=True)
                frontend.start()
            try:
                if not self.runtime.loaded:
                    self._load_runtime(timings)
            finally:
                if frontend is not None:
                    frontend.join()
            if not self.frontend.loaded:
                raise RuntimeError("the text front end failed to load (see the log)")
            timings["total_s"] = time.perf_counter() - start
            return timings

    def _load_runtime(self, timings: dict[str, float]) -> None:
        loaded = self.runtime.load()
        timings["backend_s"] = loaded.load_s
        timings["warm_up_s"] = loaded.warm_up_s
        log.info("backend ready: %s", loaded)

    def intact(self) -> bool:
        """False when the inference state vanished on its own (the inference process died)."""
        return self.runtime.intact()

    def release(self) -> None:
        with self._lock:
            self.runtime.unload()
            self.frontend.release_languages()
            if self.standby is not None:
                self.standby()

    def close(self) -> None:
        """At shutdown: end the inference process (and wait for it) rather than leave it to notice."""
        with self._lock:
            self.runtime.unload()
            self.frontend.release_languages()

    def files(self) -> list[Path]:
        return self.runtime.files()
