"""The tests drive behaviour: they assert what a client or an operator can see (a response, `/v1/info`,
`/v1/lifecycle`, `/metrics`, a return value, a file, the process list), not log text or private state.

A handful of exceptions are allowed where nothing public shows a behaviour that matters (a warning only the log
carries); these limits keep them a handful."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MAX_LOG_READS = 10
MAX_PRIVATE_SETS = 5
MAX_PRIVATE_USES = 15


def _files() -> Iterator[tuple[str, str]]:
    """Every test module's path and text, but this one's (it names what it looks for)."""
    for path in sorted(TESTS.rglob("*.py")):
        if path != Path(__file__).resolve():
            yield path.relative_to(TESTS.parent).as_posix(), path.read_text()


def _is_log_read(node: ast.AST) -> bool:
    """``caplog.text``, ``caplog.records``, ``record.getMessage()``, or a live server's ``server.log()``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "caplog":
        return node.attr in ("text", "records", "messages", "record_tuples")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "getMessage" or (node.func.attr == "log" and not node.args and not node.keywords)
    return False


def log_reads() -> list[str]:
    """Where a test reads log text, but for a failure message (``assert ok, server.log()``): that asserts nothing."""
    found = []
    for rel, text in _files():
        tree = ast.parse(text)
        messages = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assert) and a.msg for n in ast.walk(a.msg)}
        found += [f"{rel}:{n.lineno}" for n in ast.walk(tree) if _is_log_read(n) and id(n) not in messages]
    return found


PRIVATE_SET = re.compile(r"(?<!\bself)\._[a-z]\w* = ")


def private_sets() -> list[str]:
    """Where a test assigns a private attribute (``obj._name = ...``) of anything but its own ``self``; read as text,
    so that the scripts a test runs in a subprocess count too."""
    return [f"{rel}:{number}" for rel, text in _files() for number, line in enumerate(text.splitlines(), 1)
            if PRIVATE_SET.search(line)]


def test_few_tests_read_log_text() -> None:
    found = log_reads()
    assert len(found) <= MAX_LOG_READS, f"{len(found)} log reads (at most {MAX_LOG_READS}): {found}"


PRIVATE_USE = re.compile(r"\b(?!self\b|sys\b|os\b)[A-Za-z_]\w*\._(?!_)\w+|setattr\(\w+, \"_(?!_)\w+\"")
"""``module._name`` or ``obj._name`` (read, called or patched), or ``monkeypatch.setattr(obj, "_name", ...)``."""


def private_imports(text: str) -> list[int]:
    """The lines of ``from module import _name`` (a private name taken whole, which `PRIVATE_USE` cannot see)."""
    return [node.lineno for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def private_uses() -> list[str]:
    """Where a test reaches past the public surface: each should be a fault only a private name can inject, with its
    reason beside it."""
    found = [f"{rel}:{number}" for rel, text in _files() for number, line in enumerate(text.splitlines(), 1)
             for _ in PRIVATE_USE.finditer(line)]
    return found + [f"{rel}:{number}" for rel, text in _files() for number in private_imports(text)]


def test_a_private_name_is_seen_however_it_is_reached() -> None:
    text = "from app.runtime import cpu\nfrom app.runtime.cpu import _TIERS, tier\nx = cpu._TIERS\n"
    assert private_imports(text) == [2]
    assert [m.group() for m in PRIVATE_USE.finditer(text.splitlines()[2])] == ["cpu._TIERS"]


def test_few_tests_use_private_names() -> None:
    found = private_uses()
    assert len(found) <= MAX_PRIVATE_USES, f"{len(found)} private names used (at most {MAX_PRIVATE_USES}): {found}"


def test_few_tests_set_private_attributes() -> None:
    found = private_sets()
    assert len(found) <= MAX_PRIVATE_SETS, f"{len(found)} private attributes set (at most {MAX_PRIVATE_SETS}): {found}"


def test_a_500_in_a_live_servers_access_log_fails_its_test(tmp_path: Path) -> None:
    """The check `tests.conftest.live_server` runs when a server stops: a 500 fails, a 503 (not ready, shutting
    down) does not."""
    import pytest

    from tests.conftest import LiveServer, assert_no_500

    log = tmp_path / "server.log"
    served = LiveServer("http://127.0.0.1:1", None, log)  # type: ignore[arg-type]
    line = '2026-12-06 13:27:42,372 INFO uvicorn.access: 127.0.0.1:45344 - "{} HTTP/1.1" {}\n'
    log.write_text(line.format("GET /readyz", 503) + line.format("POST /v1/audio/speech", 200))
    assert_no_500(served)
    log.write_text(log.read_text() + line.format("POST /v1/audio/speech", 500))
    with pytest.raises(AssertionError, match="answered 500"):
        assert_no_500(served)
