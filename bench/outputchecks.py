"""The output checks of a benchmark run (`bench.runner`): what each configuration said against the reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import checks, inprocess, load, peers
from bench.configs import ServerConfig
from bench.runoptions import ONE_BY_ONE, REFERENCE, RERUN


def run(audio_dir: Path, takes_dir: Path, configs: Sequence[ServerConfig], clients: Sequence[int],
        progress: Callable[[str], None]) -> dict[str, Any]:
    """Every configuration's in-process audio against the ONNX Runtime reference's (`bench.checks`), the reference
    against its own rerun, and what the foreign instance and the peers served against the complete system's."""
    reference_path = audio_dir / REFERENCE
    if not reference_path.with_suffix(".npz").is_file():
        return {"error": "the ONNX Runtime reference did not run", "thresholds": dataclasses.asdict(
            checks.THRESHOLDS)}
    _, reference = inprocess.read(reference_path)
    out: dict[str, Any] = {"reference": REFERENCE, "thresholds": dataclasses.asdict(checks.THRESHOLDS),
                           "configs": {}}
    names = [RERUN] + [c.name for c in configs if c.name != REFERENCE and c.kind not in ("foreign", "peer")]
    if (audio_dir / ONE_BY_ONE).with_suffix(".json").is_file():
        names.append(ONE_BY_ONE)
    for name in names:
        path = audio_dir / name
        if not path.with_suffix(".npz").is_file():
            out["configs"][name] = {"passed": False, "error": "no in-process audio (the job failed)"}
            continue
        _, audio = inprocess.read(path)
        verdict, chunk_checks = checks.compare(name, REFERENCE, reference, audio)
        out["configs"][name] = dataclasses.asdict(verdict) | {"chunks_detail": [
            dataclasses.asdict(c) | {"sample_diff": c.sample_diff} for c in chunk_checks]}
    # The reference configuration is checked by its own rerun: run-to-run agreement.
    out["configs"][REFERENCE] = dict(out["configs"][RERUN]) | {"name": REFERENCE}
    out["served"] = _served(takes_dir, configs, clients, progress)
    progress("    output checks: " + ", ".join(
        f"{n} {'pass' if v.get('passed') else 'FAIL'}" for n, v in out["configs"].items() if n != RERUN))
    return out


def _takes(takes_dir: Path, clients: Sequence[int], name: str) -> dict[str, Any]:
    """The first complete response to each utterance over a configuration's load levels, fewest clients first."""
    found: dict[str, Any] = {}
    for count in clients:
        path = takes_dir / f"{name}-c{count}.npz"
        if path.is_file():
            for key, audio in load.read_takes(path).items():
                found.setdefault(key, audio)
    return found

def _served(takes_dir: Path, configs: Sequence[ServerConfig], clients: Sequence[int],
            progress: Callable[[str], None]) -> dict[str, Any]:
    """The foreign instance and the peers against the tuned server, on what each served (`bench.peers`)."""
    served = [c.name for c in configs if c.kind in ("foreign", "peer")]
    if not served:
        return {}
    reference = _takes(takes_dir, clients, "complete")
    if not reference:
        return {name: {"name": name, "passed": False, "error": "the complete system served nothing to compare"}
                for name in served}
    out = {name: peers.check_takes(name, "complete", reference, _takes(takes_dir, clients, name)) for name in served}
    progress("    served checks: " + ", ".join(
        f"{n} {'pass' if v.get('passed') else 'FAIL'} ({v.get('utterances', 0)} utterances)"
        for n, v in out.items()))
    return out
