"""The benchmark harness: its parts, and a quick run end to end that must leave sane figures and a report.

The quick run proves the harness works; it checks that the figures exist and are sane, never that they are fast.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.runtime.spec import SERVER
from app.settings import Settings
from app.sizing import CpuBudget
from bench import configs, cost, figures, load, meter, report, variant

ROOT = Path(__file__).resolve().parents[2]


def test_percentiles_interpolate() -> None:
    assert load.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert load.percentile([5.0], 90) == 5.0
    assert math.isnan(load.percentile([], 50))


def test_stalls_are_what_a_1x_player_starting_at_the_first_byte_waits() -> None:
    second = int(load.BYTES_PER_AUDIO_S)
    assert load.stall_seconds([]) == 0.0
    # 2 s of audio, then 1 s more at t=1.5 (in time), then 1 s more at t=5 (dry since t=3, so 2 s of wait).
    assert load.stall_seconds([(0.0, 2 * second), (1.5, second), (5.0, second)]) == pytest.approx(2.0)
    # Everything at once never stalls, however late the first byte.
    assert load.stall_seconds([(9.0, 3 * second), (9.0, second)]) == 0.0
    # After a stall the player resumes from the arrival: 1 s, then 1 s at t=3 (2 s wait), then 1 s at t=4.5 (0.5 s).
    assert load.stall_seconds([(0.0, second), (3.0, second), (4.5, second)]) == pytest.approx(2.5)


def test_the_grid_on_two_and_sixteen_cores() -> None:
    two = CpuBudget(host_logical=2, host_physical=2, affinity=2, quota=None)
    assert configs.grid(two) == [(2, 1), (1, 2)]
    names = [c.name for c in configs.all_configs(two)]
    assert names == ["ort-defaults", "ort-sized", "ov-defaults", "ov-sized-2x1", "ov-sized-1x2", "complete", "foreign",
                     "fastkokoro", "kokoro-pi"]
    sixteen = CpuBudget(host_logical=32, host_physical=16, affinity=32, quota=16.0)
    assert configs.grid(sixteen) == [(8, 1), (4, 2), (2, 4)]
    complete = next(c for c in configs.all_configs(sixteen) if c.name == "complete")
    assert (complete.streams, complete.threads_per_stream, complete.compile_cache, complete.lifecycle) == (
        4, 2, True, True)


def test_a_pool_given_stands_in_for_the_rule() -> None:
    # 16 vCPUs on 8 SMT cores: the rule picks 4 x 2; --pool 8x2 gives the study's shape to the sized and complete
    # configurations (and the grid) without changing the others.
    sixteen = CpuBudget(host_logical=32, host_physical=16, affinity=32, quota=16.0)
    pool = configs.parse_pool("8X2")
    assert (pool.streams, pool.threads_per_stream) == (8, 2)
    assert configs.grid(sixteen, pool) == [(8, 1), (8, 2), (4, 2), (2, 4)]
    by_name = {c.name: c for c in configs.all_configs(sixteen, pool)}
    assert by_name["ov-sized-8x2"].auto and not by_name["ov-sized-8x1"].auto
    assert (by_name["complete"].streams, by_name["complete"].threads_per_stream) == (8, 2)
    assert (by_name["ort-sized"].streams, by_name["ort-sized"].threads_per_stream) == (8, 2)
    assert by_name["ort-defaults"].shape == "runtime defaults"
    assert not by_name["ov-sized-4x2"].auto
    for bad in ("8", "8x", "x2", "0x2", "8x0", "8*2", "ax2"):
        with pytest.raises(ValueError, match="STREAMSxTHREADS"):
            configs.parse_pool(bad)


def test_a_run_cut_short_before_its_checks_says_so() -> None:
    # bench/device_8x2.sh stops a run at its time limit; the results saved so far have no "checks" yet, which the
    # report once showed as a failed output check.
    record = {"config": {"kind": "sized", "shape": "8x2"}, "levels": [{"clients": 1, "efficiency": 0.9,
                                                                          "throughput": 1.8, "errors": 0}]}
    results: dict[str, Any] = {"run": {"options": {"clients": [1]}}, "configs": {"ov-sized-8x2": record}}
    assert report.status_of(figures.summarize("ov-sized-8x2", record, results)).startswith("not run")
    results["checks"] = {"configs": {"ov-sized-8x2": {"passed": False}}}
    assert report.status_of(figures.summarize("ov-sized-8x2", record, results)) == "FAIL"
    results["checks"] = {"configs": {"ov-sized-8x2": {"passed": True}}}
    assert report.status_of(figures.summarize("ov-sized-8x2", record, results)).startswith("pass")


def test_only_the_complete_system_has_cache_and_lifecycle_and_only_it_runs_as_the_server_does() -> None:
    """The baselines run the model otherwise (`bench.variant`, never through a setting): every variable the harness
    sets is a setting the server reads. (The foreign instance and the peers: tests/bench/test_peers.py.)"""
    two = CpuBudget(host_logical=2, host_physical=2, affinity=2, quota=None)
    for config in configs.all_configs(two):
        if config.kind in ("foreign", "peer"):
            continue
        env = config.env(quiet_window_s=45.0, max_requests=32)
        assert env["TTS_QUIET_WINDOW_S"] == ("45.0" if config.kind == "complete" else "0")
        options = variant.decode(env)
        assert options.compile_cache is (config.kind == "complete")
        assert options.runtime_defaults is (config.kind == "defaults")
        assert options.shape_cache == (-1 if config.kind == "defaults" else 0)
        assert (options == SERVER) is (config.kind == "complete")
        assert variant.module_for(env) == ("app" if config.kind == "complete" else "bench.variant")
        Settings.from_env(env)  # no removed variable among them
    assert [c.name for c in configs.select(configs.all_configs(two), ["complete"])] == ["ort-defaults", "complete"]
    with pytest.raises(ValueError, match="unknown"):
        configs.select(configs.all_configs(two), ["nope"])


def test_the_rss_meter_reads_a_process() -> None:
    rss = meter.RssMeter()
    rss.pid = os.getpid()
    assert rss.read().billable > 10 * 1024 * 1024
    assert rss.peak() >= rss.read().billable // 2
    assert "NOT included" in rss.source


def test_a_memory_cgroup_holds_its_process_when_cgroups_are_writable() -> None:
    group = meter.MemoryCgroup.create("test")
    if group is None:
        pytest.skip("no writable memory cgroup here")
    process = None
    try:
        process = subprocess.Popen(group.wrap([sys.executable, "-c", "x = bytearray(64 << 20); input()"]),
                                   stdin=subprocess.PIPE)
        group.pid = process.pid
        deadline = time.monotonic() + 30
        while group.read().billable < 60 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert str(process.pid) in (group.path / "cgroup.procs").read_text().split()
        reading = group.read()
        assert reading.billable >= 60 << 20
        # The high-water mark, read after the reading, with the same shared-library correction.
        assert group.peak() >= reading.billable
        process.communicate(b"\n", timeout=30)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        group.remove()
    assert not group.path.exists()


FIGURE_KEYS = ("efficiency", "throughput_audio_s_per_s", "vcpus", "warm_memory_mb", "idle_memory_mb",
               "peak_memory_mb", "cold_start_s")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("bench") / "quick"
    # The suite's cache: the run makes no form the other tests' servers have not made (or would not make the same).
    # Its cold start keeps the cache (the quick run starts none without it), and what its releases evict from the
    # page cache any test server's release evicts too.
    cache = cache_dir
    started = time.monotonic()
    # The quick run cut down further (one client count, the short utterance, shorter windows, one release cycle):
    # every part of the harness still runs once.
    smaller = ["--clients", "1", "--ramp-s", "1", "--window-s", "6", "--drain-s", "3", "--idle-s", "3",
               "--quiet-window-s", "2", "--release-cycles", "1", "--growth-cycles", "1", "--items", "s1"]
    subprocess.run([sys.executable, "-m", "bench", "run", "--quick", *smaller, "--out", str(out), "--cache-dir",
                    str(cache)], cwd=ROOT, check=True, timeout=900)
    print(f"quick run took {time.monotonic() - started:.0f} s")
    return out


@pytest.mark.slow
def test_the_quick_run_writes_the_report_and_plots(quick_run: Path) -> None:
    for name in ("results.json", "figures.json", "report.md", "efficiency.png", "memory_idle.png", "daily_bill.png"):
        assert (quick_run / name).stat().st_size > 0, name
    report = (quick_run / "report.md").read_text()
    for heading in ("## Headline", "## Targets", "## Output checks", "## Cost", "## Method", "## Machine"):
        assert heading in report
    assert (quick_run / "cost-study" / "report.md").is_file()
    assert (quick_run / "cost-cloudrun-instance" / "report.md").is_file()
    assert sorted(p.name for p in (quick_run / "levels").iterdir()) == [
        "complete-c1.json", "ort-defaults-c1.json"]


@pytest.mark.slow
def test_the_quick_run_figures_are_sane(quick_run: Path) -> None:
    results = json.loads((quick_run / "results.json").read_text())
    for name in ("ort-defaults", "complete"):
        record = results["configs"][name]
        assert record["errors"] == []
        for level in record["levels"]:
            for key in ("efficiency", "throughput", "server_cpu_s", "audio_s", "first_audio_p50", "first_audio_p90"):
                assert _positive(level[key]), (name, level["clients"], key)
            assert level["first_audio_p90"] >= level["first_audio_p50"]
            assert level["errors"] == 0
        assert _positive(record["start"]["cold_start_s"])
        assert _positive(record["peak_mb"])
        assert all(_positive(s["billable_mb"]) for s in record["idle"]["series"])
        job = results["inprocess"][name]
        assert _positive(job["efficiency"])
        # What a client is sent: the model's edge silence trimmed, so less than the model made.
        assert 0 < job["delivered_audio_s"] < job["audio_s"]
        assert job["delivered_efficiency"] == pytest.approx(job["delivered_audio_s"] / job["cpu_s"])
    cycles = results["configs"]["complete"]["release_cycles"]["cycles"]
    assert len(cycles) == 1
    assert all(_positive(c["first_audio_s"]) and _positive(c["released_mb"]) for c in cycles)
    assert [_positive(s.get("cold_start_s")) for s in results["cold_start"]["with_cache"]] == [True]
    run_to_run = results["checks"]["configs"]["ort-defaults-rerun"]
    assert run_to_run["passed"] and run_to_run["max_mel_distance"] < 1e-3
    derived = results["derived"]
    assert {t["target"] for t in derived["targets"]} >= {"Serving overhead under 5 %", "First-audio p50"}
    assert _positive(derived["ceiling"]["sized_efficiency"])


@pytest.mark.slow
def test_the_quick_run_figures_feed_the_cost_model(quick_run: Path) -> None:
    figures = cost.load_figures(quick_run / "figures.json")
    names = [f.name for f in figures.configurations]
    assert "ort-defaults" in names
    data = json.loads((quick_run / "figures.json").read_text())
    for entry in data["configurations"]:
        for key in FIGURE_KEYS:
            assert _positive(entry[key]), (entry["name"], key)
    results = json.loads((quick_run / "results.json").read_text())
    for preset in ("study", "cloudrun-instance"):
        for name in names:
            for memory in ("metered", "configured"):
                assert _positive(results["derived"]["cost"][preset][name][memory]["per_audio_hour"])
                assert _positive(results["derived"]["cost"][preset][name][memory]["day_total"])


def test_audio_is_credited_to_the_time_it_was_made_in() -> None:
    second = int(load.BYTES_PER_AUDIO_S)
    # One client: 4 audio-s made over [0, 4), then 2 over [4, 6); the window [2, 5) gets half of each.
    arrivals = [(0.0, 4.0, 4 * second), (4.0, 6.0, 2 * second)]
    assert load.window_audio_s(arrivals, 2.0, 5.0) == pytest.approx(2.0 + 1.0)
    assert load.window_audio_s(arrivals, 0.0, 6.0) == pytest.approx(6.0)
    assert load.window_audio_s([(3.0, 3.0, second)], 2.0, 5.0) == pytest.approx(1.0)
    assert load.window_audio_s([(6.0, 7.0, second)], 2.0, 5.0) == 0.0


def test_latency_variants_and_report() -> None:
    from bench import latency

    assert latency.parse_variant("deadline") == ("deadline", {})
    assert latency.parse_variant("small:TTS_STREAMS=1,TTS_MAX_REQUESTS=2") == (
        "small", {"TTS_STREAMS": "1", "TTS_MAX_REQUESTS": "2"})
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        latency.parse_variant("nope")
    with pytest.raises(argparse.ArgumentTypeError, match="fifo needs @DIR"):
        latency.parse_variant("fifo")  # the old pool's switches are settings no more
    assert latency.parse_variant(f"fifo@{ROOT}") == ("fifo", {**latency.OLD_POOL, "checkout": str(ROOT)})
    # name@DIR: the server runs from another checkout (this one here), with or without settings.
    assert latency.parse_variant(f"before@{ROOT}") == ("before", {"checkout": str(ROOT)})
    assert latency.parse_variant(f"before@{ROOT}:TTS_X=1") == ("before", {"TTS_X": "1", "checkout": str(ROOT)})
    with pytest.raises(argparse.ArgumentTypeError):
        latency.parse_variant(f"before@{ROOT / 'bench'}")  # no checkout there
    level = {"clients": 2, "first_audio_p50": 0.3, "first_audio_p90": 0.9, "stall_s_per_audio_min": 0.1,
             "stalled_requests": 1, "stall_requests_n": 9, "efficiency": 2.0, "throughput": 3.0, "first_audio_n": 10,
             "errors": 0}
    results = {"run": {"id": "x", "command": "c", "clients": [2], "ramp_s": 1.0, "window_s": 2.0, "shape": "2x1"},
               "machine": {"cpu_model": "cpu"}, "corpus": {"name": "study16"},
               "variants": {"fifo": {"settings": {}, "levels": [level]},
                            "deadline": {"settings": {"TTS_X": "1"}, "levels": [dict(level, efficiency=1.9)]}}}
    report = latency.render(results)
    assert "| 2 | `deadline` | 0.30 | 0.90 | 0.10 | 1/9 | 1.90 (0.95 x)" in report
    # A client count run twice: each run its own rows, in the order run.
    results["run"]["clients"] = [2, 2]
    for one in results["variants"].values():
        one["levels"].append(dict(one["levels"][0], first_audio_p50=0.5))
    rows = [line for line in latency.render(results).splitlines() if line.startswith("| 2 |")]
    assert [row.split(" | ")[2] for row in rows] == ["0.30", "0.30", "0.50", "0.50"]


def test_the_first_request_after_start_is_the_median_of_several_starts() -> None:
    from bench import latency

    samples = [{"ready_s": 1.0 + i / 10, "first_s": first, "warm_s": 0.7, "ratio": first / 0.7}
               for i, first in enumerate([0.77, 1.21, 0.84])]
    summary = latency.summarize_starts(samples)
    assert summary["first_s"] == 0.84 and summary["ready_s"] == 1.1 and summary["starts"] == 3
    assert summary["ratio"] == pytest.approx(1.2) and summary["ratio_min"] == pytest.approx(1.1)
    assert summary["ratio_max"] == pytest.approx(1.21 / 0.7) and summary["samples"] == samples
    results = {"run": {"id": "x", "command": "c", "clients": [], "ramp_s": 1.0, "window_s": 2.0, "shape": "2x1"},
               "machine": {"cpu_model": "cpu"}, "corpus": {"name": "study16"},
               "variants": {"a": {"settings": {}, "levels": [], "start": summary},
                            "b": {"settings": {}, "levels": [], "start": latency.summarize_starts(samples[:1])}}}
    report = latency.render(results)
    assert "| `a` | 1.10 | 0.84 | 0.70 | 1.20 (1.10-1.73) | 3 |" in report
    assert "| `b` | 1.00 | 0.77 | 0.70 | 1.10 | 1 |" in report  # one start: no range


def test_latency_variants_start_from_the_servers_own_defaults(tmp_path: Path) -> None:
    """A variant that names a tuned cache serves its tuned choice, as a server started with that setting does (the
    base forced OpenVINO until 2026-12-04); what a variant sets wins."""
    from bench import latency
    from bench.configs import ServerConfig

    config = ServerConfig("sized", "sized", "openvino", "sized", 2, 1, compile_cache=True)
    model, cache = tmp_path / "model.onnx", tmp_path / "cache"
    tuned = latency.server_env(config, {"TTS_BAKED_CACHE_DIR": "/tuned"}, model=model, cache_dir=cache)
    assert (tuned["TTS_BACKEND"], tuned["TTS_STREAMS"], tuned["TTS_THREADS_PER_STREAM"]) == ("auto", "0", "0")
    assert tuned["TTS_BAKED_CACHE_DIR"] == "/tuned" and tuned["TTS_CACHE_DIR"] == str(cache)
    assert tuned["TTS_QUIET_WINDOW_S"] == "0" and variant.OPTIONS not in tuned  # the server as it runs
    forced = latency.server_env(config, {"TTS_BACKEND": "openvino", "TTS_STREAMS": "1"}, model=model, cache_dir=cache)
    assert (forced["TTS_BACKEND"], forced["TTS_STREAMS"]) == ("openvino", "1")


def test_a_quick_run_given_a_tuned_dir_serves_the_tuned_choice(tmp_path: Path) -> None:
    from bench import runner
    from bench.__main__ import options_of, parser

    quick = options_of(parser().parse_args(["run", "--quick", "--out", str(tmp_path)]), "")
    assert not quick.tune and not quick.serves_tuned  # quick and untuned by default
    given = options_of(parser().parse_args(["run", "--quick", "--tuned-dir", str(tmp_path)]), "")
    assert given.serves_tuned and given.tuned_dir == tmp_path  # a quick run honours it too
    assert runner.Options(out=tmp_path, cache_dir=tmp_path).serves_tuned  # a full run tunes first
