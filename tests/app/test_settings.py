"""One door for configuration: TTS_* variables, PORT, and clear errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.__main__ import parse_args
from app.settings import Settings, SettingsError, documented, table, with_table

README = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.backend == "auto" and settings.port == 8080 and settings.quiet_window_s == 45.0


def test_env_values_are_typed() -> None:
    settings = Settings.from_env({"TTS_STREAMS": "3", "TTS_QUIET_WINDOW_S": "0.5", "TTS_COMPILE_CACHE": "false",
                                  "TTS_MODEL_PATH": "/m.onnx"})
    assert settings.streams == 3 and settings.quiet_window_s == 0.5 and settings.compile_cache is False
    assert settings.model_path == Path("/m.onnx")


def test_port_from_cloud_run_unless_tts_port_is_set() -> None:
    assert Settings.from_env({"PORT": "9000"}).port == 9000
    assert Settings.from_env({"PORT": "9000", "TTS_PORT": "9100"}).port == 9100


@pytest.mark.parametrize("env, name", [
    ({"TTS_STREAMS": "many"}, "TTS_STREAMS"),
    ({"TTS_BACKEND": "torch"}, "TTS_BACKEND"),
    ({"TTS_QUIET_WINDOW_S": "-1"}, "TTS_QUIET_WINDOW_S"),
    ({"TTS_COMPILE_CACHE": "maybe"}, "TTS_COMPILE_CACHE"),
    ({"PORT": "http"}, "PORT"),
    ({"TTS_MAX_CHUNK_TOKENS": "600"}, "TTS_MAX_CHUNK_TOKENS"),
])
def test_bad_values_fail_with_the_name(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_flags_map_onto_setting_names() -> None:
    assert parse_args(["--port", "9", "--quiet-window-s", "3"]) == {"port": "9", "quiet_window_s": "3"}


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--help"])
    assert exit_.value.code == 0
    assert "--shape-cache" in capsys.readouterr().out


def test_every_setting_has_a_description() -> None:
    assert [name for name, _, description in documented() if not description] == []


def test_the_readme_settings_table_is_current() -> None:
    """The table is generated (``python -m app.settings --readme docs/configuration.md``): a setting added, a default
    changed or a description edited in `Settings` without regenerating it fails here."""
    assert with_table(README.read_text()) == README.read_text()


def test_the_table_shows_each_default_and_description() -> None:
    rows = {line.split(" | ")[0].strip("| `"): line for line in table().splitlines() if line.startswith("| `TTS_")}
    assert set(rows) == {name for name, _, _ in documented()}
    assert "| `TTS_RELEASE_FRONTEND` | `False` | Also release the text front end" in rows["TTS_RELEASE_FRONTEND"]
    assert rows["TTS_MODEL_PATH"].startswith("| `TTS_MODEL_PATH` | unset | ONNX model file;")
    assert rows["TTS_API_KEY"].startswith("| `TTS_API_KEY` | empty | Bearer token")
    assert "`CPU_RUNTIME_CACHE_CAPACITY`" in rows["TTS_SHAPE_CACHE"]  # ``rst`` became `markdown`
