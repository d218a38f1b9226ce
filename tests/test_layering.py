"""Dependencies point one way: HTTP only in app/http; lifecycle/ knows nothing of app/; app/forms/ knows nothing of
the runtime, and neither knows of tuning (app/tune/)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTTP_ALLOWED = {"app/__main__.py"}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _names_from(path: Path) -> set[str]:
    """What ``from package import name`` names, as ``package.name`` (``from app import tune``)."""
    return {f"{node.module}.{alias.name}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


def test_http_stays_in_app_http() -> None:
    for path in (ROOT / "app").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("app/http/") or rel in HTTP_ALLOWED:
            continue
        bad = {m for m in imports(path) if m.split(".")[0] in ("starlette", "uvicorn")}
        assert not bad, f"{rel} imports {bad}"


def test_lifecycle_does_not_know_the_app() -> None:
    for path in (ROOT / "lifecycle").rglob("*.py"):
        bad = {m for m in imports(path) if m.split(".")[0] in ("app", "starlette", "uvicorn", "bench")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_serving_and_the_model_forms_know_nothing_of_tuning() -> None:
    """app/runtime/ serves, loading a form's file from app/forms/; app/forms/ rewrites the model and knows no runtime;
    app/tune/ measures both and may import either, never the other way round."""
    banned = {"runtime": ("app.tune",), "forms": ("app.tune", "app.runtime")}
    for package, prefixes in banned.items():
        for path in (ROOT / "app" / package).rglob("*.py"):
            found = imports(path) | _names_from(path)
            bad = {m for m in found if any(m == p or m.startswith(p + ".") for p in prefixes)}
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(packages: tuple[str, ...] = ("app", "lifecycle")) -> dict[str, set[str]]:
    """Each module of ``packages`` and the modules of theirs it imports, anywhere in its body (an import in a
    function is a dependency all the same): ``from app import served`` names ``app.served``."""
    paths = {module_name(p): p for package in packages for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found = set()
        for imported in imports(path) | _names_from(path):
            parts = imported.split(".")
            known = [".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in paths]
            if known:
                found.add(known[0])  # the module itself, or the package a name is imported from
        graph[name] = found - {name}
    return graph


def test_the_runtime_and_the_pool_reach_nothing_above_them() -> None:
    """No chain of imports leads from app/runtime/ or app/pool/ up to tuning, what is served, or HTTP: they are
    the layers those stand on (`app.runtime.early` is handed what is served by ``python -m app``)."""
    graph = import_graph()
    above = ("app.tune", "app.served", "app.http")
    for start in sorted(m for m in graph if m.startswith(("app.runtime", "app.pool"))):
        came_from: dict[str, str] = {start: ""}
        queue = [start]
        while queue:
            module = queue.pop(0)
            for imported in sorted(graph[module] - came_from.keys()):
                came_from[imported] = module
                queue.append(imported)
        for reached in came_from:
            if reached == start or not any(reached == a or reached.startswith(a + ".") for a in above):
                continue
            chain = [reached]
            while came_from[chain[-1]]:
                chain.append(came_from[chain[-1]])
            raise AssertionError(f"{start} reaches {reached}: {' -> '.join(reversed(chain))}")


def test_bench_load_talks_to_the_server_over_http_only() -> None:
    """The load generator is a user: it may not reach into the server. (The in-process ceiling
    and the output checks import the engine on purpose, to measure the runtime without HTTP.)"""
    # lifecycle.proctree reads the server's CPU time from /proc, as top would: from outside the server.
    observing = {"lifecycle.proctree"}
    for name in ("load.py", "client.py"):
        path = ROOT / "bench" / name
        if path.exists():
            bad = {m for m in imports(path) - observing
                   if m.split(".")[0] in ("app", "lifecycle", "starlette", "uvicorn")}
            assert not bad, f"bench/{name} imports {bad}"


def test_no_module_reads_the_environment_but_settings() -> None:
    for path in list((ROOT / "app").rglob("*.py")) + list((ROOT / "lifecycle").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("app/settings.py", "app/__main__.py"):
            continue
        assert "os.environ" not in path.read_text(), f"{rel} reads os.environ"


def test_no_module_over_350_lines() -> None:
    """Small modules, one concept each (docs/architecture.md's tree is the map): a module past this is split; bench/
    is held to the rule as app/ is."""
    for package in ("app", "lifecycle", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            rel, lines = path.relative_to(ROOT).as_posix(), len(path.read_text().splitlines())
            assert lines <= 350, f"{rel} has {lines} lines"


def test_no_import_circle() -> None:
    """Dependencies point one way in app/, lifecycle/ and bench/: no module reaches itself through its imports (an
    import inside a function counts, as one under ``TYPE_CHECKING`` does)."""
    graph = import_graph(("app", "lifecycle", "bench"))
    for start in sorted(graph):
        queue, seen = sorted(graph[start]), set()
        while queue:
            module = queue.pop()
            if module == start:
                raise AssertionError(f"{start} imports itself through {sorted(graph[start])}")
            if module not in seen:
                seen.add(module)
                queue.extend(graph[module])
