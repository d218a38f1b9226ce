"""The lifecycle's states and the only transitions allowed between them."""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from dataclasses import dataclass

log = logging.getLogger(__name__)


class State(enum.Enum):
    LOADING = "loading"
    WARM = "warm"
    RELEASING = "releasing"
    RELEASED = "released"
    RESTORING = "restoring"
    FAILED = "failed"
    BROKEN = "broken"
    """Failed too many times in a row: liveness fails so the platform restarts the container."""


TRANSITIONS: dict[State, frozenset[State]] = {
    State.LOADING: frozenset({State.WARM, State.FAILED, State.BROKEN}),
    State.WARM: frozenset({State.RELEASING, State.FAILED}),  # failed: the state was lost (a crash)
    State.RELEASING: frozenset({State.RELEASED, State.FAILED}),
    State.RELEASED: frozenset({State.RESTORING}),
    State.RESTORING: frozenset({State.WARM, State.FAILED, State.BROKEN}),  # broken: the Nth failure in a row
    State.FAILED: frozenset({State.RESTORING}),  # the way back: a background retry, or the next request
    State.BROKEN: frozenset({State.RESTORING}),  # background retries go on at the longest wait
}


class IllegalTransition(RuntimeError):
    pass


@dataclass(frozen=True)
class Transition:
    """One recorded change of state."""

    source: State
    target: State
    at: float
    """Wall-clock time (``time.time``) of the change."""
    seconds_in_source: float
    """How long the machine was in ``source``."""


class StateMachine:
    """Holds the current state; `move` checks the table, logs and counts every change."""

    def __init__(self) -> None:
        self.state = State.LOADING
        self.since = time.time()
        self._since_mono = time.monotonic()
        self.counts: Counter[str] = Counter()

    def move(self, target: State) -> Transition:
        if target not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"{self.state.value} -> {target.value} is not allowed")
        now = time.monotonic()
        transition = Transition(self.state, target, time.time(), now - self._since_mono)
        log.info("lifecycle %s -> %s after %.3f s", self.state.value, target.value, transition.seconds_in_source)
        self.state, self.since, self._since_mono = target, transition.at, now
        self.counts[f"{transition.source.value}->{target.value}"] += 1
        return transition
