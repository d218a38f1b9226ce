"""The transition table is the only way to change state."""

from __future__ import annotations

import pytest

from lifecycle.states import TRANSITIONS, IllegalTransition, State, StateMachine


def test_the_transition_table_is_exactly_this() -> None:
    """The table written out: a transition added or dropped must be a deliberate change here too."""
    pinned = {
        "loading": {"warm", "failed", "broken"},
        "warm": {"releasing", "failed"},
        "releasing": {"released", "failed"},
        "released": {"restoring"},
        "restoring": {"warm", "failed", "broken"},
        "failed": {"restoring"},
        "broken": {"restoring"},
    }
    assert {s.value: {t.value for t in targets} for s, targets in TRANSITIONS.items()} == pinned
    assert {s.value for s in State} == set(pinned)


def test_the_full_cycle_is_legal_and_counted() -> None:
    machine = StateMachine()
    for target in (State.WARM, State.RELEASING, State.RELEASED, State.RESTORING, State.WARM):
        machine.move(target)
    assert machine.state is State.WARM
    assert machine.counts["released->restoring"] == 1 and machine.counts["restoring->warm"] == 1


def test_failed_has_a_way_back() -> None:
    machine = StateMachine()
    machine.move(State.FAILED)
    machine.move(State.RESTORING)
    machine.move(State.WARM)
    assert machine.state is State.WARM


@pytest.mark.parametrize("source", list(State))
def test_every_transition_outside_the_table_raises(source: State) -> None:
    for target in State:
        if target in TRANSITIONS[source]:
            continue
        machine = StateMachine()
        machine.state = source
        with pytest.raises(IllegalTransition):
            machine.move(target)
        assert machine.state is source
