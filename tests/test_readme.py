"""The front door stays short, the code map (docs/architecture.md, "How it works") names every module of app/ and
lifecycle/, and the README and docs cite only results folders that are in the tree."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from app.settings import documented

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def code_map() -> str:
    found = re.search(r"## How it works\n\n```\n(.*?)```", ARCHITECTURE.read_text(), re.DOTALL)
    assert found, "docs/architecture.md has no code map under '## How it works'"
    return found.group(1)


def test_the_code_map_names_every_module() -> None:
    names = set(re.findall(r"[\w]+\.py|[\w]+/", code_map()))
    missing = []
    for package in ("app", "lifecycle"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if path.name == "__init__.py":
                if rel.parent.as_posix() not in ("app", "lifecycle") and f"{rel.parent.name}/" not in names:
                    missing.append(f"{rel.parent.as_posix()}/")
            elif path.name not in names:
                missing.append(rel.as_posix())
    assert missing == [], f"docs/architecture.md's code map leaves out {missing}"


def test_the_readme_is_at_most_300_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= 300, f"README.md has {lines} lines; reference material goes to docs/"


def test_cited_results_are_in_the_tree() -> None:
    """A figure's folder must be where the text says; docs/experiments.md names removed folders by name only
    (read from git history), so a path ``bench/results/<folder>`` always means one that is here. A command's
    ``--out`` and a placeholder (``bench/results/<run>``) name no folder."""
    missing = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for cited in re.findall(r"(?<!--out )bench/results/([A-Za-z0-9][\w.-]*)(?![\w.<-])", page.read_text()):
            if not (ROOT / "bench" / "results" / cited).exists():
                missing.append(f"{page.relative_to(ROOT)}: bench/results/{cited}")
    assert missing == [], f"cited but not in bench/results/: {sorted(set(missing))}"


MANIFESTS = [ROOT / "deploy" / "cloudrun" / "service.yaml", ROOT / "deploy" / "knative" / "service.yaml"]


def test_the_readme_deploy_figures_are_the_manifests() -> None:
    """The README's CPUs, memory and requests at a time per instance are what both manifests say."""
    found = re.search(r"with (\d+) vCPUs\s+and (\d+) MiB, at most (\d+) requests at a time", README.read_text())
    assert found, "README.md's Deploy section no longer states 'with N vCPUs and M MiB, at most K requests at a time'"
    cpus, memory, concurrency = found.groups()
    for path in MANIFESTS:
        spec = yaml.safe_load(path.read_text())["spec"]["template"]["spec"]
        limits = spec["containers"][0]["resources"]["limits"]
        assert (limits["cpu"], limits["memory"], str(spec["containerConcurrency"])) == (
            cpus, f"{memory}Mi", concurrency), path.relative_to(ROOT)


def test_the_readme_settings_are_the_servers() -> None:
    """Every variable the README's settings table lists is one `app.settings` reads, with its default."""
    rows = re.findall(r"^\| `(TTS_\w+)` \| ([^|]+) \|", README.read_text(), re.MULTILINE)
    assert len(rows) >= 8, "README.md's settings table is missing"
    defaults = {name: default for name, default, _ in documented()}
    spelled = {"empty": "", "unset": "None"}
    for name, shown in rows:
        assert name in defaults, f"README.md lists {name}, which app/settings.py does not read"
        shown = spelled.get(shown.strip(), shown.strip().strip("`"))
        assert shown == defaults[name] or _number(shown) == _number(defaults[name]) is not None, (
            name, shown, defaults[name])


def _number(text: str) -> float | None:
    """``45`` and ``45.0`` alike; None for what is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def _results(folder: str, name: str = "results.json") -> Any:
    return json.loads((ROOT / "bench" / "results" / folder / name).read_text())


def test_the_readme_figures_are_the_runs_it_cites() -> None:
    """Each measured figure the README states outside its performance table is read here from the file it cites, so
    that a new run that moves it fails this test until the text says so too."""
    text = " ".join(README.read_text().split())
    start = _results("coldstart-20261206-zen4-quiet")["summary"]["head"]
    assert f"{start['ready_s']:.2f} s to ready, {start['first_audio_s']:.2f} s to first audio" in text
    measured = json.loads((ROOT / "deploy" / "measured.json").read_text())
    assert f"ready in about 2 s ({measured['cold_start_ready_s']:.2f} s, `deploy/measured.json`)" in text
    summaries = _results("run-20261206-zen4-peers")["derived"]["summaries"]
    release = summaries["complete"]["release"]
    assert f"first audio {release['first_audio_median']:.2f} s after a release on Zen 4 (the median of " \
           f"{release['first_audio_cycles']} cycles" in text
    low, high = sorted(round(summaries[c]["release"]["released_median_mb"]) for c in ("complete", "foreign"))
    assert f"Released memory is {low}-{high} MiB there" in text
    default = next(default for name, default, _ in documented() if name == "TTS_WYOMING_PORT")
    assert default == "0" and "`TTS_WYOMING_PORT` (off by default" in text
