"""One door for configuration: TTS_* variables, PORT, and clear errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.__main__ import parse_args
from app.settings import Settings, SettingsError, documented

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.backend == "openvino" and settings.port == 8080 and settings.quiet_window_s == 45.0


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


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    for name, _, description in documented():
        assert description, f"{name} has no docstring"
        assert f"`{name}`" in readme, f"{name} is missing from README.md"
