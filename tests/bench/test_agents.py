"""`bench.agents` (``python -m bench agents``) against the fake engine on a real uvicorn (fast): its sessions speak
replies over the multi-context socket and are measured, a barge-in is timed to its ``isFinal``, the HTTP pass gives
its CPU ratio, its percentiles are every report's (`bench.load.percentile`) and its report has a row per level."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import agents, load
from tests.bench.fake_server import fake_server

REPLY = "Sure, I can help with that. Your order shipped on Monday. It should arrive by Thursday, I think."


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fake_server(tmp_path_factory.mktemp("cache")) as found:
        yield found.replace("http://", "ws://")


def test_a_level_measures_replies_barge_ins_and_the_http_ratio(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agents, "TURN_GAP_S", 0.0)
    # 20 tokens a second: its text comes over a second and more, so that its audio is still coming at a barge-in
    found = agents.level(url, os.getpid(), 2, [REPLY], "af_heart", rate=20.0, barge_every=2, window_s=3.5)
    assert found["clients"] == 2 and found["replies"] >= 2 and found["errors"] == []
    whole = [r for r in found["replies_detail"] if r["barge_s"] is None]
    assert whole and all(r["first_clause_s"] is not None and r["audio_s"] > 0 for r in whole)
    assert found["first_clause_p50_s"] is not None and found["http_audio_s"] > 0
    assert found["barge_ins"] >= 1 and found["barge_in_final_max_s"] is not None
    assert "| 2 |" in agents.report({"command": "python -m bench agents", "levels": [found]})


def test_its_percentiles_are_every_reports() -> None:
    values = [float(v) for v in range(1, 11)]
    assert agents.percentile(values, 90) == round(load.percentile(values, 90), 3) == 9.1  # nearest-rank said 10
    assert agents.percentile([], 50) is None


def test_a_reply_is_sent_in_token_sized_pieces(tmp_path: Path) -> None:
    assert "".join(agents.pieces(REPLY)) == REPLY
    assert {len(p) for p in agents.pieces(REPLY)[:-1]} == {agents.TOKEN_CHARS}
