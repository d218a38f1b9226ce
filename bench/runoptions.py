"""What shapes a benchmark run (`bench.runner`): its options, recorded in results.json so a run can be repeated, and
the names of the configurations the output checks read against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench import corpus as corpus_mod

REFERENCE = "ort-defaults"
RERUN = "ort-defaults-rerun"
ONE_BY_ONE = "ov-1x1"
"""In-process job only: OpenVINO, one stream of one thread, one request at a time."""


@dataclass(frozen=True)
class Options:
    """Everything that shapes a run; recorded in results.json so a run can be repeated."""

    out: Path
    cache_dir: Path
    """Work folder root: assembled model, compile caches, logs and audio of each run."""
    configs: tuple[str, ...] = ()
    """Configuration names; empty means all."""
    clients: tuple[int, ...] = (1, 2, 4, 8)
    ramp_s: float = 6.0
    window_s: float = 40.0
    idle_s: float = 120.0
    quiet_window_s: float = 45.0
    """The complete system's quiet window (the server's default)."""
    release_cycles: int = 10
    """Cycles the first-audio-after-release figure is taken over."""
    growth_cycles: int = 50
    """Cycles the no-growth check runs over (the first ``release_cycles`` of them give first audio)."""
    cold_starts: int = 3
    """Process cold starts with, and again without, the compile cache."""
    cold_without_cache: bool = True
    """Also the cold starts without the compile cache (each a fresh compile: 12-20 s on 2 cores)."""
    corpus: Path = corpus_mod.DEFAULT
    items: tuple[str, ...] = ()
    """Utterance ids; empty means the whole corpus."""
    drain_s: float = 8.0
    """Longest wait past a window for every client's in-flight chunk (bench/load.py)."""
    ceiling_1x1: bool = True
    """Also measure OpenVINO 1 stream x 1 thread in process, one thread (the raw runtime's own efficiency)."""
    memory_interval_s: float = 2.0
    max_requests: int = 32
    quick: bool = False
    command: str = ""
    tune: bool = True
    """Run ``python -m app tune`` first, and serve the complete system with its choice (``TTS_BACKEND=auto``)."""
    tuned_dir: Path | None = None
    """Reuse the manifest a tuning run left here instead of tuning again."""
    pool: str = ""
    """``SxT``: the pool shape that stands in for the sizing rule's (the sized and complete configurations); empty: the
    rule's, from this machine's CPU budget."""
    voice: str = ""
    """Every utterance in this voice (a comparison with the peers speaks one voice they all offer); empty: the
    corpus's own."""

    @property
    def serves_tuned(self) -> bool:
        """Whether the complete system serves a tuned choice: tuned here first, or read from ``tuned_dir`` (which a
        quick run, untuned by default, honours too)."""
        return self.tune or self.tuned_dir is not None

    def estimate_s(self, n_configs: int, complete: bool) -> float:
        """Rough wall time on a quiet 2-core machine (start-up and in-process jobs that overlap idle excluded)."""
        per_config = 25.0 + len(self.clients) * (self.ramp_s + self.window_s + self.drain_s + 5.0) + max(
            self.idle_s, 110.0)
        cold = self.cold_starts * (30.0 if self.cold_without_cache else 10.0)
        lifecycle = (max(self.release_cycles, self.growth_cycles) * 5.0 + cold) if complete else 0
        return n_configs * per_config + lifecycle + 20.0


def quick_options(out: Path, cache_dir: Path, command: str = "") -> Options:
    """A few minutes: two configurations, a corpus subset, short windows, few cycles, no cold start without the
    compile cache (`Options.estimate_s` says how long)."""
    return Options(out=out, cache_dir=cache_dir, configs=(REFERENCE, "complete"), clients=(1, 2), ramp_s=2.0,
                   window_s=10.0, idle_s=6.0, quiet_window_s=3.0, release_cycles=3, growth_cycles=3, cold_starts=1,
                   cold_without_cache=False, items=("s1", "m1"), drain_s=4.0, ceiling_1x1=False, memory_interval_s=1.0,
                   quick=True, command=command, tune=False)
