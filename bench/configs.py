"""The server configurations the harness compares, all served by the same `app` code and front end.

- ``ort-defaults`` / ``ov-defaults``: the runtime's own thread and stream defaults (`Options.runtime_defaults`)
  and OpenVINO's own per-shape kernel cache size (`Options.shape_cache` -1, served by `bench.variant`),
  as a server that never sized its runtime would run. Four requests may infer at once, as in the most used peer
  server (Kokoro-FastAPI's semaphore of four).
- ``ort-sized``: ONNX Runtime with one session per stream, sized from the CPUs (the server's rule).
- ``ov-sized-SxT``: OpenVINO with S streams of T threads: a small grid around the server's rule (which is
  marked ``auto``): one thread per core, and fewer, wider streams. One stream of one thread is measured in
  process only (the raw runtime's own shape, bench/inprocess.py): as a server on a small machine it would
  leave cores idle.
- ``complete``: the complete system: OpenVINO sized by the rule, compile cache on, lifecycle on (memory is
  released after the quiet window and restored on demand).
- ``foreign``: the same server as an instance on a CPU it has no tuning for would run it: ``TTS_BACKEND=auto``, an
  empty cache directory, no tuning manifest for this machine (`Options.shipped_tuning` False: the manifests shipped
  in the package are ignored), server defaults otherwise (compile cache, lifecycle).
- ``fastkokoro``, ``kokoro-pi``: the servers users would install instead (`bench.peers`), each from PyPI into its
  own virtual environment, on the same model file and voices, at its own recommended settings.

Only the complete system has the compile cache and the lifecycle: the others are the baselines and the
sizing grid, with everything else equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.runtime.spec import Options
from app.sizing import CpuBudget, PoolShape, shape_for
from bench import variant
from bench.peers import PEERS

Kind = Literal["defaults", "sized", "complete", "foreign", "peer"]
DEFAULTS_SLOTS = 4
"""Requests that may infer at once under runtime defaults (Kokoro-FastAPI's semaphore)."""


@dataclass(frozen=True)
class ServerConfig:
    """One way to run the server."""

    name: str
    """Short label used in tables, files and ``--configs``."""
    title: str
    """Human description for the report."""
    backend: Literal["onnxruntime", "openvino", "auto"]
    """``auto``: the server chooses (the foreign instance)."""
    kind: Kind
    streams: int
    """Slots (under runtime defaults), or runtime streams."""
    threads_per_stream: int
    """0 under runtime defaults."""
    compile_cache: bool = False
    lifecycle: bool = False
    auto: bool = False
    """True for the shape the server's own sizing rule picks."""
    precision: str = "f32"
    tuned_dir: str = ""
    """Where the tuner's manifest is (complete system only): the server then runs ``TTS_BACKEND=auto`` and
    finds its choice there itself, as a deployed image does; ``backend`` and the shape say what it chose."""

    @property
    def runtime_defaults(self) -> bool:
        return self.kind == "defaults"

    @property
    def shape(self) -> str:
        if self.kind == "foreign":
            return "the server's choice"
        if self.kind == "peer":
            return f"1 session x {self.threads_per_stream} threads"
        return "runtime defaults" if self.runtime_defaults else f"{self.streams}x{self.threads_per_stream}"

    @property
    def peer(self) -> bool:
        """Another project's server (`bench.peers`), not this one."""
        return self.kind == "peer"

    def options(self) -> Options:
        """How the server runs its model here where that is not the server's way (`bench.variant`)."""
        # The defaults baseline keeps OpenVINO's own per-shape kernel cache as well.
        return Options(runtime_defaults=self.runtime_defaults, shape_cache=-1 if self.runtime_defaults else 0,
                       compile_cache=self.compile_cache, shipped_tuning=self.kind != "foreign")

    def env(self, *, quiet_window_s: float, max_requests: int) -> dict[str, str]:
        """The ``TTS_*`` settings that make the server run this configuration, and its options (`bench.variant`)."""
        env = {
            "TTS_BACKEND": self.backend,
            "TTS_STREAMS": str(self.streams),
            "TTS_THREADS_PER_STREAM": str(self.threads_per_stream),
            "TTS_QUIET_WINDOW_S": str(quiet_window_s) if self.lifecycle else "0",
            # Enough that closed-loop clients are never refused: refusals are not throughput (a variant that sets
            # TTS_MAX_REQUESTS=0 measures the server's own admission in real time instead).
            "TTS_MAX_REQUESTS": str(max_requests),
            **variant.launch_env(self.options()),
        }
        if self.tuned_dir:
            env.update({"TTS_BACKEND": "auto", "TTS_BAKED_CACHE_DIR": self.tuned_dir, "TTS_STREAMS": "0",
                        "TTS_THREADS_PER_STREAM": "0"})
        return env


FOREIGN = ServerConfig("foreign", "This server as a foreign instance: TTS_BACKEND=auto, an empty cache, no tuning "
                       "manifest for this CPU (the shipped ones ignored)", "auto", "foreign", 0, 0,
                       compile_cache=True, lifecycle=True)
"""Streams and threads 0: the server's own sizing rule, as a user who sets nothing gets."""


def parse_pool(text: str) -> PoolShape:
    """``"8x2"`` as 8 streams of 2 threads; ValueError for anything else."""
    streams, sep, threads = text.strip().lower().partition("x")
    if not sep or not streams.isdigit() or not threads.isdigit() or int(streams) < 1 or int(threads) < 1:
        raise ValueError(f"expected STREAMSxTHREADS such as 8x2, got {text!r}")
    return PoolShape(streams=int(streams), threads_per_stream=int(threads))


def grid(budget: CpuBudget, pool: PoolShape | None = None) -> list[tuple[int, int]]:
    """Streams x threads to try: the rule's shape (or ``pool`` in its place), one thread per core, and fewer, wider
    streams."""
    cores = budget.cores
    auto = pool or shape_for(budget)
    shapes = {(auto.streams, auto.threads_per_stream), (cores, 1)}
    for threads in (2, 4):
        if cores >= threads:
            shapes.add((cores // threads, threads))
    return sorted(shapes, key=lambda s: (-s[0], s[1]))


def all_configs(budget: CpuBudget, pool: PoolShape | None = None) -> list[ServerConfig]:
    """Every configuration for this machine, in the order the runner measures them. ``pool`` stands in for the
    rule's shape (``bench run --pool``): the study's 8 x 2 pool on a machine whose rule picks another, say."""
    auto = pool or shape_for(budget)
    configs = [
        ServerConfig("ort-defaults", "ONNX Runtime, runtime defaults", "onnxruntime", "defaults", DEFAULTS_SLOTS, 0),
        ServerConfig("ort-sized", f"ONNX Runtime, {auto.streams} sessions x {auto.threads_per_stream} threads",
                     "onnxruntime", "sized", auto.streams, auto.threads_per_stream, auto=True),
        ServerConfig("ov-defaults", "OpenVINO, runtime defaults", "openvino", "defaults", DEFAULTS_SLOTS, 0),
    ]
    for streams, threads in grid(budget, pool):
        is_auto = (streams, threads) == (auto.streams, auto.threads_per_stream)
        configs.append(ServerConfig(f"ov-sized-{streams}x{threads}",
                                    f"OpenVINO, {streams} streams x {threads} threads" + (" (the rule)" if is_auto
                                                                                          else ""),
                                    "openvino", "sized", streams, threads, auto=is_auto))
    configs.append(ServerConfig("complete", f"Complete system: OpenVINO {auto.streams}x{auto.threads_per_stream}"
                                " + compile cache + lifecycle", "openvino", "complete", auto.streams,
                                auto.threads_per_stream, compile_cache=True, lifecycle=True, auto=True))
    configs.append(FOREIGN)
    for peer in PEERS.values():
        threads = peer.threads(budget.cpus)
        configs.append(ServerConfig(peer.name, f"{peer.title} {peer.version} (PyPI), {threads} threads",
                                    "onnxruntime", "peer", 1, threads))
    return configs


def select(configs: Sequence[ServerConfig], names: Sequence[str]) -> list[ServerConfig]:
    """The named configurations in measuring order; ``ort-defaults`` is always kept (it is the reference)."""
    known = {c.name: c for c in configs}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown configuration(s) {unknown}; known: {', '.join(known)}")
    wanted = set(names) | {"ort-defaults"}
    return [c for c in configs if c.name in wanted]
