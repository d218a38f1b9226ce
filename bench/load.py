"""Closed-loop load: ``c`` clients, each sending its next request when the previous response has fully arrived.

Runs in its own process (``python -m bench.load``, started by the runner) so the clients' CPU never counts as
the server's and the runner's own threads never delay a client. Client ``i`` starts at corpus position
``i * len / c`` and cycles through the corpus, so clients do not send the same text in lockstep.

Timeline: ``ramp_s`` of load that is excluded (first requests, first shapes), then the steady-state window of
``window_s``. At the window's two edges the load process reads the server's CPU time (user + system, all
threads, its whole process tree: `lifecycle.proctree.cpu_seconds`), so the CPU-seconds belong to exactly the
window.

Audio is credited to the time it was made in, not only to when it arrived: a client is sequential, so the
bytes of each arrival were produced between that client's previous arrival (or its request's send) and this
one, and the window gets the share of them that overlaps it (2 bytes per sample of 24 kHz mono PCM). Counting
whole arrivals instead would be off by up to a chunk per client at each edge: tens of percent of a
one-client window, where one chunk can take seconds. So the clients keep going past the window's end until
every one of them has received something after it (every interval that overlaps the window is then closed),
for at most ``drain_s``; a client whose interval is still open then is credited, for the part of it inside the
window, with the audio per client-second the closed intervals of the window show (``audio_s_extrapolated``).
Then they hang up; the server frees their slots.

First audio is the time from sending a request to the arrival of its first audio bytes (PCM carries no header),
over the requests whose first audio arrived inside the window. Stalls are what a listener would hear: a player
that starts at the first byte and plays at 1x waits whenever the audio received so far has played out before the
next part arrives; the level reports those waits per audio-minute, over the requests whose first audio arrived
inside the window and that completed. Progress goes to stderr every few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt

from bench import corpus as corpus_mod
from bench.client import APIS, Api, request_for
from bench.levels import LevelResult, RequestRecord
from lifecycle.proctree import cpu_seconds

log = logging.getLogger("bench.load")
BYTES_PER_AUDIO_S = 48_000.0
"""16-bit mono PCM at 24 kHz."""
PROGRESS_EVERY_S = 5.0
RETRY_AFTER_MAX_S = 2.0
"""Longest a refused client waits before it asks again, whatever ``Retry-After`` says: a closed loop keeps its
client count."""
COALESCE_S = 0.25
"""Body parts closer together than this are one chunk cut up by the transport (merging two chunks is harmless:
the interval stays contiguous)."""


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN when empty."""
    return float(np.percentile(values, q)) if len(values) else math.nan


def window_audio_s(arrivals: Sequence[tuple[float, float, int]], w0: float, w1: float) -> float:
    """Audio-seconds made inside [w0, w1): each arrival's bytes spread evenly over the time they were made in."""
    total = 0.0
    for since, at, size in arrivals:
        if at <= since:  # no production interval (a part split in the same instant): count where it lands
            total += size if w0 <= at < w1 else 0
            continue
        overlap = min(at, w1) - max(since, w0)
        if overlap > 0:
            total += size * overlap / (at - since)
    return total / BYTES_PER_AUDIO_S


def stall_seconds(parts: Sequence[tuple[float, int]]) -> float:
    """Seconds a player that starts at the first part and plays at 1x waits for data, given the parts of one
    response as (arrival time, bytes): it runs dry whenever the audio received so far has played out before
    the next part arrives, and resumes when it does."""
    if not parts:
        return 0.0
    stalled = 0.0
    dry_at = parts[0][0] + parts[0][1] / BYTES_PER_AUDIO_S
    for at, size in parts[1:]:
        if at > dry_at:
            stalled += at - dry_at
            dry_at = at
        dry_at += size / BYTES_PER_AUDIO_S
    return stalled


def covered_s(arrivals: Sequence[tuple[float, float, int]], w0: float, w1: float) -> float:
    """Client-seconds of [w0, w1) covered by closed production intervals."""
    return sum(max(0.0, min(at, w1) - max(since, w0)) for since, at, _ in arrivals)


@dataclass
class _Level:
    """Mutable state shared by the clients of one level (one event loop, no locks needed)."""

    start: float
    window_start: float
    window_end: float
    arrivals: list[tuple[float, float, int]] = dataclasses.field(default_factory=list)
    """(produced since, arrived at, bytes) of every body part received."""
    closed: set[int] = dataclasses.field(default_factory=set)
    """Clients that have received something since the window ended."""
    open_since: dict[int, float] = dataclasses.field(default_factory=dict)
    """Per client, when its current production interval began (its last arrival or request)."""
    records: list[RequestRecord] = dataclasses.field(default_factory=list)
    takes: dict[str, bytes] | None = None
    """The first complete response per utterance, kept for the output check (`run_level`'s ``keep_takes``)."""
    cpu_start: float = math.nan
    cpu_end: float = math.nan
    t_cpu_start: float = math.nan
    t_cpu_end: float = math.nan


async def _client(http: httpx.AsyncClient, api: Api, index: int, items: Sequence[corpus_mod.Utterance],
                  offset: int, level: _Level) -> None:
    position = offset
    while True:
        utterance = items[position % len(items)]
        position += 1
        url, body = request_for(api, utterance.text, utterance.voice)
        keep = level.takes is not None and utterance.id not in level.takes
        kept: list[bytes] = []
        sent = time.monotonic()
        first: float | None = None
        received = 0
        status = 0
        error = ""
        done: float | None = None
        answered: float | None = None
        retry_after = False
        wait_s = 0.2
        since = sent
        last: int | None = None
        parts: list[tuple[float, int]] = []
        level.open_since[index] = sent
        try:
            async with http.stream("POST", url, json=body) as response:
                status = response.status_code
                answered = time.monotonic() - level.start
                retry_after = "retry-after" in response.headers
                if retry_after:  # as a client that honours it does, up to a bound (the platform would retry elsewhere)
                    wait_s = min(RETRY_AFTER_MAX_S, float(response.headers["retry-after"]))
                if status != 200:
                    error = f"HTTP {status}: " + (await response.aread()).decode(errors="replace")[:200]
                else:
                    async for part in response.aiter_raw():
                        now = time.monotonic()
                        if first is None and part:
                            first = now
                        received += len(part)
                        if part:
                            parts.append((now, len(part)))
                            if keep:
                                kept.append(part)
                        if last is not None and now - level.arrivals[last][1] < COALESCE_S:
                            # The rest of the same chunk, split by the transport: it was made in the same
                            # interval as its first bytes, not in the milliseconds since they arrived.
                            began, _, size = level.arrivals[last]
                            level.arrivals[last] = (began, now, size + len(part))
                        else:
                            last = len(level.arrivals)
                            level.arrivals.append((since, now, len(part)))
                        since = level.open_since[index] = now
                        if now >= level.window_end:
                            level.closed.add(index)
                    done = time.monotonic()
                    if done >= level.window_end:
                        level.closed.add(index)
                    if keep and level.takes is not None:
                        level.takes.setdefault(utterance.id, b"".join(kept))
        except asyncio.CancelledError:
            level.records.append(RequestRecord(index, utterance.id, sent - level.start,
                                               None if first is None else first - level.start, None, received,
                                               status, "cancelled after the window"))
            raise
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        level.records.append(RequestRecord(index, utterance.id, sent - level.start,
                                           None if first is None else first - level.start,
                                           None if done is None else done - level.start, received, status, error,
                                           answered, retry_after, stall_seconds(parts)))
        if error:
            await asyncio.sleep(wait_s)  # do not spin on a server that refuses


async def _edges(pid: int, level: _Level) -> None:
    await asyncio.sleep(max(0.0, level.window_start - time.monotonic()))
    level.cpu_start, level.t_cpu_start = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(max(0.0, level.window_end - time.monotonic()))
    level.cpu_end, level.t_cpu_end = cpu_seconds(pid), time.monotonic()


async def _progress(clients: int, level: _Level) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        now = time.monotonic()
        phase = (f"ramp {now - level.start:4.0f}/{level.window_start - level.start:.0f} s" if now < level.window_start
                 else f"window {now - level.window_start:4.0f}/{level.window_end - level.window_start:.0f} s")
        done = [r for r in level.records if r.done is not None]
        errors = sum(1 for r in level.records if r.error and "cancelled" not in r.error)
        received = sum(n for _, _, n in level.arrivals) / BYTES_PER_AUDIO_S
        print(f"    {clients} clients, {phase}: {len(done)} responses, {received:.0f} audio-s received, "
              f"{errors} errors", file=sys.stderr, flush=True)


async def run_level(url: str, pid: int, clients: int, items: Sequence[corpus_mod.Utterance], ramp_s: float,
                    window_s: float, drain_s: float = 8.0, timeout_s: float = 300.0, api: Api = "openai",
                    keep_takes: dict[str, bytes] | None = None) -> LevelResult:
    """Drive ``clients`` closed-loop clients against ``url`` for ramp + window, streamed PCM asked for as ``api``
    says (`bench.client.request_for`). With ``keep_takes``, the first complete response to each utterance goes
    into it (the output check of a server whose chunks are not the model's: `bench.peers`)."""
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    level = _Level(start=start, window_start=start + ramp_s, window_end=start + ramp_s + window_s, takes=keep_takes)
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(timeout_s), limits=limits) as http:
        tasks = [asyncio.create_task(_client(http, api, i, items, i * len(items) // clients, level))
                 for i in range(clients)]
        progress = asyncio.create_task(_progress(clients, level))
        await _edges(pid, level)
        # Past the window until every client has received something after it (see the module docstring).
        deadline = time.monotonic() + drain_s
        while len(level.closed) < clients and time.monotonic() < deadline and not all(t.done() for t in tasks):
            await asyncio.sleep(0.05)
        still_open = {i: t for i, t in level.open_since.items() if i not in level.closed}
        for task in (*tasks, progress):
            task.cancel()
        await asyncio.gather(*tasks, progress, return_exceptions=True)
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    window = level.t_cpu_end - level.t_cpu_start
    cpu = level.cpu_end - level.cpu_start
    edge0, edge1 = level.t_cpu_start, level.t_cpu_end
    measured = window_audio_s(level.arrivals, edge0, edge1)
    # The rate for open intervals comes from every closed interval since the window began (drain included):
    # steady state, and more of it than the window alone holds when the window is short.
    ended = time.monotonic()
    covered = covered_s(level.arrivals, edge0, ended)
    per_client_s = window_audio_s(level.arrivals, edge0, ended) / covered if covered > 0 else 0.0
    extrapolated = per_client_s * sum(max(0.0, edge1 - max(since, edge0)) for since in still_open.values())
    audio_s = measured + extrapolated
    w0, w1 = level.window_start - start, level.window_end - start
    in_window = [r for r in level.records if w0 <= r.sent < w1]
    # First audio counts for every request whose first audio arrived inside the window: counting by send time
    # instead would drop the slowest requests, those still waiting when the clients hang up.
    first = [r.first_audio - r.sent for r in level.records if r.first_audio is not None and w0 <= r.first_audio < w1]
    errors = sum(1 for r in level.records if r.error and r.done is None and "cancelled" not in r.error)
    played = [r for r in level.records if r.first_audio is not None and w0 <= r.first_audio < w1 and r.done is not None]
    refused = [r for r in in_window if r.status == 429]
    refusal_s = [r.answered - r.sent for r in refused if r.answered is not None]
    played_audio_s = sum(r.audio_bytes for r in played) / BYTES_PER_AUDIO_S
    stall_rate = 60.0 * sum(r.stall_s for r in played) / played_audio_s if played_audio_s > 0 else math.nan
    return LevelResult(
        clients=clients, ramp_s=ramp_s, window_s=window, server_cpu_s=cpu, audio_s=audio_s,
        audio_s_extrapolated=extrapolated, clients_open_at_end=len(still_open),
        efficiency=audio_s / cpu if cpu > 0 else math.nan, throughput=audio_s / window if window > 0 else math.nan,
        requests_sent=len(in_window),
        requests_completed=sum(1 for r in level.records if r.done is not None and w0 <= r.done < w1),
        errors=errors, first_audio_p50=percentile(first, 50), first_audio_p90=percentile(first, 90),
        first_audio_mean=sum(first) / len(first) if first else math.nan,
        first_audio_max=max(first) if first else math.nan, first_audio_n=len(first),
        stall_s_per_audio_min=stall_rate, stalled_requests=sum(1 for r in played if r.stall_s > 0.01),
        stall_requests_n=len(played), client_cpu_s=client_cpu,
        records=tuple(sorted(level.records, key=lambda r: r.sent)), refused=len(refused),
        refused_p90_s=percentile(refusal_s, 90),
        refused_without_retry_after=sum(1 for r in refused if not r.retry_after),
    )


def read(path: Path) -> LevelResult:
    data = json.loads(path.read_text())
    for name in ("stall_s_per_audio_min", "stalled_requests", "stall_requests_n"):  # runs from before stalls
        data.setdefault(name, math.nan if name == "stall_s_per_audio_min" else 0)
    records = tuple(RequestRecord(**r) for r in data.pop("records"))
    return LevelResult(**data, records=records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument("--url", required=True, help="server base URL")
    parser.add_argument("--pid", type=int, required=True, help="server process id (its CPU time is read)")
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--ramp-s", type=float, required=True)
    parser.add_argument("--window-s", type=float, required=True)
    parser.add_argument("--drain-s", type=float, default=8.0, help="longest wait past the window")
    parser.add_argument("--corpus", type=Path, default=corpus_mod.DEFAULT)
    parser.add_argument("--items", default="", help="comma-separated utterance ids (default: all)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the LevelResult")
    parser.add_argument("--voice", default="", help="every utterance in this voice (default: the corpus's)")
    parser.add_argument("--api", choices=APIS, default="openai", help="how the server is asked (bench/client.py)")
    parser.add_argument("--takes", type=Path, help="NPZ for the first complete response to each utterance (int16)")
    args = parser.parse_args(argv)
    corpus = corpus_mod.load(args.corpus)
    if args.items:
        corpus = corpus.subset(args.items.split(","))
    corpus = corpus.with_voice(args.voice)
    takes: dict[str, bytes] | None = {} if args.takes else None
    result = asyncio.run(run_level(args.url, args.pid, args.clients, corpus.utterances, args.ramp_s, args.window_s,
                                   args.drain_s, api=args.api, keep_takes=takes))
    args.out.write_text(json.dumps(dataclasses.asdict(result), indent=1) + "\n")
    if args.takes and takes is not None:
        write_takes(args.takes, takes)
    return 0


def write_takes(path: Path, takes: dict[str, bytes]) -> None:
    """Responses as 16-bit PCM arrays, one per utterance id (an odd trailing byte, never sent whole, dropped)."""
    arrays = {k: np.frombuffer(v[: len(v) // 2 * 2], dtype="<i2") for k, v in takes.items()}
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds badly


def read_takes(path: Path) -> dict[str, npt.NDArray[np.float32]]:
    """`write_takes`' responses as float audio in [-1, 1)."""
    with np.load(path) as archive:
        return {k: archive[k].astype(np.float32) / 32768.0 for k in archive.files}


if __name__ == "__main__":
    sys.exit(main())
