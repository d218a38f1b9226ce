"""The peers and the foreign instance in the benchmark (bench/peers.py, bench/configs.py), without installing a peer:
their command lines and settings, the load client's adapter against a stand-in, a stand-in peer started, measured
and stopped as a configuration is, and the day's bill with scale-to-zero for each."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.runtime.spec import SERVER, Options
from app.settings import Settings
from app.sizing import CpuBudget
from bench import audit, client, configs, cost, figures, load, peers, quality, runner, variant
from bench import corpus as corpus_mod
from bench import server as server_mod

TWO = CpuBudget(host_logical=2, host_physical=2, affinity=2, quota=None)
SIXTEEN = CpuBudget(host_logical=16, host_physical=16, affinity=16, quota=None)
PCM = (np.arange(4800, dtype="<i2") % 200).tobytes()
"""0.1 s of 24 kHz 16-bit audio a stand-in streams."""


def _by_name(budget: CpuBudget) -> dict[str, configs.ServerConfig]:
    return {c.name: c for c in configs.all_configs(budget)}


def test_the_foreign_instance_runs_the_server_untuned_from_an_empty_cache() -> None:
    foreign = _by_name(TWO)["foreign"]
    env = foreign.env(quiet_window_s=45.0, max_requests=32)
    assert (env["TTS_BACKEND"], env["TTS_STREAMS"], env["TTS_THREADS_PER_STREAM"]) == ("auto", "0", "0")
    assert env["TTS_QUIET_WINDOW_S"] == "45.0" and "TTS_BAKED_CACHE_DIR" not in env
    # Everything as the server's own but the shipped manifests, handed over as the other baselines' options are.
    options = variant.decode(env)
    assert options == Options(shipped_tuning=False)
    assert variant.module_for(env) == "bench.variant"
    Settings.from_env(env)
    # The tuned server stays the server as shipped.
    complete = _by_name(TWO)["complete"].env(quiet_window_s=45.0, max_requests=32)
    assert variant.decode(complete) == SERVER and variant.module_for(complete) == "app"


def test_the_peers_run_at_their_recommended_threads_and_only_when_named(tmp_path: Path) -> None:
    assert (_by_name(TWO)["fastkokoro"].threads_per_stream, _by_name(TWO)["kokoro-pi"].threads_per_stream) == (2, 2)
    # fastkokoro documents min(6, CPUs); kokoro-pi "match your core count".
    assert (_by_name(SIXTEEN)["fastkokoro"].threads_per_stream, _by_name(SIXTEEN)["kokoro-pi"].threads_per_stream) == (
        6, 16)
    assert {p.requirement for p in peers.PEERS.values()} == {"fastkokoro[cpu]==0.7.0", "kokoro-pi==1.2.0"}
    default = runner.Run(runner.Options(out=tmp_path / "a", cache_dir=tmp_path))
    assert not {"foreign", "fastkokoro", "kokoro-pi"} & {c.name for c in default.configs}
    named = runner.Run(runner.Options(out=tmp_path / "b", cache_dir=tmp_path,
                                      configs=("complete", "foreign", "fastkokoro", "kokoro-pi"), voice="af_heart",
                                      ceiling_1x1=False))
    assert [c.name for c in named.configs] == ["ort-defaults", "complete", "foreign", "fastkokoro", "kokoro-pi"]
    assert {u.voice for u in named.corpus.utterances} == {"af_heart"}
    assert len(named.corpus.utterances) == len(corpus_mod.load().utterances)
    # No in-process job for the foreign instance or a peer; the complete system's runs before it starts.
    plan = named.plan_jobs()
    assert sorted(j.name for j in plan["ort-defaults"]) == ["complete", "ort-defaults", "ort-defaults-rerun"]
    assert set(plan) == {"ort-defaults"}


def test_the_peers_command_lines_use_the_shipped_model_and_voices_offline(tmp_path: Path) -> None:
    model, voices = tmp_path / "kokoro-v1.0.int8.onnx", tmp_path / "voices-v1.0.npz"
    model.write_bytes(b"onnx")
    voices.write_bytes(b"npz")
    venv = tmp_path / "venv"
    argv, env = peers.launch_spec(peers.PEERS["fastkokoro"], venv, model=model, voices=voices,
                                  work=tmp_path / "fk", port=9001, threads=2)
    assert argv == [str(venv / "bin" / "fastkokoro")]
    assert env["FASTKOKORO_MODEL_PATH"] == str(model) and env["FASTKOKORO_VOICES_PATH"] == str(voices)
    assert (env["FASTKOKORO_PORT"], env["FASTKOKORO_HOST"], env["FASTKOKORO_RUNTIME_TAIL_TRIM_MS"]) == (
        "9001", "127.0.0.1", "0")
    assert (env["FASTKOKORO_ONNX_INTRA_OP_NUM_THREADS"], env["FASTKOKORO_ONNX_INTER_OP_NUM_THREADS"]) == ("2", "1")
    assert env["HF_HUB_OFFLINE"] == "1" and env["FASTKOKORO_CACHE_DIR"].startswith(str(tmp_path / "fk"))

    argv, env = peers.launch_spec(peers.PEERS["kokoro-pi"], venv, model=model, voices=voices,
                                  work=tmp_path / "kp", port=9002, threads=2)
    assert argv[:2] == [str(venv / "bin" / "kokoro-pi"), "serve"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert flags == {"--models": str(tmp_path / "kp" / "models"), "--variant": "upstream", "--threads": "2",
                     "--host": "127.0.0.1", "--port": "9002"}
    assert env["HF_HUB_OFFLINE"] == "1" and env["XDG_CONFIG_HOME"].startswith(str(tmp_path / "kp"))
    # The directory its build would leave: one plain variant on the int8 file as is, the voices as kokoro-onnx
    # names them, nothing copied, nothing to verify.
    models = Path(flags["--models"])
    manifest = json.loads((models / "models.json").read_text())
    assert manifest["variant"] == "upstream" and manifest["checksums"] == {}
    assert manifest["variants"] == {"upstream": {"model": model.name, "custom_ops": [], "backend": "upstream-onnx"}}
    assert (models / model.name).resolve() == model.resolve()
    assert (models / "voices-v1.0.bin").read_bytes() == b"npz"
    # Laid out again (a second start) without complaint.
    peers.lay_out_kokoro_pi(models, model, voices)
    with pytest.raises(ValueError, match="unknown peer"):
        peers.launch_spec(peers.Peer("other", "o", "o", "1"), venv, model=model, voices=voices, work=tmp_path, port=1,
                          threads=1)


def test_versions_are_read_from_pip_freeze() -> None:
    frozen = "fastkokoro==0.7.0\nonnxruntime==1.32.0\nKokoro_ONNX==0.4.9\n-e git+x#egg=y\nnumpy==2.4.6\n"
    assert peers.freeze_versions(frozen, ("fastkokoro", *peers.RECORDED)) == {
        "fastkokoro": "0.7.0", "onnxruntime": "1.32.0", "kokoro-onnx": "0.4.9", "numpy": "2.4.6"}


def test_the_adapter_asks_each_server_for_streamed_pcm_on_its_own_route() -> None:
    assert client.request_for("openai", "Hi.", "af_heart") == ("/v1/audio/speech", {
        "model": "kokoro", "input": "Hi.", "voice": "af_heart", "response_format": "pcm", "speed": 1.0, "stream": True})
    assert client.request_for("kokoro-pi", "Hi.", "af_heart") == ("/v1/tts", {
        "text": "Hi.", "voice": "af_heart", "format": "s16le", "speed": 1.0, "stream": True})


class _StandIn(BaseHTTPRequestHandler):
    """kokoro-pi's streaming route as it answers: chunked s16le on POST /v1/tts; anything else is refused, so a
    client that asked otherwise gets no audio."""

    protocol_version = "HTTP/1.1"
    bodies: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/tts" or body.get("format") != "s16le" or body.get("stream") is not True:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.bodies.append(body)
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (PCM, PCM):
            self.wfile.write(f"{len(part):X}\r\n".encode() + part + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_load_client_drives_kokoro_pi_through_the_adapter_and_keeps_one_take_per_text(stand_in: str) -> None:
    items = corpus_mod.load().subset(["s1", "s2"]).with_voice("af_heart").utterances
    takes: dict[str, bytes] = {}
    result = asyncio.run(load.run_level(stand_in, os.getpid(), 1, items, ramp_s=0.1, window_s=0.4, drain_s=1.0,
                                        api="kokoro-pi", keep_takes=takes))
    assert result.errors == 0 and result.requests_completed > 2 and result.first_audio_n > 0
    assert {b["text"] for b in _StandIn.bodies} == {u.text for u in items}
    assert {b["voice"] for b in _StandIn.bodies} == {"af_heart"}
    assert takes == {"s1": PCM + PCM, "s2": PCM + PCM}
    # The same stand-in refuses OpenAI's route: nothing counts as audio then.
    refused = asyncio.run(load.run_level(stand_in, os.getpid(), 1, items, ramp_s=0.1, window_s=0.3, drain_s=0.5))
    assert refused.audio_s == 0 and refused.errors > 0 and {r.status for r in refused.records if r.status} == {404}


def test_a_peer_starts_is_measured_and_stops_like_a_configuration(tmp_path: Path) -> None:
    """A stand-in installed where fastkokoro's executable goes: started in its own cgroup with the command line and
    environment `bench.peers` gives it, ready on its own path, asked as a user asks, quiet, then stopped."""
    installed = _fake_fastkokoro(tmp_path)
    model, voices = tmp_path / "model.onnx", tmp_path / "voices.npz"
    model.write_bytes(b"x")
    voices.write_bytes(b"x")
    config = _by_name(TWO)["fastkokoro"]
    server = server_mod.peer_server(config, installed, model=model, voices=voices, work=tmp_path / "work",
                          log_path=tmp_path / "fk.log")
    assert server.ready_path == "/health" and server.argv == [str(installed.executable("fastkokoro"))]
    with server:
        server.wait_ready(timeout_s=30)
        speech = client.speak(server.url, "Hello.", "af_heart")
        assert speech.audio_s == pytest.approx(len(PCM) / 48_000)
        assert peers.quiesce(server.pid, settle_s=0.2, timeout_s=5) < 5
        assert server.meter.read().billable > 0
    assert not server.alive()


_FAKE_FASTKOKORO = '''
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
for name in ("FASTKOKORO_MODEL_PATH", "FASTKOKORO_VOICES_PATH"):
    if not os.path.isfile(os.environ[name]):
        sys.exit(f"{name} is not a file")
PCM = bytes(PCM_BYTES)
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ok = self.path == "/v1/audio/speech" and body["response_format"] == "pcm"
        self.send_response(200 if ok else 400)
        self.send_header("Content-Length", str(len(PCM) if ok else 0))
        self.end_headers()
        if ok:
            self.wfile.write(PCM)
HTTPServer((os.environ["FASTKOKORO_HOST"], int(os.environ["FASTKOKORO_PORT"])), Handler).serve_forever()
'''.replace("PCM_BYTES", str(len(PCM)))


def _fake_fastkokoro(tmp_path: Path) -> peers.Installed:
    """fastkokoro's executable replaced by `_FAKE_FASTKOKORO` in a venv-shaped folder."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    script = venv / "bin" / "fastkokoro"
    script.write_text(f"#!{sys.executable}\n" + _FAKE_FASTKOKORO)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return peers.Installed(peers.PEERS["fastkokoro"], venv, {"fastkokoro": "0.7.0", "onnxruntime": "1.32.0"})


def test_quality_measures_a_peer_started_as_the_benchmark_starts_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench quality --peer``: the peer is served on the same model and voices and asked unstreamed on OpenAI's
    route; its versions go into the results (installing is replaced by the stand-in)."""
    installed = _fake_fastkokoro(tmp_path)
    monkeypatch.setattr(peers, "install", lambda peer, root, log_path: installed)
    model = tmp_path / "model.onnx"
    model.write_bytes(b"x")
    options = quality.Options(targets=(quality.Target("af_heart", None),), corpus=corpus_mod.DEFAULT, items=(),
                              out=tmp_path / "out", cache_dir=tmp_path, command="", peer="fastkokoro")
    with quality.serving(options, model, tmp_path / "work") as (url, info):
        assert info["peer"] == "fastkokoro" and info["versions"]["fastkokoro"] == "0.7.0"
        assert info["backend"] == "onnxruntime 1.32.0"
        assert len(quality.speak(url, "Hello.", options.targets[0])) == len(PCM) // 2
        assert quality.server_info(url) == {}  # no /v1/info on a peer


def test_quiesce_waits_for_a_busy_process_tree_to_go_quiet() -> None:
    spin = "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass\ntime.sleep(30)"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        waited = peers.quiesce(busy.pid, settle_s=0.2, timeout_s=10)
        assert 0.4 <= waited < 10
    finally:
        busy.kill()
        busy.wait()


def test_whole_responses_are_output_checked_against_the_tuned_servers() -> None:
    t = np.arange(24_000) / 24_000.0
    tone = (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    reference = {"s1": tone, "s2": tone[:12_000]}
    same = peers.check_takes("fastkokoro", "complete", reference, {"s1": tone.copy(), "m1": tone})
    assert same["passed"] and same["utterances"] == 1 and same["max_length_diff_pct"] == 0.0
    cut = peers.check_takes("kokoro-pi", "complete", reference, {"s1": tone[:12_000], "s2": tone[:12_000]})
    assert not cut["passed"] and cut["failed"] == ["s1"] and cut["max_length_diff_pct"] == pytest.approx(50.0)
    assert "error" in peers.check_takes("x", "complete", reference, {"l1": tone})


def _peer_figures(name: str, cold_start_s: float, lifecycle: bool) -> cost.Figures:
    return cost.Figures(name=name, efficiency=1.0, throughput_audio_s_per_s=2.0, vcpus=2, warm_memory_mb=800,
                        idle_memory_mb=700, released_memory_mb=150 if lifecycle else None, peak_memory_mb=900,
                        quiet_window_s=45 if lifecycle else 0, cold_start_s=cold_start_s)


def test_scale_to_zero_pays_each_ones_cold_start_and_the_same_idle_time() -> None:
    fig = _peer_figures("fastkokoro", cold_start_s=10.0, lifecycle=False)
    on = cost.bursty_day_usage(fig)
    zero = cost.bursty_day_usage(fig, policy="scale-to-zero", scale_to_zero_after_s=45.0)
    busy = 900.0 / 2.0  # each burst: 900 audio-s at 2 audio-s per s
    assert on.life_instance_s == cost.DAY_S
    assert zero.life_instance_s == pytest.approx(8 * (10.0 + busy + 45.0))
    assert zero.busy_instance_s == pytest.approx(8 * (10.0 + busy))
    assert zero.used_memory_mb_s == pytest.approx(8 * ((10.0 + busy) * 800 + 45.0 * 700))
    billing = cost.PRESETS["cloudrun-instance"]
    assert cost.bill(zero, billing).total < cost.bill(on, billing).total


def test_the_audit_prices_every_configuration_at_scale_to_zero_and_plots_both_days(tmp_path: Path) -> None:
    figs = [_peer_figures("complete", 2.0, True), _peer_figures("fastkokoro", 12.0, False),
            _peer_figures("kokoro-pi", 9.0, False)]
    path = tmp_path / "figures.json"
    path.write_text(json.dumps({"machine": {}, "configurations": [dataclasses.asdict(f) for f in figs]}))
    out = tmp_path / "audit"
    assert audit.main(["cost", "--figures", str(path), "--out", str(out)]) == 0
    numbers = json.loads((out / "audit.json").read_text())
    assert numbers["scale_to_zero_after_s"] == 45
    assert {r["configuration"] for r in numbers["trace_runs"].values() if r["policy"] == "scale-to-zero"} == {
        "complete", "fastkokoro", "kokoro-pi"}
    for name, entry in numbers["configurations"].items():
        assert set(entry["bursty_day_scale_to_zero"]) == {"configured", "metered"}, name
    assert (out / "cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "scale-to-zero day (configured)" in (out / "report.md").read_text()


def test_a_peer_is_priced_whatever_its_check_of_whole_responses_and_never_ranked() -> None:
    record = {"config": {"kind": "peer", "shape": "1x2"}, "levels": [
        {"clients": 1, "efficiency": 1.4, "throughput": 2.7, "errors": 0}],
        "memory_load": [{"clients": 1, "mean_mb": 700.0, "max_mb": 760.0}], "peak_mb": 800.0,
        "idle": {"warm_idle_mb": 650.0, "end_mb": 650.0}, "start": {"cold_start_s": 11.0}}
    results: dict[str, Any] = {"run": {"id": "r", "options": {"clients": [1], "quiet_window_s": 45.0}},
                               "machine": {"budget": {"cpus": 2}},
                               "configs": {"fastkokoro": record},
                               "checks": {"configs": {}, "served": {"fastkokoro": {"passed": False}}}}
    summary = figures.summarize("fastkokoro", record, results)
    assert summary["priced"] and not summary["usable"]
    fig = figures.to_figures(summary, results)
    assert fig is not None and fig.cold_start_s == 11.0 and fig.released_memory_mb is None
