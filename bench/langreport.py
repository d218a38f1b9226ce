"""The README of a ``python -m bench quality --languages`` run (`bench.languages`): how it was made, the table, and
every error heard."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pct(summary: dict[str, Any] | None) -> str:
    return f"{100.0 * summary['rate']:.1f} % ({summary['errors']}/{summary['units']})" if summary else "n/a"


def render(results: dict[str, Any], sides: Sequence[str]) -> str:
    run_info = results["run"]
    lines = [f"# Intelligibility per language: {run_info['id']}", "", f"`{run_info['command']}`", "",
             f"{run_info['started']} to {run_info['finished']}, {results['machine']['cpu_model']} "
             f"({results['machine']['logical_cpus']} CPUs), commit {run_info['commit']}, voices "
             f"{run_info['voices_file']}{'; counted again ' + run_info['rescored'] if 'rescored' in run_info else ''}"
             f". Recogniser: {run_info['recogniser']}. Error rates as `bench/langscore.py` "
             "defines them: word errors, or character errors (CER) over the reading for ja and zh; summed over the "
             "corpus. Sides: " + ", ".join(f"`{s}`" for s in sides) + " (see `bench/languages.py`).", "",
             "| corpus | voice | measure | " + " | ".join(sides) + " | sentences heard exactly (first side) |",
             "|---" * (len(sides) + 4) + "|"]
    for entry in results["voices"].values():
        corpus = results["corpora"][entry["corpus"]]
        first = entry.get(sides[0], {}).get("summary", {})
        lines.append(f"| {entry['corpus']} | {entry['voice']} | {corpus['measure']} | "
                     + " | ".join(pct(entry.get(s, {}).get("summary")) for s in sides)
                     + f" | {first.get('exact', 0)}/{first.get('sentences', 0)} |")
    lines += ["", "## What was heard wrong", "", "Reference→heard, -missed, +added, after the normalisation.", ""]
    for entry in results["voices"].values():
        for side in sides:
            taken = entry.get(side, {})
            groups = taken.get("groups") or [{"items": [i], **t} for i, t in taken.get("sentences", {}).items()]
            for take in groups:
                if take["errors"]:
                    lines.append(f"- {entry['corpus']}/{entry['voice']} {side} {', '.join(take['items'])}: "
                                 f"\"{take['said']}\" heard \"{take['heard']}\" ({', '.join(take['differences'])})")
    return "\n".join(lines) + "\n"
