"""One tuning trial: load one candidate exactly as the server would, drive every slot, measure.

``python -m app.tune.trial JOB.json`` is started by the tuner (`app.tune.tuner`), one process per
trial, so a runtime that crashes (OpenVINO has segfaulted in ``infer`` with bf16) only fails its trial,
and the memory figure is the trial's own. The job names the candidate, the model, the compile cache and
a ``.npz`` of model inputs (``<key>/tokens``, ``<key>/style``); the trial writes the audio of every input
(``<key>``) next to a JSON outcome.

What is measured: after one untimed inference per slot (first-call costs belong to the load), every input
runs once with as many threads as the candidate has slots, so the pool is at full load; CPU time is the
whole process's (every runtime thread), as the bill counts it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import resource
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.audio import SAMPLE_RATE
from app.runtime import backends
from app.sizing import PoolShape
from app.tune.manifest import Candidate
from lifecycle import trim

log = logging.getLogger(__name__)


def run(job: dict[str, Any]) -> dict[str, Any]:
    # The server's malloc settings (`lifecycle.trim`), so that the peak RSS the tuner prices is the one the
    # server's inference process will have.
    malloc = trim.configure_malloc(int(job.get("malloc_arenas", 0)), int(job.get("malloc_mmap_threshold_kb", 0)))
    if job.get("affinity"):  # tuning for a smaller budget than the machine's (`python -m app tune --cpus`)
        os.sched_setaffinity(0, job["affinity"])
    candidate = Candidate.from_json(job["candidate"])
    shape = PoolShape(candidate.streams, candidate.threads_per_stream)
    cache = Path(job["cache_dir"]) if job.get("cache_dir") else None
    backend = backends.create(candidate.backend, Path(job["model_path"]), shape, runtime_defaults=False,
                              precision=candidate.precision, cache_dir=cache,
                              shape_cache=int(job.get("shape_cache", 0)),
                              optimized_dir=Path(job["optimized_dir"]) if job.get("optimized_dir") else None)
    resolved = backend.load()
    with np.load(job["work"]) as archive:
        keys = sorted({name.rsplit("/", 1)[0] for name in archive.files})
        items = [(key, archive[f"{key}/tokens"], archive[f"{key}/style"]) for key in keys]
    shortest = min(items, key=lambda item: item[1].shape[1])
    for slot in range(resolved.slots):
        backend.infer(slot, shortest[1], shortest[2], 1.0)

    repeats = max(1, int(job.get("repeats", 1)))
    todo: queue.Queue[tuple[str, npt.NDArray[np.int64], npt.NDArray[np.float32]]] = queue.Queue()
    for _ in range(repeats):
        for item in items:
            todo.put(item)
    free: queue.Queue[int] = queue.Queue()
    for slot in range(resolved.slots):
        free.put(slot)
    audio: dict[str, npt.NDArray[np.float32]] = {}
    samples = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        while not errors:
            try:
                key, tokens, style = todo.get_nowait()
            except queue.Empty:
                return
            slot = free.get()
            try:
                out = backend.infer(slot, tokens, style, 1.0)
            except BaseException as exc:  # surfaced after join: a failed inference fails the trial
                errors.append(exc)
                return
            finally:
                free.put(slot)
            with lock:
                audio.setdefault(key, out)
                samples[0] += len(out)

    threads = [threading.Thread(target=worker, name=f"trial-{i}") for i in range(resolved.slots)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    if errors:
        raise RuntimeError(f"inference failed: {type(errors[0]).__name__}: {errors[0]}") from errors[0]
    np.savez(job["audio_out"], **audio)  # type: ignore[arg-type]  # numpy's stub types **kwds badly
    audio_s = samples[0] / SAMPLE_RATE
    return {"candidate": candidate.name, "efficiency": audio_s / cpu_s, "throughput": audio_s / wall_s,
            "audio_s": audio_s, "cpu_s": cpu_s, "wall_s": wall_s, "load_s": resolved.load_s,
            "peak_rss_mb": _peak_rss_mb(), "malloc": malloc,
            "resolved": {k: v for k, v in asdict(resolved).items() if k != "extra"}}


def _peak_rss_mb() -> float:
    """This process's own peak RSS (``VmHWM``). Not ``ru_maxrss``: Linux carries that across ``exec`` from
    the parent, so every trial would report at least the tuner's own peak (1.8 GB once it made a form)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    job = json.loads(Path(argv[0]).read_text())
    outcome = run(job)
    Path(job["outcome_out"]).write_text(json.dumps(outcome) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
