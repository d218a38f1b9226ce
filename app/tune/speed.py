"""How fast this instance makes a listener's audio, and so how many listeners it plays in real time: the pace.

The tuner measures every candidate's audio per CPU-second (`app.tune.trial`, kept in the manifest's table); a busy
stream of T threads makes about that times T, less what it waits (`BUSY_SHARE`). From the served form's rows:

- ``stream``: seconds of audio one stream makes per second while every stream is busy (its shape's row);
- ``wide``: one inference on every thread of the pool while the others are idle (the same form's ``1 x N`` row), where
  the runtime runs such a session (`app.runtime.backends.onnxruntime`);

and from them `Pace`: the listeners admitted (`listeners`: the most that each get at least `chunker.min_rate`, at
least one) and the rate the chunk plan is paced at for that load (`app.text.chunker.chunk`; none where even one
listener is slower than that: it stalls whatever the plan). The figures are fixed
for the instance's life, so the same request is cut the same way whatever the load; an instance whose CPU has no
manifest, or whose manifest lacks the rows, paces as the slowest class on record (`SLOWEST`): it never stalls a
listener for being optimistic, and ``python -m app tune`` measures the machine itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.sizing import PoolShape
from app.text import chunker
from app.tune.manifest import DIRECTORY, SHIPPED

BUSY_SHARE = 0.9
"""The share of its threads' time a busy stream computes: a stream's audio per second is its audio per CPU-second times
its threads times this (the tuner's trials on quiet machines: 0.89-0.92; the rest is hand-over between inferences)."""


@dataclass(frozen=True)
class Speed:
    """Seconds of audio per second, padding included (`app.text.chunker.PAD_TOKENS`)."""

    stream: float
    """One stream, every stream busy."""
    wide: float | None
    """One inference on every thread of the pool, the others idle; None where the runtime has no such session."""
    source: str
    """Where the figures come from: a manifest's path, or the slowest class on record."""


@dataclass(frozen=True)
class Pace:
    """The instance's listeners and the rate its chunks are planned at (module docstring)."""

    listeners: int
    """Requests that synthesize at once: each plays in real time at `rate`."""
    rate: float
    """Seconds of audio per second each listener's chunks are made at with `listeners` playing."""
    wide: bool
    """Whether the plan counts on a lone listener's chunks running on every thread (one listener, a wide session)."""
    speed: Speed

    def public(self) -> dict[str, Any]:
        return {"listeners": self.listeners, "rate": round(self.rate, 3), "wide": self.wide,
                "stream_rate": round(self.speed.stream, 3),
                "wide_rate": None if self.speed.wide is None else round(self.speed.wide, 3),
                "source": self.speed.source}


def pace(speed: Speed, streams: int, *, first_max: int = chunker.FIRST_CHUNK_TOKENS) -> Pace:
    """The most listeners (at least one) that each get `chunker.min_rate`: one alone gets the wide session where there
    is one, up to one per stream get a stream each, more share the streams."""
    needed = chunker.min_rate(first_max)
    alone = max(speed.stream, speed.wide or 0.0)
    # Where even one listener cannot get it, every plan stalls it: the doubling rule's (rate 0) at least wastes the
    # least on padding.
    best = Pace(1, alone if alone >= needed else 0.0, speed.wide is not None and alone > speed.stream, speed)
    listeners = 2
    while (share := speed.stream * min(1.0, streams / listeners)) >= needed:
        best = Pace(listeners, share, False, speed)
        listeners += 1
    return best


def speed_for(table: list[dict[str, Any]], backend: str, precision: str, form: str, shape: PoolShape, *,
              wide: bool, source: str) -> Speed | None:
    """The served form's speed from a tuning table, at ``shape`` (the row of its threads per stream); None where the
    table has no row for that form and those threads."""
    rows = [r for r in table if r.get("backend") == backend and r.get("precision") == precision
            and r.get("form", "onnx") == form and r.get("efficiency") and not r.get("error")]
    stream = _rate(rows, shape.threads_per_stream)
    if stream is None:
        return None
    return Speed(stream, _rate(rows, shape.threads, streams=1) if wide else None, source)


def _rate(rows: list[dict[str, Any]], threads: int, streams: int = 0) -> float | None:
    found = [r for r in rows if r.get("threads_per_stream") == threads and (not streams or r.get("streams") == streams)]
    if not found:
        return None
    return float(found[0]["efficiency"]) * threads * BUSY_SHARE


def slowest(shape: PoolShape, *, wide: bool, directory: Path = SHIPPED / DIRECTORY) -> Speed:
    """The slowest class on record: the shipped manifest whose ONNX Runtime ``fused`` form makes the least audio per
    CPU-second (the portable default's form), at ``shape``; a guess per thread where none has the rows."""
    tables = [(path.name, json.loads(path.read_text()).get("table", [])) for path in sorted(directory.glob("*.json"))]

    def at(where: PoolShape, with_wide: bool) -> list[Speed]:
        found = (speed_for(table, "onnxruntime", "f32", "fused", where, wide=with_wide,
                           source=f"the slowest class on record ({name})") for name, table in tables)
        return [speed for speed in found if speed is not None]

    if found := at(shape, wide):
        return min(found, key=lambda s: s.stream)
    # No row for this shape anywhere: the slowest 1-thread figure on record, per thread.
    per_thread = min((s.stream for s in at(PoolShape(1, 1), False)), default=1.2)
    return Speed(per_thread * shape.threads_per_stream, per_thread * math.sqrt(shape.threads) if wide else None,
                 "a guess from the slowest class on record, per thread")
