"""Prometheus metrics, in a registry per app (no module globals, so tests can build many apps)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from lifecycle.manager import Event

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tts_requests", "Speech requests by outcome", ["outcome"], registry=r)
        self.audio_seconds = Counter("tts_audio_seconds", "Seconds of audio synthesized", registry=r)
        self.first_audio = Histogram("tts_first_audio_seconds", "Request arrival to first audio bytes",
                                     buckets=LATENCY_BUCKETS, registry=r)
        self.request_seconds = Histogram("tts_request_seconds", "Request arrival to last audio bytes",
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.transition_seconds = Histogram("tts_lifecycle_transition_seconds",
                                            "Duration of the work each lifecycle transition ends",
                                            ["target"], buckets=LATENCY_BUCKETS, registry=r)
        self.send_timeouts = Counter("tts_send_timeouts", "Streamed responses aborted because the client "
                                     "took no bytes for TTS_SEND_TIMEOUT_S", registry=r)
        self.inference_retries = 0
        """Requests asked again of a fresh inference process (`app.http.speech.start`)."""
        self._reader_retries: Callable[[], int] = lambda: 0
        r.register(_RetriesCollector(self))
        self.memory_freed = Gauge("tts_lifecycle_last_release_freed_bytes",
                                  "Billable bytes freed by the last release", registry=r)

    def observe_lifecycle(self, event: Event) -> None:
        self.transition_seconds.labels(event.transition.target.value).observe(event.seconds)
        if event.transition.target.value == "released":
            self.memory_freed.set(event.memory_before.billable - event.memory_after.billable)

    def watch(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Export the lifecycle's live state and meters at scrape time."""
        self.registry.register(_SnapshotCollector(snapshot))

    def watch_pool(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Export the pool's admission at scrape time: what it admits now, and the real-time capacity behind it."""
        self.registry.register(_PoolCollector(snapshot))

    def watch_readers(self, retries: Callable[[], int]) -> None:
        """Export the language readers' retries (`app.text.readers.ReaderProcess.retries`) at scrape time."""
        self._reader_retries = retries

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        snap = self._snapshot()
        state = GaugeMetricFamily("tts_lifecycle_state", "1 for the current lifecycle state", labels=["state"])
        for name in ("loading", "warm", "releasing", "released", "restoring", "failed", "broken"):
            state.add_metric([name], 1.0 if snap["state"] == name else 0.0)
        yield state
        transitions = CounterMetricFamily("tts_lifecycle_transitions", "Lifecycle transitions", labels=["edge"])
        for edge, count in snap["transitions"].items():
            transitions.add_metric([edge], float(count))
        yield transitions
        memory = GaugeMetricFamily("tts_memory_bytes", "Memory meters", labels=["kind"])
        for kind in ("billable", "anon", "file", "mapped", "rss"):
            value = snap["memory"].get(kind)
            if value is not None:
                memory.add_metric([kind], float(value))
        yield memory
        yield GaugeMetricFamily("tts_requests_in_flight", "Requests in flight", value=float(snap["in_flight"]))


class _RetriesCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        retries = CounterMetricFamily("tts_retries", "Requests asked again of a fresh helper process because the one "
                                      "serving them had died before their first byte", labels=["process"])
        retries.add_metric(["inference"], float(self._metrics.inference_retries))
        retries.add_metric(["reader"], float(self._metrics._reader_retries()))
        yield retries


class _PoolCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        snap = self._snapshot()
        yield GaugeMetricFamily("tts_pool_admitted", "Requests streaming or waiting now", value=float(snap["admitted"]))
        yield GaugeMetricFamily("tts_pool_capacity_requests", "Most requests admitted at once now (more get 429)",
                                value=float(snap["capacity"]))
        yield GaugeMetricFamily("tts_pool_listeners", "Requests the pool plays at once in real time",
                                value=float(snap["listeners"]))
        if snap["realtime_capacity"] is not None:
            yield GaugeMetricFamily("tts_pool_realtime_capacity", "Audio-seconds per second with every stream busy "
                                    "(measured)", value=float(snap["realtime_capacity"]))
