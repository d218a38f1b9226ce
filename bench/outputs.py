"""What a benchmark run writes from its results (`bench.runner`): derived figures, figures.json, plots, the cost
audits and report.md; and the same again from a results.json alone (`rerender`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from bench import figures, plots, report

log = logging.getLogger(__name__)


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    """Derived figures, figures.json, plots, cost audits and the report, from a results dict."""
    derived = figures.derive(results)
    results["derived"] = derived
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "figures.json").write_text(json.dumps(derived["figures_file"], indent=2) + "\n")
    plots.efficiency(out / "efficiency.png", results)
    plots.idle_memory(out / "memory_idle.png", results)
    plots.daily_bill(out / "daily_bill.png", derived)
    audits = audit_cost(out)
    (out / "report.md").write_text(report.render(results, audits))


def audit_cost(out: Path) -> dict[str, str]:
    """Run the cost audit (``python -m bench cost``) on this run's figures, once per rates preset."""
    from bench import audit

    made: dict[str, str] = {}
    figures_data = json.loads((out / "figures.json").read_text())
    if not figures_data.get("configurations"):
        return made
    for preset in figures.PRESETS:
        folder = out / f"cost-{preset}"
        try:
            audit.main(["cost", "--run", str(out), "--billing", preset, "--out", str(folder)])
            made[preset] = f"cost-{preset}/report.md"
        except (ValueError, KeyError, OSError) as exc:
            log.warning("cost audit %s failed: %s", preset, exc)
    return made


def rerender(out: Path) -> Path:
    """Re-derive figures and rewrite the report from an existing results.json (no measuring)."""
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    write_outputs(out, results)
    return out / "report.md"
