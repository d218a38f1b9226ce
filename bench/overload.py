"""Overload: closed-loop clients at ``factor`` × the server's capacity for a while, nothing lost.

Capacity is what the server admits at once (``/v1/info``'s pool capacity: the listeners it plays in real time
and those queued for them, or TTS_MAX_REQUESTS). Every client loops: it asks for one of a few texts, streamed
as PCM; an admitted request must bring exactly the bytes a solo run of the same text brought, a refused one
must be a 429 with ``Retry-After``, and nothing may be a 5xx or a transport error. A refused client waits a
short random pause (not the full Retry-After), so the pressure stays on. Afterwards the server must be healthy
and speak the same audio as before.

``python -m bench overload --minutes 3 --out DIR`` starts a server (default settings) and records
overload.json and overload.md; `run` works against any running server (the test suite's).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import load
from bench.configs import ServerConfig
from bench.server import Server

TEXTS = ("Short and quick.", "A somewhat longer sentence, which makes a second chunk. And then it ends.",
         "Overload must never cut this one short.")


@dataclass
class Outcome:
    status: int
    seconds: float
    """Until the last byte (admitted) or until the refusal arrived."""
    first_byte_s: float = 0.0
    size: int = 0
    expected: int = 0
    retry_after: str | None = None
    error: str = ""


@dataclass
class OverloadResult:
    capacity: int
    clients: int
    duration_s: float
    outcomes: list[Outcome] = field(default_factory=list)
    healthy_after: bool = False
    same_audio_after: bool = False

    def summary(self) -> dict[str, Any]:
        admitted = [o for o in self.outcomes if o.status == 200]
        refused = [o for o in self.outcomes if o.status == 429]
        return {
            "capacity": self.capacity, "clients": self.clients, "duration_s": self.duration_s,
            "requests": len(self.outcomes), "admitted": len(admitted), "refused": len(refused),
            "server_errors": sum(1 for o in self.outcomes if o.status >= 500),
            "other_status": sorted({o.status for o in self.outcomes} - {200, 429}),
            "transport_errors": sum(1 for o in self.outcomes if o.error),
            "short_audio": sum(1 for o in admitted if o.size != o.expected),
            "refused_without_retry_after": sum(1 for o in refused if not o.retry_after),
            "admitted_first_audio_p50_s": _p(admitted, 50, "first_byte_s"),
            "admitted_first_audio_p99_s": _p(admitted, 99, "first_byte_s"),
            "admitted_total_p50_s": _p(admitted, 50, "seconds"),
            "admitted_total_p99_s": _p(admitted, 99, "seconds"),
            "admitted_total_max_s": round(max((o.seconds for o in admitted), default=0.0), 3),
            "refusal_p50_s": _p(refused, 50, "seconds"),
            "refusal_p99_s": _p(refused, 99, "seconds"),
            "healthy_after": self.healthy_after, "same_audio_after": self.same_audio_after,
        }


def _p(outcomes: list[Outcome], q: float, name: str) -> float:
    return round(load.percentile([getattr(o, name) for o in outcomes], q), 3)


def _body(text: str) -> dict[str, Any]:
    return {"input": text, "voice": "af_heart", "response_format": "pcm", "stream": True}


def solo(http: httpx.Client, url: str, text: str) -> bytes:
    response = http.post(f"{url}/v1/audio/speech", json=_body(text))
    response.raise_for_status()
    return response.content


def capacity_of(url: str) -> int:
    info = httpx.get(f"{url}/v1/info", timeout=10).json()
    return int(info["pool"]["capacity"])


def run(url: str, *, duration_s: float, factor: int = 4, headers: dict[str, str] | None = None) -> OverloadResult:
    with httpx.Client(timeout=300, headers=headers) as http:
        expected = {text: solo(http, url, text) for text in TEXTS}
    capacity = capacity_of(url)
    result = OverloadResult(capacity=capacity, clients=factor * capacity, duration_s=duration_s)
    lock = threading.Lock()
    stop_at = time.monotonic() + duration_s

    def client(number: int) -> None:
        rng = random.Random(number)
        with httpx.Client(timeout=300, headers=headers) as http:
            while time.monotonic() < stop_at:
                text = TEXTS[rng.randrange(len(TEXTS))]
                outcome = _one(http, url, text, len(expected[text]))
                with lock:
                    result.outcomes.append(outcome)
                if outcome.status != 200:
                    time.sleep(rng.uniform(0.05, 0.3))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(result.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with httpx.Client(timeout=300, headers=headers) as http:
        result.healthy_after = all(http.get(f"{url}{path}").status_code == 200 for path in ("/healthz", "/readyz"))
        result.same_audio_after = solo(http, url, TEXTS[0]) == expected[TEXTS[0]]
    return result


def _one(http: httpx.Client, url: str, text: str, expected: int) -> Outcome:
    started = time.perf_counter()
    try:
        with http.stream("POST", f"{url}/v1/audio/speech", json=_body(text)) as response:
            if response.status_code != 200:
                response.read()
                return Outcome(response.status_code, time.perf_counter() - started,
                               retry_after=response.headers.get("retry-after"))
            size = 0
            first = 0.0
            for chunk in response.iter_raw():
                if not first:
                    first = time.perf_counter() - started
                size += len(chunk)
            return Outcome(200, time.perf_counter() - started, first, size, expected)
    except httpx.HTTPError as exc:
        return Outcome(0, time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}"[:200])


def render(summary: dict[str, Any], command: str) -> str:
    rows = "\n".join(f"| {key} | {value} |" for key, value in summary.items())
    return (f"# Overload run\n\n`{command}`\n\n{summary['clients']} closed-loop clients against a capacity of "
            f"{summary['capacity']} (what it admits at once) for {summary['duration_s']:.0f} s.\n\n| figure | value |\n"
            f"|---|---|\n{rows}\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench overload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    args = parser.parse_args(argv)
    config = ServerConfig(name="overload", title="overload", backend="openvino", kind="complete", streams=0,
                          threads_per_stream=0, compile_cache=True, lifecycle=True)
    args.out.mkdir(parents=True, exist_ok=True)
    # The server's own defaults (admission in real time), not the harness's deep queue.
    settings = {"TTS_CACHE_DIR": str(args.cache_dir)}
    with Server(config, settings, args.out / "logs" / "overload.log") as server:
        server.wait_ready()
        result = run(server.url, duration_s=args.minutes * 60, factor=args.factor)
    summary = result.summary()
    command = "python -m bench overload " + " ".join(argv)
    (args.out / "overload.json").write_text(json.dumps({"command": command, "summary": summary}, indent=2) + "\n")
    (args.out / "overload.md").write_text(render(summary, command))
    print(render(summary, command))
    ok = (summary["server_errors"] == 0 and summary["transport_errors"] == 0 and summary["short_audio"] == 0
          and summary["refused_without_retry_after"] == 0 and summary["healthy_after"] and summary["same_audio_after"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
