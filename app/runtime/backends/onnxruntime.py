"""ONNX Runtime: the reference backend for output checks.

Sized: one session per stream, each with its own intra-op pool of T threads and no spinning; beside them, where there
are several streams, one **wide** session on all their threads (slot ``streams``), which the pool gives a chunk while
the others idle (`app.pool.schedule`): a lone request uses every core. Its audio is the streams' bit for bit (the
thread count splits each kernel's output, not its sums: tests/app/runtime/test_wide.py), and it maps the saved graph's
packed weights, so it costs a session's heap. Runtime defaults (benchmark baseline): one session with ONNX Runtime's
default threading, shared by all slots (``run`` is thread-safe).

With ``optimized_dir`` the graph ONNX Runtime optimizes at the first open is saved there and later opens load it
with optimization off: about half the time, and bit-identical audio (checked in
tests/app/runtime/test_optimized_graph.py). The saved graph may hold
CPU-specific layouts (NCHWc), so its name carries the ONNX Runtime version, the model file's
identity and the CPU's instruction set family. ``baked_optimized_dir`` is a read-only place looked in
first: the image build saves the graph there (`python -m app.tune.build`), so that a container whose
writable cache starts empty does not optimize the model at its first start (opening a saved graph takes a
fraction of the time of optimizing and saving it).

A graph saved here at run time (``prepacked``, the default) also holds the weights as the kernels packed them, in a data
file beside it (ONNX Runtime's ``session.save_external_prepacked_constant_initializers``) that the next open maps
instead of packing again: it opens sooner, with bit-identical audio, and the sessions of one process that open it (one
per stream) map the same pages instead of each packing a copy on its heap, which takes much less anonymous memory
(docs/experiments.md). The packed layout is the kernels' choice for this very CPU, so such a graph is named for a digest
of its feature flags, not its family; the image keeps the portable graph (`app.tune.build`), which is opened when no
packed one was saved on this CPU.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.forms import timed
from app.runtime import cpu
from app.runtime.backends.base import Inference, Resolved, last_line, package_dirs
from app.sizing import PoolShape
from lifecycle import pagecache

log = logging.getLogger(__name__)

class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self, model_path: Path, shape: PoolShape, *, runtime_defaults: bool,
                 optimized_dir: Path | None = None, baked_optimized_dir: Path | None = None,
                 prepacked: bool = True) -> None:
        self._model_path = model_path
        self._shape = shape
        self._runtime_defaults = runtime_defaults
        self._optimized_dir = optimized_dir
        self._baked_optimized_dir = baked_optimized_dir if optimized_dir is not None else None
        self._open_packed = prepacked
        """Open a graph saved with its packed weights for this CPU where there is one (module docstring)."""
        self._save_packed = prepacked and not (optimized_dir is not None and in_memory(optimized_dir))
        """Save the graph with its packed weights; not into a file system held in memory (a container's tmpfs
        /tmp), where the data file would be memory the container is billed."""
        self._opened: Path | None = None
        """The saved graph the sessions were opened from, when one was."""
        self._sessions: list[Any] = []
        self._wide: Any = None  # the wide session (module docstring), or its Future while it opens
        self._held: list[Any] = []
        self._running: Counter[int] = Counter()
        """Inferences running per session (by id): which open session a slot still opening may borrow."""
        self._lock = threading.Lock()
        """A session opened ahead of the next load while released (`hold`): that load serves with it first."""
        self._outputs: list[str] = ["audio"]
        """What each inference fetches: the audio, and the durations where the model outputs them."""

    @property
    def loaded(self) -> bool:
        return bool(self._sessions)

    def load(self) -> Resolved:
        import onnxruntime as ort

        start = time.perf_counter()
        if self._runtime_defaults:
            session = ort.InferenceSession(str(self._model_path), providers=["CPUExecutionProvider"])
            self._sessions = [session] * self._shape.streams
            streams, threads = 1, 0
        else:
            self._sessions = self._sized_sessions(ort, self._shape.streams)
            streams, threads = self._shape.streams, self._shape.threads
            if self.wide_slot is not None and self._wide is None:
                # Opened behind the streams: until it is, the wide slot borrows an idle stream (`_session`).
                opener = ThreadPoolExecutor(1, thread_name_prefix="ort-open")
                self._wide = opener.submit(self._sized_session, ort, self._shape.threads)
                opener.shutdown(wait=False)
        # A timed model (app.forms.timed) has the durations as its second output; read from a session already open (the
        # held wide one at a restore: a stream's may still be opening).
        opened = self._wide if self._wide is not None and not isinstance(self._wide, Future) else self._session(0)
        names = [o.name for o in opened.get_outputs()]
        self._outputs = ["audio", *[n for n in names if timed.is_duration_output(n)][:1]]
        return Resolved(
            backend=self.name, slots=len(self._sessions), streams=streams, threads=threads, precision="f32",
            load_s=time.perf_counter() - start, from_cache=None,
            extra={"onnxruntime": ort.__version__, "model": str(self._model_path),
                   "wide_threads": self._shape.threads if self.wide_slot is not None else 0},
        )

    @property
    def wide_slot(self) -> int | None:
        """The wide session's slot (module docstring); None where the pool has one stream or runs the runtime's
        defaults."""
        return self._shape.streams if not self._runtime_defaults and self._shape.streams > 1 else None

    @property
    def wide_open(self) -> bool:
        """Whether the wide session has opened (until then its slot borrows an idle stream's session)."""
        return self._wide is not None and (not isinstance(self._wide, Future) or self._wide.done())

    def hold(self) -> None:
        """Open one session now, ahead of the next load: a process waiting released for a restore
        (`app.runtime.messages.Shed`) keeps its heap, some tens of MB, while the weights it maps are paged out with
        everything else that process read. The restore then opens one session fewer, and the request waiting on it
        runs on this one while the others open (docs/performance.md). It is the wide session where there is one: the
        request that wakes an instance finds the pool idle, and runs on every thread."""
        import onnxruntime as ort

        if not self._runtime_defaults and not self._held and self._wide is None:
            if self.wide_slot is not None:
                self._wide = self._sized_session(ort, self._shape.threads)
            else:
                self._held = [self._sized_session(ort)]

    def _sized_sessions(self, ort: Any, count: int) -> list[Any]:
        """``count`` sessions, the held one first (`hold`), the others opened side by side: creating one is native
        code that releases the GIL, so on 2 CPUs two open in about the time of one. The first opens alone while the
        optimized graph is still to be made (it writes the file the others then open)."""
        held, self._held = self._held[:count], []
        if held or self._wide is not None:
            # A restore: the request waiting on it runs on the held session while the others open (`infer_timed`
            # waits for a slot's own session), and its weights are read back from disk in one sweep meanwhile.
            pagecache.read_ahead(_data_files(self._opened) if self._opened is not None else [])
            pool = ThreadPoolExecutor(max(1, count - len(held)), thread_name_prefix="ort-open")
            opening = [pool.submit(self._sized_session, ort) for _ in range(count - len(held))]
            pool.shutdown(wait=False)
            return held + opening
        optimized = self.optimized_path(ort.__version__)
        first = [] if optimized is None or self._saved(optimized, ort.__version__) else [self._sized_session(ort)]
        with ThreadPoolExecutor(max(1, count - len(first)), thread_name_prefix="ort-open") as pool:
            rest = list(pool.map(lambda _: self._sized_session(ort), range(count - len(first))))
        return first + rest

    def _sized_session(self, ort: Any, threads: int = 0) -> Any:
        """One stream's session, or with ``threads`` the wide one."""
        def options() -> Any:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads or self._shape.threads_per_stream
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            # ONNX Runtime plans one block per input shape for all of a run's tensors (a memory pattern) and keeps
            # arena chunks sized for those blocks: with Kokoro's ever-changing lengths a one-thread session held
            # 380 against 222 MB after a 120-token chunk, at the same speed and bit-identical audio without it
            # (docs/performance.md).
            opts.enable_mem_pattern = False
            # Workers sleep at once: spinning burns CPU that the bill counts while other streams need it (a one-thread
            # stream has no workers to spin).
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            return opts

        providers = ["CPUExecutionProvider"]
        optimized = self.optimized_path(ort.__version__)
        if optimized is None:
            return ort.InferenceSession(str(self._model_path), sess_options=options(), providers=providers)
        saved = self._saved(optimized, ort.__version__)
        if saved is not None:
            opts = options()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            try:
                session = ort.InferenceSession(str(saved), sess_options=opts, providers=providers)
                self._opened = saved
                return session
            except Exception as exc:  # damaged or foreign: optimize again from the model below
                log.warning("could not open the optimized graph %s (%s); optimizing the model again", saved,
                            last_line(exc))
        opts = options()
        partial = optimized.with_name(f".{optimized.name}.{os.getpid()}")
        data = f"{optimized.stem}.{os.getpid()}-{time.monotonic_ns()}.data"
        try:
            optimized.parent.mkdir(parents=True, exist_ok=True)
            opts.optimized_model_filepath = str(partial)
            if self._save_packed:
                # The graph names its data file, written first under a name no other save uses (never over a
                # file a session may map: truncating a mapped file faults its readers); the graph's rename
                # below then publishes both whole.
                opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", data)
                opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                              "1024")
                opts.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
            session = ort.InferenceSession(str(self._model_path), sess_options=opts, providers=providers)
            os.replace(partial, optimized)  # whole or not at all
            self._opened = optimized
            # A replaced graph's data: unlinked, it stays readable where a session maps it. (Should two processes
            # save at once, the graph may be left naming a data file the other removed: the next open fails, and
            # optimizes and saves again.)
            for stale in _data_files(optimized) if self._save_packed else []:
                if stale.name != data:
                    stale.unlink(missing_ok=True)
        except Exception as exc:  # noqa: BLE001 - read-only or full: serve unoptimized-at-rest, as before
            # ONNX Runtime reports a failed save (a full disk) as its own InvalidProtobuf, not OSError; a model
            # that cannot load at all fails again just below, and that error is raised.
            log.warning("could not save the optimized graph to %s (%s)", optimized, last_line(exc))
            partial.unlink(missing_ok=True)
            (optimized.parent / data).unlink(missing_ok=True)
            opts = options()
            session = ort.InferenceSession(str(self._model_path), sess_options=opts, providers=providers)
        return session

    def optimized_path(self, version: str) -> Path | None:
        """Where the optimized graph for this model, runtime and CPU is saved (None: not kept)."""
        if self._optimized_dir is None:
            return None
        return self._optimized_dir / self._graph_name(version)

    def _saved(self, optimized: Path, version: str) -> Path | None:
        """The saved graph to open, if there is one: a graph with its weights packed for this CPU (baked, then
        saved here), then the portable one (baked, then saved here where this backend saves portable graphs: a
        portable graph left in an on-disk cache by an earlier version is passed over, so that a packed one is
        saved in its place)."""
        baked = self._baked_optimized_dir
        portable = self._graph_name(version, prepacked=False)
        candidates = []
        if self._open_packed:
            packed = self._graph_name(version, prepacked=True)
            candidates += [baked / packed if baked is not None else None, optimized.parent / packed]
        candidates.append(baked / portable if baked is not None else None)
        if not self._save_packed:
            candidates.append(optimized.parent / portable)
        return next((p for p in candidates if p is not None and p.is_file()), None)

    def _graph_name(self, version: str, *, prepacked: bool | None = None) -> str:
        stem = f"{graph_prefix(self._model_path)}ort{version}-{cpu.family()}"
        if self._save_packed if prepacked is None else prepacked:
            return f"{stem}-{cpu.flags_digest()}.packed.onnx"
        return f"{stem}.onnx"

    def unload(self) -> None:
        self._sessions = []
        self._wide = None
        self._held = []

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        return self.infer_timed(slot, tokens, style, speed).audio

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        feed = {"tokens": tokens, "style": style, "speed": np.array([speed], dtype=np.float32)}
        session = self._session(slot)
        with self._lock:
            self._running[id(session)] += 1
        try:
            found = session.run(self._outputs, feed)
        finally:
            with self._lock:
                self._running[id(session)] -= 1
        durations = np.asarray(found[1], dtype=np.int64).reshape(-1) if len(found) > 1 else None
        return Inference(np.asarray(found[0], dtype=np.float32).reshape(-1), durations)

    def _session(self, slot: int) -> Any:
        """``slot``'s session; while it is still opening behind a held one (`_sized_sessions`), an open one that no
        inference runs on (the pool hands out slots in any order, and the request that caused a restore must not wait
        for a session to open while the held one idles; ``run`` is thread-safe either way), else it once open."""
        if slot == self.wide_slot:
            wide = self._wide
            if isinstance(wide, Future) and wide.done():
                wide = self._wide = wide.result()
            if wide is not None and not isinstance(wide, Future):
                return wide
            return self._idle() or self._session(0)  # the same bytes on fewer threads (module docstring)
        session = self._sessions[slot]
        if not isinstance(session, Future):
            return session
        if session.done():
            opened = self._sessions[slot] = session.result()
            return opened
        return self._idle() or session.result()

    def _idle(self) -> Any:
        """An open stream session that no inference runs on, or None."""
        with self._lock:
            idle = [s for s in self._sessions if not isinstance(s, Future) and not self._running[id(s)]]
        return idle[0] if idle else None

    def files(self) -> list[Path]:
        found = [self._model_path]
        if self._optimized_dir is not None and self._optimized_dir.is_dir():
            found.extend(p for p in self._optimized_dir.iterdir() if p.is_file())
        if self._opened is not None and self._opened not in found:
            found.append(self._opened)  # the baked graph
            # and its packed weights' data file: the parts a session does not map (the weights as stored, which
            # the packed copies replace) would stay in the page cache, billed to the container
            found.extend(_data_files(self._opened))
        return found


def page_cache_roots(writable: Path) -> list[Path]:
    """Where an ONNX Runtime process may have read files it did not list: its optimized graphs
    and ONNX Runtime's own libraries (a baked graph lies under the baked root, which OpenVINO's roots hold)."""
    return [writable / "onnxruntime", *package_dirs("onnxruntime")]


def graph_prefix(model_path: Path) -> str:
    """How the names of the graphs saved for ``model_path`` begin (its stem, size and mtime), whatever the runtime
    version, CPU and packing."""
    stat = model_path.stat()
    return f"{model_path.stem}-{stat.st_size}-{int(stat.st_mtime)}-"


def saved_graphs(model_path: Path, folder: Path) -> list[Path]:
    """The graphs saved in ``folder`` for ``model_path``, portable and packed, with their packed weights' data
    files."""
    if not folder.is_dir():
        return []
    prefix = graph_prefix(model_path)
    graphs = [p for p in folder.iterdir() if p.name.startswith(prefix) and p.suffix == ".onnx"]
    return [*graphs, *(d for g in graphs for d in _data_files(g))]


def _data_files(graph: Path) -> list[Path]:
    """The data files saved beside ``graph`` for it (its packed weights; more than one where it was replaced)."""
    return [p for p in graph.parent.iterdir() if p.name.startswith(f"{graph.stem}.") and p.suffix == ".data"]


def in_memory(path: Path, mounts: Path = Path("/proc/self/mounts")) -> bool:
    """Whether ``path`` (or the nearest folder above it that exists) lies on a file system held in memory (tmpfs,
    ramfs), by the longest mount point above it; False where the mount table cannot be read."""
    try:
        table = [line.split() for line in mounts.read_text().splitlines()]
    except OSError:
        return False
    found = path.resolve()
    best, kind = "", ""
    for fields in table:
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (found == Path(point) or Path(point) in found.parents) and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind in ("tmpfs", "ramfs")
