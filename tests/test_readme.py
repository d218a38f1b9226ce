"""The README's code map ("How it works") names every module of app/ and lifecycle/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_map() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"## How it works\n\n```\n(.*?)```", readme, re.DOTALL)
    assert found, "README.md has no code map under '## How it works'"
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
    assert missing == [], f"README.md's code map leaves out {missing}"
