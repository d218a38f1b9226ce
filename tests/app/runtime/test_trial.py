"""A trial that dies in the runtime (OpenVINO has segfaulted inside ``infer`` with bf16) only rules its
candidate out: the tuner sees an error, not a crash of its own."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from app.runtime import ranking, tuner
from app.runtime.tuning import Candidate


def test_a_segfaulting_trial_fails_its_candidate_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An interpreter that dies by SIGSEGV the moment it starts, as a runtime crash inside infer would.
    crashing = tmp_path / "python"
    crashing.write_text(f"#!/bin/sh\nkill -{signal.SIGSEGV.name.removeprefix('SIG')} $$\n")
    crashing.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(crashing))
    with pytest.raises(RuntimeError, match=f"signal {int(signal.SIGSEGV)}"):
        tuner.subprocess_trial(Candidate("openvino", "bf16", 2, 1), {"folder": str(tmp_path), "round": 0})
    result = ranking.Result(Candidate("openvino", "bf16", 2, 1), error=f"trial ended with signal {int(signal.SIGSEGV)}")
    best, why = ranking.choose([result])
    assert best is None and "no candidate" in why
