"""The seam between the lifecycle and what it manages."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Reclaimable(Protocol):
    """Something whose inference state can be dropped and rebuilt.

    The lifecycle calls these from a worker thread, one at a time, and never while a request
    that uses the state is in flight.
    """

    def restore(self) -> dict[str, float]:
        """Build the state; returns seconds spent per part (for logs and metrics)."""
        ...

    def release(self) -> None:
        """Drop every reference to the state so the allocator can free it."""
        ...

    def files(self) -> list[Path]:
        """Files read to build the state, to evict from the page cache after release."""
        ...

    def intact(self) -> bool:
        """False when restored state was lost without a release (a crashed worker process)."""
        ...
