"""``python -m bench agents``: voice-agent sessions streaming replies in, against the HTTP path on the same text.

One server (``python -m app``, its defaults: the backend ``auto`` chooses; no release). Per client count N, N
sessions, each one socket to ``multi-stream-input`` (as Pipecat holds one), speak replies from the corpus one after
another, a context per reply: the text is sent as a language model writes it, in pieces of `TOKEN_CHARS` characters
(breaking words) at ``--tokens-per-s``, then ``flush`` and ``close_context``; the next reply starts once the last one
has played out at 1x and `TURN_GAP_S` more (the user's turn). Every ``--barge-every``-th reply is cut short a second
after its first audio by a ``close_context`` alone (a barge-in). Measured per session and reply, on the client's clock:

- first clause: from the piece that completes the reply's first clause (its mark and the space after it) to its
  first audio; later sentences: from the piece completing each to the first audio of its characters (read from the
  alignment), informational only: later text is scheduled by when the listener needs it, not as soon as possible;
- stalls: a 1x player starts at each reply's first audio; every wait for audio it has not got is a stall;
- barge-in: from ``close_context`` to ``isFinal``, and any audio of the context later than 100 ms after it;
- CPU per audio-second (the server's process tree), then the same replies, by the same N clients, as whole texts
  over ``POST /v1/audio/speech`` (pcm, streamed), for the ratio.

Writes ``results.json`` and ``report.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from bench import corpus as corpus_mod
from bench import load
from bench.server import free_port, launch, terminate, wait_ready
from lifecycle.proctree import cpu_seconds

log = logging.getLogger(__name__)

TOKEN_CHARS = 4
"""Characters per language-model token (English averages about four)."""
TURN_GAP_S = 1.0
"""The user's turn: seconds between a reply's audio played out and the next reply's first text."""
KEEP_ALIVE_S = 10.0
BYTES_PER_S = 48000
"""pcm_24000: 16-bit samples at 24 kHz."""
_CLAUSE = re.compile(r"[,;:—.!?…]+[\"')\]]*\s")
_SENTENCE = re.compile(r"[.!?…]+[\"')\]]*\s")


@dataclass
class Reply:
    first_clause_s: float | None = None
    sentences_s: list[float] = field(default_factory=list)
    audio_s: float = 0.0
    stall_s: float = 0.0
    barge_s: float | None = None
    late_audio: int = 0
    errors: list[str] = field(default_factory=list)


def pieces(text: str) -> list[str]:
    return [text[i:i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]


def _ends(text: str, pattern: re.Pattern[str]) -> list[int]:
    """Offsets just past each boundary (its mark and one whitespace) in ``text + ' '``."""
    return [m.end() for m in pattern.finditer(text + " ")]


async def _reply(ws: Any, cid: str, text: str, rate: float, barge: bool, inbox: asyncio.Queue[dict[str, Any]],
                 turn_gap_s: float) -> Reply:
    out = Reply()
    sent_at: list[tuple[int, float]] = []  # (characters sent so far, when)
    clause_end = _ends(text, _CLAUSE)[0] if _ends(text, _CLAUSE) else len(text)
    sentence_ends = _ends(text, _SENTENCE)
    nonspace = [len(re.sub(r"\s", "", text[:end])) for end in sentence_ends]

    async def send() -> None:
        await ws.send(json.dumps({"text": " ", "context_id": cid, "voice_settings": {"speed": 1.0}}))
        count = 0
        for piece in pieces(text + " "):
            await ws.send(json.dumps({"text": piece, "context_id": cid}))
            count += len(piece)
            sent_at.append((count, time.monotonic()))
            await asyncio.sleep(1 / rate)
        if not barge:
            await ws.send(json.dumps({"context_id": cid, "flush": True}))
            await ws.send(json.dumps({"context_id": cid, "close_context": True}))

    def when_sent(chars: int) -> float:
        return next(t for n, t in sent_at if n >= chars)

    sender = asyncio.create_task(send())
    first: float | None = None
    played = 0.0
    heard = 0
    closed_at: float | None = None
    next_sentence = 0
    while True:
        message = await asyncio.wait_for(inbox.get(), 120)
        now = time.monotonic()
        if message.get("isFinal"):
            if closed_at is not None:
                out.barge_s = now - closed_at
            break
        if message.get("error"):
            out.errors.append(str(message["error"]))
        if not message.get("audio"):
            continue
        seconds = len(base64.b64decode(message["audio"])) / BYTES_PER_S
        if closed_at is not None:
            out.late_audio += now - closed_at > 0.1
            continue
        if first is None:
            first = now
            out.first_clause_s = now - when_sent(clause_end)
        else:
            out.stall_s += max(0.0, now - (first + played + out.stall_s))
        played += seconds
        chars = "".join((message.get("alignment") or {}).get("chars") or [])
        heard += len(re.sub(r"\s", "", chars))
        # Sentence j + 1 starts at non-space character nonspace[j]: its first audio is the message that reaches it.
        while next_sentence + 1 < len(sentence_ends) and nonspace[next_sentence] < heard:
            done = sentence_ends[next_sentence + 1]
            if sent_at and sent_at[-1][0] >= done:
                out.sentences_s.append(now - when_sent(done))
            next_sentence += 1
        if barge and closed_at is None and now - first >= 1.0:
            sender.cancel()  # the user spoke: the language model stops writing too
            await asyncio.gather(sender, return_exceptions=True)
            await ws.send(json.dumps({"context_id": cid, "close_context": True}))
            closed_at = time.monotonic()
    await asyncio.gather(sender, return_exceptions=True)
    out.audio_s = played
    if first is not None:  # the listener hears the reply out (a barge-in: at once), then speaks for a turn
        played_out = first + (played + out.stall_s if closed_at is None else 0.0)
        await asyncio.sleep(max(0.0, played_out - time.monotonic()) + turn_gap_s)
    return out


async def _session(url: str, k: int, texts: list[str], voice: str, rate: float, barge_every: int,
                   until: float) -> list[Reply]:
    replies: list[Reply] = []
    inboxes: dict[str, asyncio.Queue[dict[str, Any]]] = {}
    async with connect(f"{url}/v1/text-to-speech/{voice}/multi-stream-input?output_format=pcm_24000",
                       max_size=2**24) as ws:
        async def read() -> None:
            async for raw in ws:
                message = json.loads(raw)
                inboxes.setdefault(str(message.get("contextId")), asyncio.Queue()).put_nowait(message)

        async def keep_alive() -> None:  # as Pipecat does: the socket closes after inactivity_timeout (20 s)
            while True:
                await asyncio.sleep(KEEP_ALIVE_S)
                await ws.send(json.dumps({"text": ""}))

        reader = asyncio.create_task(read())
        pinger = asyncio.create_task(keep_alive())
        n = 0
        while time.monotonic() < until:
            cid = f"s{k}r{n}"
            inboxes.setdefault(cid, asyncio.Queue())
            barge = barge_every > 0 and n % barge_every == barge_every - 1
            replies.append(await _reply(ws, cid, texts[(k + n) % len(texts)], rate, barge, inboxes[cid], TURN_GAP_S))
            n += 1
        reader.cancel()
        pinger.cancel()
        await ws.send(json.dumps({"close_socket": True}))
    return replies


async def _http(url: str, k: int, texts: list[str], count: int, voice: str) -> float:
    audio = 0.0
    async with httpx.AsyncClient(timeout=300) as http:
        for n in range(count):
            body = {"input": texts[(k + n) % len(texts)], "voice": voice, "response_format": "pcm"}
            async with http.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
                async for data in response.aiter_bytes():
                    audio += len(data) / BYTES_PER_S
    return audio


def percentile(values: list[float], q: float) -> float | None:
    """`bench.load.percentile` (every report's: linear interpolation, so p90s compare across reports), rounded to the
    millisecond; None where there is no value."""
    return round(load.percentile(values, q), 3) if values else None


def level(url: str, pid: int, clients: int, texts: list[str], voice: str, rate: float, barge_every: int,
          window_s: float) -> dict[str, Any]:
    cpu0 = cpu_seconds(pid)
    until = time.monotonic() + window_s
    sessions = asyncio.run(_gather([_session(url, k, texts, voice, rate, barge_every, until) for k in range(clients)]))
    socket_cpu = cpu_seconds(pid) - cpu0
    replies = [r for s in sessions for r in s]
    audio = sum(r.audio_s for r in replies)
    cpu1 = cpu_seconds(pid)
    http_audio = sum(asyncio.run(_gather([_http(url, k, texts, len(s), voice) for k, s in enumerate(sessions)])))
    http_cpu = cpu_seconds(pid) - cpu1
    whole = [r for r in replies if r.barge_s is None]
    firsts = [r.first_clause_s for r in replies if r.first_clause_s is not None]
    later = [s for r in replies for s in r.sentences_s]
    barges = [r.barge_s for r in replies if r.barge_s is not None]
    socket_per = socket_cpu / audio if audio else None
    http_per = http_cpu / http_audio if http_audio else None
    return {
        "clients": clients, "replies": len(replies), "barge_ins": len(barges), "audio_s": round(audio, 1),
        "first_clause_p50_s": percentile(firsts, 50), "first_clause_p90_s": percentile(firsts, 90),
        "later_sentence_p50_s": percentile(later, 50), "later_sentence_p90_s": percentile(later, 90),
        "stall_s_per_audio_min": round(60 * sum(r.stall_s for r in whole) / max(1e-9, sum(r.audio_s for r in whole)),
                                       3),
        "barge_in_final_p50_s": percentile(barges, 50), "barge_in_final_max_s": percentile(barges, 100),
        "audio_after_100ms": sum(r.late_audio for r in replies), "errors": [e for r in replies for e in r.errors],
        "socket_cpu_per_audio_s": round(socket_per, 4) if socket_per else None,
        "http_cpu_per_audio_s": round(http_per, 4) if http_per else None,
        "cpu_ratio_socket_over_http": round(socket_per / http_per, 3) if socket_per and http_per else None,
        "http_audio_s": round(http_audio, 1), "replies_detail": [asdict(r) for r in replies],
    }


async def _gather(coroutines: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*coroutines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench agents", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,4", help="session counts (default 1,4)")
    parser.add_argument("--window-s", type=float, default=60.0, help="seconds of replies per level (default 60)")
    parser.add_argument("--tokens-per-s", type=float, default=30.0, help="the language model's pace (default 30)")
    parser.add_argument("--barge-every", type=int, default=4, help="every n-th reply is barged in on (0: none)")
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--corpus", type=Path, default=corpus_mod.DEFAULT)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    parser.add_argument("--setting", action="append", default=[], help="TTS_X=value for the server (repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    texts = [u.text for u in corpus_mod.load(args.corpus).utterances if u.size != "short"]
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {"TTS_CACHE_DIR": str(args.cache_dir), "TTS_QUIET_WINDOW_S": "0",
                **dict(s.split("=", 1) for s in args.setting)}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = launch(settings, port, args.out / "server.log")
    try:
        wait_ready(url, process, args.out / "server.log", timeout_s=600)
        info = httpx.get(f"{url}/v1/info", timeout=10).json()
        ws_url = url.replace("http://", "ws://")
        _warm = level(ws_url, process.pid, 1, texts[:1], args.voice, args.tokens_per_s, 0, 1)
        levels = [level(ws_url, process.pid, int(n), texts, args.voice, args.tokens_per_s, args.barge_every,
                        args.window_s) for n in args.clients.split(",")]
    finally:
        terminate(process)
    result = {"command": "python -m bench agents " + shlex.join(argv), "served": info.get("engine") or info,
              "pool": info.get("pool"), "cpu_budget": info.get("cpu_budget"), "tokens_per_s": args.tokens_per_s,
              "token_chars": TOKEN_CHARS, "levels": levels, "warm_up_level": {k: v for k, v in _warm.items()
                                                                           if k != "replies_detail"}}
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "report.md").write_text(report(result))
    print(report(result))
    return 0


def report(result: dict[str, Any]) -> str:
    head = ("| sessions | replies (barge-ins) | first clause p50 / p90 s | later sentences p50 / p90 s | "
            "stalls s/audio-min | barge-in to isFinal p50 / max s | audio > 100 ms after | CPU-s per audio-s "
            "socket / HTTP (ratio) |\n|---|---|---|---|---|---|---|---|\n")
    rows = "".join(
        f"| {v['clients']} | {v['replies']} ({v['barge_ins']}) | {v['first_clause_p50_s']} / {v['first_clause_p90_s']}"
        f" | {v['later_sentence_p50_s']} / {v['later_sentence_p90_s']} | {v['stall_s_per_audio_min']} | "
        f"{v['barge_in_final_p50_s']} / {v['barge_in_final_max_s']} | {v['audio_after_100ms']} | "
        f"{v['socket_cpu_per_audio_s']} / {v['http_cpu_per_audio_s']} ({v['cpu_ratio_socket_over_http']}) |\n"
        for v in result["levels"])
    return f"# Voice-agent sessions\n\n`{result['command']}`\n\n{head}{rows}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
