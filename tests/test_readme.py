"""The front door stays short, the code map (docs/architecture.md, "How it works") names every module of app/ and
lifecycle/, and the README and docs cite only results folders that are in the tree."""

from __future__ import annotations

import re
from pathlib import Path

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
