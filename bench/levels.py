"""What one closed-loop level records (`bench.load`): each request as a client saw it, and the level's figures."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One request as a client saw it; times are seconds from the start of the level."""

    client: int
    item: str
    sent: float
    first_audio: float | None
    done: float | None
    """When the body had fully arrived; None if the client hung up or it failed."""
    audio_bytes: int
    status: int
    error: str = ""
    answered: float | None = None
    """When its status line arrived (a refusal's whole answer)."""
    retry_after: bool = False
    """A refusal (429) that said when to come back (``Retry-After``)."""
    stall_s: float = 0.0
    """Seconds a 1x player starting at the first byte would have waited for data (`stall_seconds`)."""


@dataclass(frozen=True)
class LevelResult:
    """What one client count measured over its steady-state window."""

    clients: int
    ramp_s: float
    window_s: float
    """Actual window length (monotonic clock)."""
    server_cpu_s: float
    audio_s: float
    """Audio-seconds made inside the window."""
    audio_s_extrapolated: float
    """The part of ``audio_s`` credited to intervals still open when the clients hung up."""
    clients_open_at_end: int
    """Clients that had received nothing after the window when the drain time ran out."""
    efficiency: float
    """Audio-seconds per server CPU-second."""
    throughput: float
    """Audio-seconds per second."""
    requests_sent: int
    """Requests sent inside the window."""
    requests_completed: int
    """Requests completed inside the window."""
    errors: int
    """Failed requests (any status but 200, or a broken stream) over the whole level."""
    first_audio_p50: float
    first_audio_p90: float
    first_audio_mean: float
    first_audio_max: float
    first_audio_n: int
    """Requests whose first audio arrived inside the window."""
    stall_s_per_audio_min: float
    """Seconds a 1x player would wait for data per minute of audio, over the window's completed requests."""
    stalled_requests: int
    """Of those requests, how many stalled at all (more than 10 ms)."""
    stall_requests_n: int
    """Requests the stall figures are taken over."""
    client_cpu_s: float
    """CPU-seconds the load process itself used (it shares the machine)."""
    records: tuple[RequestRecord, ...]
    refused: int = 0
    """Requests answered 429 inside the window."""
    refused_p90_s: float = math.nan
    """How long those took to answer, p90."""
    refused_without_retry_after: int = 0
