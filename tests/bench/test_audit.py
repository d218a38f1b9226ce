"""The audit CLI runs on the shipped traces and example figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import audit

REPO = Path(__file__).resolve().parents[2]
FIGURES = REPO / "bench" / "figures_example.json"
STEADY = REPO / "bench" / "traces" / "steady_day.csv"
SPIKE = REPO / "bench" / "traces" / "security_outage_spike.csv"


def test_cost_writes_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "cost"
    code = audit.main(["cost", "--trace", str(STEADY), "--figures", str(FIGURES),
                       "--billing", "cloudrun-instance", "--out", str(out)])
    assert code == 0
    report = (out / "report.md").read_text()
    assert (out / "cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for heading in ("Cost per audio-hour", "Bursty day", "The trace, per day", "scale-to-zero (complete)"):
        assert heading in report
    numbers = json.loads((out / "audit.json").read_text())
    day = numbers["configurations"]["complete"]["bursty_day"]
    # Release lowers the metered day below the configured one; CPU is the same under both.
    assert day["metered"]["total"] < day["configured"]["total"]
    assert day["metered"]["cpu"] == day["configured"]["cpu"]


def test_cost_reads_a_benchmark_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIGURES, run / "figures.json")
    out = tmp_path / "out"
    assert audit.main(["cost", "--run", str(run), "--trace", str(SPIKE), "--billing", "cloudrun-request",
                       "--memory", "metered", "--out", str(out)]) == 0
    assert "cloudrun-request" in (out / "report.md").read_text()


def test_autoscale_writes_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "autoscale"
    assert audit.main(["autoscale", "--trace", str(SPIKE), "--start-times", "26,336", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert (out / "autoscale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| 26 s |" in report and "| 336 s |" in report
    rows = json.loads((out / "audit.json").read_text())["rows"]
    assert [r["start_time_s"] for r in rows] == [26.0, 336.0]
    assert rows[0]["buffer_needed"] < 0.03 < rows[1]["buffer_needed"]
