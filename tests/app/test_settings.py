"""One door for configuration: TTS_* variables, PORT, and clear errors for bad values and removed variables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.__main__ import main, parse_args, server_config
from app.settings import GROUPS, PAGE, REMOVED, Settings, SettingsError, docstrings, documented, page


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.backend == "auto" and settings.port == 8080 and settings.quiet_window_s == 45.0


def test_env_values_are_typed() -> None:
    settings = Settings.from_env({"TTS_STREAMS": "3", "TTS_QUIET_WINDOW_S": "0.5", "TTS_WEB": "false",
                                  "TTS_MODEL_PATH": "/m.onnx"})
    assert settings.streams == 3 and settings.quiet_window_s == 0.5 and settings.web is False
    assert settings.model_path == Path("/m.onnx")


def test_port_from_cloud_run_unless_tts_port_is_set() -> None:
    assert Settings.from_env({"PORT": "9000"}).port == 9000
    assert Settings.from_env({"PORT": "9000", "TTS_PORT": "9100"}).port == 9100


@pytest.mark.parametrize("env, name", [
    ({"TTS_STREAMS": "many"}, "TTS_STREAMS"),
    ({"TTS_BACKEND": "torch"}, "TTS_BACKEND"),
    ({"TTS_QUIET_WINDOW_S": "-1"}, "TTS_QUIET_WINDOW_S"),
    ({"TTS_WEB": "maybe"}, "TTS_WEB"),
    ({"PORT": "http"}, "PORT"),
    ({"TTS_LOG_LEVEL": "chatty"}, "TTS_LOG_LEVEL"),
])
def test_bad_values_fail_with_the_name(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_at_most_25_settings_each_in_one_group_of_the_page() -> None:
    names = [f.name for f in dataclasses.fields(Settings)]
    assert len(names) <= 25
    grouped = [name for _, members in GROUPS for name in members]
    assert sorted(grouped) == sorted(names) and len(set(grouped)) == len(grouped)


def test_each_setting_is_documented_in_at_most_three_lines() -> None:
    docs = docstrings()
    assert set(docs) == {f.name for f in dataclasses.fields(Settings)}
    assert {name: text for name, text in docs.items() if not text.strip() or text.count("\n") > 2} == {}


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_variable_stops_the_start_saying_why(name: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({name: "0"})
    assert str(raised.value) == f"{name} was removed: {REMOVED[name]}"


def test_removed_variables_are_all_named_at_once_and_none_is_a_setting() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"TTS_SLACK_CHUNKS": "0", "TTS_WIDE_CHUNK_TOKENS": "0", "TTS_STREAMS": "2"})
    message = str(raised.value)
    assert "TTS_SLACK_CHUNKS was removed: chunking depends on the text only" in message
    assert "TTS_WIDE_CHUNK_TOKENS was removed" in message
    assert not set(REMOVED) & {name for name, _, _ in documented()}


def test_the_server_refuses_to_start_on_a_removed_variable(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TTS_IDLE_FIRST_CHUNK_TOKENS", "12")
    assert main([]) == 2  # before anything is started or loaded
    assert "TTS_IDLE_FIRST_CHUNK_TOKENS was removed" in caplog.text


def test_flags_map_onto_setting_names() -> None:
    assert parse_args(["--port", "9", "--quiet-window-s", "3"]) == {"port": "9", "quiet_window_s": "3"}


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--help"])
    assert exit_.value.code == 0
    assert "--shutdown-grace-s" in capsys.readouterr().out


def test_every_setting_has_a_description() -> None:
    assert [name for name, _, description in documented() if not description] == []


def test_the_settings_page_is_current() -> None:
    """docs/configuration.md is generated (``python -m app.settings --write``): a setting added, removed, a default
    changed or a description edited in `Settings` without regenerating it fails here."""
    assert PAGE.read_text() == page()


def test_the_page_shows_each_default_and_description_by_group() -> None:
    text = page()
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `TTS_")}
    assert set(rows) == {name for name, _, _ in documented()}
    assert rows["TTS_MODEL_PATH"].startswith("| `TTS_MODEL_PATH` | unset | ONNX model file;")
    assert rows["TTS_API_KEY"].startswith("| `TTS_API_KEY` | empty | Bearer token")
    assert "`/healthz`" in rows["TTS_API_KEY"]  # ``rst`` became `markdown`
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        *(f"## {title}" for title, _ in GROUPS), "## Removed"]
    assert "- `TTS_SLACK_CHUNKS`: chunking depends on the text only" in text


@pytest.mark.parametrize("grace, expected", [("0", 0.0), ("0.5", 0.5), ("10", 10.0)])
def test_the_grace_period_reaches_uvicorn_as_set(grace: str, expected: float) -> None:
    """0 is no grace (uvicorn cuts in-flight streams at once), a fraction is that fraction: never ``None``, which
    uvicorn reads as waiting for ever (before, ``int(grace) or None`` made both 0 and 0.5 an unbounded drain)."""
    config = server_config(Settings.from_env({"TTS_SHUTDOWN_GRACE_S": grace}), object())
    assert config.timeout_graceful_shutdown == expected
