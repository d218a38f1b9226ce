"""The raw runtime, in process: the ceiling the servers are measured against, and the audio the checks compare.

A job loads one backend exactly as a server configuration would (same `app` code, same settings), plans every
corpus utterance into model chunks with the server's own front end and chunker, then synthesizes every chunk
once with ``concurrency`` threads sharing the backend's slots, and reports audio-seconds per CPU-second of the
process. No HTTP, no queueing, no text front end inside the measurement: what is left is the runtime itself.

Two audio figures: what the model made (``audio_s``, ``efficiency``), and what a listener of the server gets
(``delivered_audio_s``, ``delivered_efficiency``): each chunk with the model's edge silence trimmed as the
server trims it at chunk joins (`app.silence`, in the worker thread as there). The model pads every chunk
with about 0.27 s before and 0.6-0.75 s after the speech; the server keeps 0.05 s before and the pause the
boundary calls for after (the last chunk keeps its tail), so it sends fewer seconds than the model made. A
server's audio-s per CPU-s compares like with like against the delivered figure; the raw one counts padding the
server never sends. The audio kept for the output checks is
the model's, untrimmed.

Jobs run in a process of their own (``python -m bench.inprocess --jobs FILE``, started by the runner), one
after another, so their threads and memory die with it and the runner's CPU time never mixes in. Each job
writes ``<name>.json`` (an `Outcome`) and ``<name>.npz`` (the audio of every chunk, keyed
``<utterance id>/<chunk index>``), or ``<name>.error``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import queue
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app import silence
from app.runtime.spec import Options
from app.services import build_engine
from app.settings import Settings
from app.sizing import read_budget
from bench import corpus as corpus_mod

log = logging.getLogger(__name__)
SAMPLE_RATE = 24_000


@dataclass(frozen=True)
class Job:
    """What to load and how hard to drive it."""

    name: str
    """Label; also the stem of the output files."""
    backend: str
    streams: int
    """Slots (and, unless ``runtime_defaults``, runtime streams); 0 sizes from the CPUs, as the server does."""
    threads_per_stream: int
    runtime_defaults: bool
    concurrency: int
    """Threads submitting chunks at once."""
    model_path: Path
    cache_dir: Path
    """The server's ``TTS_CACHE_DIR``: the OpenVINO compile cache lives in its ``openvino`` folder."""
    compile_cache: bool
    """Use (and fill) that compile cache; otherwise compile from the ONNX file."""
    corpus: Path
    items: tuple[str, ...] = ()
    """Utterance ids to use; empty means all."""
    precision: str = "f32"
    tuned_dir: str = ""
    """The tuner's manifest folder: the job then resolves the tuned choice (form included) as the server does."""

    def as_json(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        return cls(**{**data, "model_path": Path(data["model_path"]), "cache_dir": Path(data["cache_dir"]),
                      "corpus": Path(data["corpus"]), "items": tuple(data.get("items", ()))})


def argv(jobs_file: Path, out_dir: Path) -> list[str]:
    """Command line that runs the jobs listed in ``jobs_file`` (JSON) one after another in a fresh interpreter."""
    return [sys.executable, "-m", "bench.inprocess", "--jobs", str(jobs_file), "--out-dir", str(out_dir)]


@dataclass(frozen=True)
class Outcome:
    """What one job measured."""

    name: str
    audio_s: float
    cpu_s: float
    """CPU time of the whole process (all threads) while the chunks ran."""
    wall_s: float
    efficiency: float
    """Audio-seconds (as the model made them) per CPU-second."""
    throughput: float
    """Audio-seconds per wall-second."""
    chunks: int
    concurrency: int
    load_s: float
    resolved: dict[str, Any]
    """How the runtime resolved streams, threads and precision."""
    peak_rss_mb: float
    """Peak RSS of the process so far (jobs before this one in the same process included)."""
    delivered_audio_s: float = 0.0
    """Audio-seconds after the server's edge-silence trim (what its clients receive for the same chunks)."""
    delivered_efficiency: float = 0.0
    """``delivered_audio_s`` per CPU-second: the figure a server's efficiency compares with."""


@dataclass(frozen=True)
class _Work:
    key: str
    tokens: npt.NDArray[np.int64]
    style: npt.NDArray[np.float32]
    pause_s: float | None
    """Silence the server keeps after this chunk's speech (None: the request's last chunk keeps its tail)."""


def run(job: Job) -> tuple[Outcome, dict[str, npt.NDArray[np.float32]]]:
    """Load, plan, synthesize every chunk; returns the figures and the audio per chunk."""
    settings = Settings(backend="auto" if job.tuned_dir else job.backend, precision=job.precision,
                        baked_cache_dir=Path(job.tuned_dir) if job.tuned_dir else None,
                        streams=0 if job.tuned_dir else job.streams,
                        threads_per_stream=0 if job.tuned_dir else job.threads_per_stream,
                        model_path=job.model_path, cache_dir=job.cache_dir)
    options = Options(runtime_defaults=job.runtime_defaults, compile_cache=job.compile_cache,
                      in_process=True)  # CPU time is read from this process
    built = build_engine(settings, read_budget(), options)
    engine = built.engine
    parts = built.state.restore()
    assert engine.resolved is not None
    corpus = corpus_mod.load(job.corpus)
    if job.items:
        corpus = corpus.subset(job.items)
    work: list[_Work] = []
    for utterance in corpus.utterances:
        plan = engine.plan(utterance.text, utterance.voice, 1.0)
        spoken = [k for k, c in enumerate(plan.chunks) if engine.vocab.ids(c)]  # as the server skips the others
        for k in spoken:
            phonemes = plan.chunks[k]
            ids = engine.vocab.ids(phonemes)
            pause_s = None if k == spoken[-1] else silence.PAUSE_S[silence.boundary(phonemes)]
            work.append(_Work(f"{utterance.id}/{k}", engine.vocab.tokens(phonemes), plan.voice.style_for(len(ids)),
                              pause_s))
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(engine.resolved.slots):
        slots.put(slot)
    # One untimed inference per slot: first-call allocations are a load cost, not a per-request one.
    shortest = min(work, key=lambda w: w.tokens.shape[1])
    for slot in range(engine.resolved.slots):
        engine.runtime.infer(slot, shortest.tokens, shortest.style, 1.0)

    audio: dict[str, npt.NDArray[np.float32]] = {}
    delivered: dict[str, int] = {}
    todo: queue.Queue[_Work] = queue.Queue()
    for item in work:
        todo.put(item)
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            slot = slots.get()
            try:
                made = audio[item.key] = engine.runtime.infer(slot, item.tokens, item.style, 1.0)
                # In the worker while it holds the slot, as the engine trims (app.engine.Engine._infer).
                delivered[item.key] = len(silence.trim(made, pause_s=item.pause_s))
            except BaseException as exc:  # surfaced after join: a crashed thread must fail the job
                errors.append(exc)
                return
            finally:
                slots.put(slot)

    threads = [threading.Thread(target=worker, name=f"inprocess-{i}") for i in range(job.concurrency)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    built.state.release()
    gc.collect()
    if errors:
        raise RuntimeError(f"{job.name}: inference failed") from errors[0]
    audio_s = sum(len(a) for a in audio.values()) / SAMPLE_RATE
    delivered_s = sum(delivered.values()) / SAMPLE_RATE
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    resolved = dataclasses.asdict(engine.resolved)
    outcome = Outcome(name=job.name, audio_s=audio_s, cpu_s=cpu, wall_s=wall, efficiency=audio_s / cpu,
                      throughput=audio_s / wall, chunks=len(work), concurrency=job.concurrency,
                      load_s=float(parts.get("backend_s", 0.0)), resolved=resolved, peak_rss_mb=peak_rss_mb,
                      delivered_audio_s=delivered_s, delivered_efficiency=delivered_s / cpu)
    return outcome, audio


def write(out: Path, outcome: Outcome, audio: dict[str, npt.NDArray[np.float32]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(dataclasses.asdict(outcome), indent=2, default=str) + "\n")
    np.savez_compressed(out.with_suffix(".npz"), **audio)  # type: ignore[arg-type]  # numpy's stub types **kwds badly


def read(out: Path) -> tuple[dict[str, Any], dict[str, npt.NDArray[np.float32]]]:
    """The outcome (as JSON) and audio a finished job left at ``out``."""
    outcome: dict[str, Any] = json.loads(out.with_suffix(".json").read_text())
    with np.load(out.with_suffix(".npz")) as archive:
        audio = {key: np.asarray(archive[key], dtype=np.float32) for key in archive.files}
    return outcome, audio


def launch(jobs: Sequence[Job], out_dir: Path, log_dir: Path,
           progress: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` one after another in one fresh process (the runner's side of `main`); each job's outcome as
    JSON, or ``{"name", "error"}``. The audio stays in ``out_dir`` for the output checks."""
    if not jobs:
        return {}
    progress(f"    in process: {', '.join(j.name for j in jobs)}")
    jobs_file = out_dir / f"jobs-{jobs[0].name}.json"
    jobs_file.write_text(json.dumps([j.as_json() for j in jobs], indent=1))
    log_path = log_dir / f"inprocess-{jobs[0].name}.log"
    with open(log_path, "wb") as sink:
        subprocess.run(argv(jobs_file, out_dir), stdout=sink, stderr=subprocess.STDOUT, check=False)
    found: dict[str, dict[str, Any]] = {}
    for job in jobs:
        error = out_dir / f"{job.name}.error"
        if error.is_file() or not (out_dir / f"{job.name}.json").is_file():
            text = error.read_text().strip() if error.is_file() else f"no output; see {log_path}"
            progress(f"    in process: {job.name} FAILED: {text}")
            found[job.name] = {"name": job.name, "error": text}
            continue
        outcome, _ = read(out_dir / job.name)
        progress(f"    in process: {job.name} ({job.backend}, "
                 f"{'runtime defaults' if job.runtime_defaults else f'{job.streams}x{job.threads_per_stream}'}"
                 f", {job.concurrency} threads): {outcome['efficiency']:.2f} audio-s per CPU-s, "
                 f"{outcome['audio_s']:.0f} audio-s")
        found[job.name] = outcome
    return found


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__)
    parser.add_argument("--jobs", type=Path, required=True, help="JSON list of jobs (see Job)")
    parser.add_argument("--out-dir", type=Path, required=True, help="writes NAME.json and NAME.npz per job")
    parsed = parser.parse_args(args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    failed = 0
    # Several jobs share one interpreter (imports are most of a small job's time); each loads its own engine.
    for data in json.loads(parsed.jobs.read_text()):
        job = Job.from_json(data)
        error_file = parsed.out_dir / f"{job.name}.error"
        error_file.unlink(missing_ok=True)
        try:
            outcome, audio = run(job)
        except Exception as exc:  # the next job still runs; the runner reports this one as failed
            log.exception("job %s failed", job.name)
            error_file.write_text(f"{type(exc).__name__}: {exc}\n")
            failed += 1
            continue
        write(parsed.out_dir / job.name, outcome, audio)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
