"""The suite's wait for the primary form (`tests.conftest.until_primary`): it tells a primary that serves from a
server with nothing loaded, and wakes the latter where the caller gives a request to do it."""

from __future__ import annotations

from typing import Any

from tests.conftest import until_primary

BRIDGE = {"resolved": {"backend": "onnxruntime"}, "bridge_serving": True, "primary_error": None}
PRIMARY = {"resolved": {"backend": "openvino", "from_cache": True}, "bridge_serving": False, "primary_error": None}
RELEASED = {"resolved": None, "bridge_serving": False, "primary_error": None}


def answers(*states: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    seen: list[dict[str, Any]] = []
    queue = list(states)

    def info() -> dict[str, Any]:
        state = queue.pop(0) if len(queue) > 1 else queue[0]
        seen.append(state)
        return state

    return seen, info


def test_waits_while_the_bridge_serves_and_returns_once_the_primary_does() -> None:
    seen, info = answers(BRIDGE, BRIDGE, PRIMARY)
    assert until_primary(info, timeout_s=5) is PRIMARY
    assert seen == [BRIDGE, BRIDGE, PRIMARY]


def test_a_released_server_is_woken_and_waited_for() -> None:
    woken: list[int] = []
    states = [RELEASED]

    def info() -> dict[str, Any]:
        return states[-1]

    def wake() -> None:  # the request restores: the bridge serves, then the primary takes over
        woken.append(1)
        states.extend([BRIDGE, PRIMARY])

    assert until_primary(info, timeout_s=5, wake=wake) is PRIMARY
    assert woken == [1]


def test_without_a_wake_a_released_server_is_returned_as_it_is() -> None:
    _, info = answers(RELEASED)
    assert until_primary(info, timeout_s=5)["resolved"] is None


def test_a_failed_primary_load_is_returned() -> None:
    failed = {**BRIDGE, "primary_error": "RuntimeError: no"}
    _, info = answers(BRIDGE, failed)
    assert until_primary(info, timeout_s=5) is failed
