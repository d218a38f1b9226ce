"""One door for configuration: every setting is a ``TTS_*`` environment variable.

`Settings.from_env` is the only place that reads the environment (the CLI maps its flags onto the
same names). A bad value fails at start with the variable's name and the value.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "TTS_"
BACKENDS = ("auto", "openvino", "onnxruntime")
PRECISIONS = ("f32", "bf16", "f16")
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
SECRETS = ("admin_token", "api_key", "metrics_token")
"""Fields shown only as "set" or empty, never their values."""


class SettingsError(ValueError):
    """A setting has a value the server cannot use; the message names the variable."""


def _default_cache_dir() -> Path:
    return Path(os.path.expanduser("~")) / ".cache" / "kokoro-tts"


@dataclass(frozen=True)
class Settings:
    """Everything an operator can set. Field ``x`` is read from ``TTS_X``; each is a decision about the deployment,
    never about how the audio is made (the same request gives the same bytes whatever is set here, but the model,
    its backend and precision, and the voices)."""

    host: str = "0.0.0.0"
    """Interface to listen on."""
    port: int = 8080
    """TCP port; ``PORT`` (as Cloud Run sets it) is used when ``TTS_PORT`` is unset."""
    wyoming_port: int = 0
    """TCP port of the Wyoming server (Home Assistant's voice protocol; it expects 10200), on ``host``, beside HTTP;
    0 is off."""
    api_key: str = ""
    """Bearer token required on every endpoint but ``/healthz`` and ``/readyz``; empty means open."""
    admin_token: str = ""
    """Bearer token for the admin endpoints (manual release); empty disables them."""
    metrics_token: str = ""
    """Bearer token for ``/metrics`` alone, so a scraper need not hold the API key; empty means ``/metrics``
    takes ``TTS_API_KEY`` like the other endpoints."""
    backend: str = "auto"
    """Inference runtime: ``auto`` serves what ``python -m app tune`` measured fastest on this CPU or its class,
    else ONNX Runtime on the ``fused`` form; ``openvino`` or ``onnxruntime`` force one, on the model file as shipped."""
    precision: str = "f32"
    """OpenVINO's inference precision (``f32``, ``bf16``, ``f16``) with a forced backend; ``auto`` takes the tuned
    one. Set ``bf16`` on CPUs with AMX for speed at audio slightly off the reference."""
    model_path: Path | None = None
    """ONNX model file; unset means the embedded int8 Kokoro-82M assembled from PyPI packages."""
    model_sha256: str = ""
    """Expected sha256 of ``model_path``, checked at start; empty skips the check (the embedded model is always
    checked). Set it to pin a model file, and to key its tuning and compile cache without hashing it."""
    cache_dir: Path = field(default_factory=_default_cache_dir)
    """Writable directory for the assembled model and the compile caches; point it at fast local storage."""
    baked_cache_dir: Path | None = None
    """Read-only cache baked into the image at build time (`python -m app.tune.build`, ``python -m app tune``);
    used where its key matches this machine."""
    streams: int = 0
    """Inference streams (concurrent inferences); 0 sizes them from the CPUs the container has."""
    threads_per_stream: int = 0
    """Threads per stream; 0 sizes them from the CPUs the container has."""
    voices_path: Path | None = None
    """Voices file (``.npz`` or the official ``voices-v1.0.bin``); unset means the embedded voices."""
    default_voice: str = ""
    """Voice used when a request names none; empty is ``af_heart`` (or the voices file's first voice where it lacks
    that one)."""
    voice_aliases: str = ""
    """Extra voice names, ``alias=voice`` separated by commas (``alloy=af_heart,onyx=am_adam(2)+am_onyx(1)``),
    over the built-in table that maps OpenAI's 13 names to English voices; a target not installed fails start."""
    lang: str = "en-us"
    """Language of voices whose name does not say one (Kokoro's names do: ``af_heart``), and the one loaded at
    start: ``en-us`` or ``en-gb``."""
    max_requests: int = 0
    """Most requests streaming or waiting at once (more get 429 with Retry-After), whatever their wait: those beyond
    the listeners the pool plays in real time wait for a place. 0 admits in real time: those listeners (`/v1/info`'s
    ``pace``), and those whose first audio would still come within 2 s."""
    max_input_chars: int = 4096
    """Longest accepted ``input``; longer gets 413. Lower it to bound how long one request can run."""
    send_timeout_s: float = 20.0
    """Seconds a client may acknowledge no bytes while bytes wait for it before its streamed response is aborted and
    its place freed, however slowly the server makes them; 0 waits for ever."""
    quiet_window_s: float = 45.0
    """Seconds without a request in flight before the model's memory is released (the next request restores it);
    0 never releases. Raise it where restores are too frequent, lower it where idle memory is billed."""
    shutdown_grace_s: float = 10.0
    """Seconds in-flight streams get to finish after SIGTERM before they are cut; 0 cuts them at once. Keep it
    below the platform's kill delay (Cloud Run: 10 s)."""
    log_level: str = "info"
    """Python logging level name."""
    web: bool = True
    """Serve the page at ``/web`` to try voices and formats from a browser (it calls the same API, so
    ``TTS_API_KEY`` still applies to speech); 0 answers 404 there."""

    @classmethod
    def from_process(cls) -> Settings:
        """`from_env` on this process's environment (for entry points other than ``python -m app``)."""
        return cls.from_env(os.environ)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> Settings:
        """Build settings from ``TTS_*`` variables (and ``PORT``); ``overrides`` win over both."""
        removed = [f"{name} was removed: {why}" for name, why in REMOVED.items() if name in env]
        if removed:
            raise SettingsError("; ".join(removed))
        values: dict[str, Any] = {}
        if "PORT" in env and f"{PREFIX}PORT" not in env:
            values["port"] = _convert("PORT", env["PORT"], int)
        for f in dataclasses.fields(cls):
            name = f"{PREFIX}{f.name.upper()}"
            if name in env:
                values[f.name] = _convert(name, env[name], _kind(f))
        for key, value in overrides.items():
            if value is not None:
                values[key] = value
        return cls(**values)

    def __post_init__(self) -> None:
        checks = [
            ("backend", self.backend in BACKENDS, f"one of {', '.join(BACKENDS)}"),
            ("precision", self.precision in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
            ("port", 0 <= self.port <= 65535, "a TCP port"),
            ("wyoming_port", 0 <= self.wyoming_port <= 65535, "0 (off) or a TCP port"),
            ("streams", self.streams >= 0, "0 (auto) or more"),
            ("threads_per_stream", self.threads_per_stream >= 0, "0 (auto) or more"),
            ("max_requests", self.max_requests >= 0, "0 (in real time) or more"),
            ("max_input_chars", self.max_input_chars > 0, "positive"),
            ("lang", self.lang in ("en-us", "en-gb"), "en-us or en-gb"),
            ("quiet_window_s", self.quiet_window_s >= 0, "0 (off) or more"),
            ("shutdown_grace_s", self.shutdown_grace_s >= 0, "0 or more"),
            ("send_timeout_s", self.send_timeout_s >= 0, "0 (off) or more"),
            ("log_level", self.log_level.upper() in LOG_LEVELS, f"one of {', '.join(LOG_LEVELS).lower()}"),
            ("model_sha256", self.model_sha256 == "" or _is_sha256(self.model_sha256), "64 hex digits or empty"),
        ]
        try:
            self.alias_table()
        except ValueError as exc:
            raise SettingsError(f"{PREFIX}VOICE_ALIASES={self.voice_aliases!r}: {exc}") from None
        for name, ok, expected in checks:
            if not ok:
                raise SettingsError(f"{PREFIX}{name.upper()}={getattr(self, name)!r}: must be {expected}")

    def alias_table(self) -> dict[str, str]:
        """`voice_aliases` as a dict; raises ValueError on bad syntax."""
        out: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in self.voice_aliases.split(","))):
            alias, sep, target = (s.strip() for s in item.partition("="))
            if not sep or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", alias) or not target:
                raise ValueError(f"{item!r} is not 'alias=voice'")
            out[alias] = target
        return out

    def public(self) -> dict[str, Any]:
        """Settings as JSON-safe values, secrets masked (for logs and the info endpoint)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in SECRETS:
                value = "set" if value else ""
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out


def _is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text.lower())


def _kind(f: dataclasses.Field[Any]) -> type:
    text = str(f.type)
    for kind in (bool, int, float):
        if text == kind.__name__:
            return kind
    return Path if "Path" in text else str


def _convert(name: str, raw: str, kind: type) -> Any:
    raw = raw.strip()
    try:
        if kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(raw)
        if kind is Path:
            return Path(raw) if raw else None
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected {kind.__name__}") from None


_CHUNKING = "chunking depends on the text only (app/text/chunker.py)"
_SCHEDULER = "a constant of the deadline scheduler (app/pool/)"
_BRIDGE = ("the ONNX Runtime bridge is gone: one engine serves every request of an instance, so the same request "
           "gives the same bytes (docs/experiments.md)")
_EXPERIMENT = "an experiment that lost (docs/experiments.md)"
REMOVED: dict[str, str] = {
    f"{PREFIX}{name}": why for name, why in [
        ("FIRST_CHUNK_TOKENS", _CHUNKING), ("SECOND_CHUNK_TOKENS", _CHUNKING), ("MAX_CHUNK_TOKENS", _CHUNKING),
        ("IDLE_FIRST_CHUNK_TOKENS", _CHUNKING), ("LONE_FIRST_CHUNK_TOKENS", _CHUNKING),
        ("BUSY_MAX_CHUNK_TOKENS", _CHUNKING), ("BUSY_SHORT_STREAMS", _CHUNKING), ("SLACK_CHUNKS", _CHUNKING),
        ("SLACK_HEADROOM", _CHUNKING),
        ("WIDE_CHUNK_TOKENS", "the wide session is gone: every chunk runs on a stream"),
        ("WIDE_FORM", "the wide session is gone: every chunk runs on a stream"),
        ("WIDE_TRIALS", "the wide session is gone: every chunk runs on a stream"),
        ("SCHEDULER", "chunks are always scheduled by playback deadline"),
        ("DEADLINE_MARGIN_S", _SCHEDULER), ("FIRST_CHUNK_CREDIT_S", _SCHEDULER),
        ("REALTIME_FACTOR", "admission counts the listeners the pace plays in real time (app/tune/speed.py)"),
        ("REALTIME_MAX_HOLD_S", _SCHEDULER),
        ("EXPRESS_SLOTS", f"the express lane was {_EXPERIMENT}"),
        ("QUICK_FRONTEND", "every request is phonemized by misaki, so its speech does not depend on when it came"),
        ("RELEASE_FRONTEND", "the text front end always stays loaded across a release"),
        ("RESTORE_BRIDGE", _BRIDGE), ("START_BRIDGE", _BRIDGE),
        ("BRIDGE_SPIN_US", _BRIDGE), ("RELEASED_BRIDGE", _BRIDGE),
        ("RELEASED_PROCESS", "the next inference process always waits while released"),
        ("INFERENCE_PROCESS", "the model always runs in an inference process that a release ends"),
        ("WARM_UP", "every load is warmed up"),
        ("COMPILE_CACHE", "OpenVINO's compile cache is always used (under TTS_CACHE_DIR)"),
        ("SHAPE_CACHE", "OpenVINO's per-shape kernel cache is always off, which bounds memory"),
        ("RUNTIME_DEFAULTS", "a benchmark baseline (bench/configs.py); the server always sizes its runtime"),
        ("TUNE_MEMORY_PRICE", "pass `python -m app tune --memory-price`"),
        ("MALLOC_ARENAS", "a constant of the processes' allocator (lifecycle/trim.py)"),
        ("MALLOC_MMAP_THRESHOLD_KB", "a constant of the processes' allocator (lifecycle/trim.py)"),
        ("RECOVERY_BACKOFF_S", "a constant of the lifecycle (lifecycle/manager.py)"),
        ("RECOVERY_ATTEMPTS", "a constant of the lifecycle (lifecycle/manager.py): liveness fails after 5 failed "
                              "loads or restores in a row"),
        ("QUEUE_SIZE", "admission counts listeners in real time now; TTS_MAX_REQUESTS fixes the most admitted at once"),
    ]
}
"""Variables the server no longer reads, and why: one still set fails at start (`Settings.from_env`), so a
deployment is never silently configured by something that does nothing."""

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Network", ("host", "port", "wyoming_port")),
    ("Access", ("api_key", "admin_token", "metrics_token")),
    ("Model and runtime", ("backend", "precision", "model_path", "model_sha256", "cache_dir", "baked_cache_dir",
                           "streams", "threads_per_stream")),
    ("Voices and text", ("voices_path", "default_voice", "voice_aliases", "lang")),
    ("Requests", ("max_requests", "max_input_chars", "send_timeout_s")),
    ("Lifecycle", ("quiet_window_s", "shutdown_grace_s")),
    ("Operations", ("log_level", "web")),
)
"""The settings page's sections, in order; every field is in exactly one."""


def docstrings() -> dict[str, str]:
    """Each field's attribute docstring, as written."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(Settings))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[node.target.id] = str(after.value.value)
    return docs


def documented() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, from the attribute docstrings."""
    docs = docstrings()
    rows = []
    for f in dataclasses.fields(Settings):
        default = f.default if f.default is not dataclasses.MISSING else "~/.cache/kokoro-tts"
        rows.append((f"{PREFIX}{f.name.upper()}", str(default), " ".join(docs.get(f.name, "").split())))
    return rows


PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
"""Where `page` is written (``python -m app.settings --write``), in the checkout."""

INTRO = """# Configuration

<!-- generated from app/settings.py by `python -m app.settings --write`; do not edit -->

Every setting is an environment variable (`TTS_*`), or the `python -m app` flag of the same name
(`--quiet-window-s 60` for `TTS_QUIET_WINDOW_S=60`). A bad value, or a variable this version no longer
reads, stops the server at start with a message that names it. None of them changes what a request
sounds like, except the model, its backend and precision, and the voices: the same request gives the
same audio, whatever the load.
"""


def page() -> str:
    """The settings page: `INTRO`, then one table per `GROUPS` section (reStructuredText ``code`` becomes
    Markdown `code`), then the variables removed and why."""
    rows = {name: (default, text) for name, default, text in documented()}
    lines = [INTRO]
    for title, names in GROUPS:
        lines += [f"## {title}", "", "| variable | default | meaning |", "|---|---|---|"]
        for field_name in names:
            name = f"{PREFIX}{field_name.upper()}"
            default, text = rows[name]
            shown = "unset" if default == "None" else f"`{default}`" if default else "empty"
            meaning = text.replace("``", "`").replace("|", "\\|")
            lines.append(f"| `{name}` | {shown} | {meaning} |")
        lines.append("")
    lines += ["## Removed", "", "Set, these stop the server at start:", ""]
    lines += [f"- `{name}`: {why}" for name, why in REMOVED.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """``python -m app.settings``: print the settings page; ``--write``: write it to `PAGE`."""
    if argv == ["--write"]:
        PAGE.write_text(page())
    else:
        sys.stdout.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
