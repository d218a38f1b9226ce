"""``python -m bench coldstart``'s variants, container command and report, without running anything (the runs
themselves are the benchmark's: bench/results/coldstart-*)."""

from __future__ import annotations

import argparse

import pytest

from bench import coldstart, startreport


def test_container_variants_name_an_image_and_run_it_with_podman_on_the_given_port() -> None:
    assert coldstart.container_variant("head=localhost/kokoro-tts:head") == (
        "head", {coldstart.CONTAINER: "localhost/kokoro-tts:head"})
    for bad in ("head", "=image", "head="):
        with pytest.raises(argparse.ArgumentTypeError):
            coldstart.container_variant(bad)
    command = coldstart.container_command("img:tag", "box", 9123)
    assert command[:3] == ["podman", "run", "--rm"] and command[-1] == "img:tag"
    assert "127.0.0.1:9123:9123" in command and "PORT=9123" in command  # the port as Cloud Run gives it
    assert "TTS_QUIET_WINDOW_S=0" in command and f"TTS_ADMIN_TOKEN={coldstart.TOKEN}" in command
    assert not any(arg.startswith("TTS_MODEL_PATH") for arg in command)  # the image keeps its own model


def _run(first_audio: float, ready: float) -> dict[str, object]:
    return {"ready_s": ready, "first_audio_s": first_audio, "start_parts": {"total_s": 0.2}, "first_served_by":
            {"onnxruntime": 1}, "released": [{"first_audio_s": 1.7, "parts": {"total_s": 0.8}}]}


def test_the_report_gives_ratios_to_the_script_and_the_script_in_the_container() -> None:
    results: dict[str, object] = {
        "run": {"id": "x", "command": "python -m bench coldstart", "runs": 2, "release_cycles": 1,
                "text": coldstart.TEXT, "voice": coldstart.VOICE},
        "machine": {"cpu_model": "cpu", "logical_cpus": 2},
        "script": [{"opened_s": 1.0, "first_audio_s": 2.0}, {"opened_s": 1.0, "first_audio_s": 2.2}],
        "container_script": {"image": "img:tag", "runs": [{"first_audio_s": 2.4}, {"first_audio_s": 2.6}]},
        "variants": {"local": {"settings": {}, "runs": [_run(2.0, 1.0), _run(2.4, 1.2)]},
                     "box": {"settings": {coldstart.CONTAINER: "img:tag"}, "runs": [_run(2.6, 1.4), _run(2.8, 1.5)]}},
    }
    results["summary"] = summary = startreport.summarize(results)
    assert summary["script_first_audio_s"] == pytest.approx(2.1)
    assert summary["container_script_first_audio_s"] == pytest.approx(2.5)
    assert summary["local"]["first_audio_ratio"] == pytest.approx(2.2 / 2.1)
    assert summary["local"]["paired_ratios"] == pytest.approx([1.0, 2.4 / 2.2])
    report = startreport.render(results)
    assert "The same script in the container (`img:tag`" in report and "**2.50 s**" in report
    assert "| `box` | `container=img:tag` |" in report
    assert "release cycles per server run." in report  # no wait after a release asked for: none reported
    results["run"]["released_wait_s"] = 3.0  # type: ignore[index]
    assert "each request sent 3 s after the release's answer" in startreport.render(results)
