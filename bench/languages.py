"""``python -m bench quality --languages``: how well a listener understands each of Kokoro's languages, served and
beside two references in process, by a multilingual offline recogniser.

For each language's corpus (``bench/corpus/languages/<lang>.json``: everyday sentences written for the purpose,
with numbers, dates and names) and each of its voices, every sentence is synthesised three ways:

- ``served``: by the server over HTTP (``POST /v1/audio/speech``, ``pcm``, not streamed; the server this command
  starts, or the one at ``--url``): its front end, its chunking, its model form;
- ``kokoro-onnx``: kokoro-onnx in this process with its own phonemizer (espeak-ng; ``cmn`` for Mandarin) on the
  same model file and voice style: the plain library a user would otherwise run;
- ``whole``: this project's front end (`app.text.frontend`) in this process, its phonemes spoken in one
  kokoro-onnx call: the served text without the server's chunk cuts.

Whisper base (`bench.whisper_base`), told the language, transcribes each take, and `bench.langscore` counts word
errors (character errors for Japanese and Mandarin). ``--normalization`` measures instead a normalization set
(``bench/corpus/languages/en-normalize.json``, or those ``--langs`` names: ``fr-normalize``, ``es-normalize``; text
as language models write it, and the words a listener expects), served with the request's normalization on and off.

Needs the ``quality`` extra and the ``ja`` and ``zh`` extras; nothing is downloaded at run time. Writes
``languages.json`` and ``README.md`` to ``--out``; the audio goes under ``--cache-dir``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import soundfile

from app.forms import modelfile
from app.text import languages as langs
from bench import langscore, machine, quality, whisper_base
from bench.client import RequestFailed
from bench.langreport import pct, render
from bench.server import progress

CORPUS_DIR = Path(__file__).parent / "corpus" / "languages"
SIDES = ("served", "kokoro-onnx", "whole")
NORMALIZATION_SIDES = ("served", "served-raw")
"""The normalization set: the request's defaults, and ``normalization_options: {"normalize": false}``."""
ESPEAK = {"zh": "cmn"}
"""kokoro-onnx's ``lang`` (an espeak-ng voice) where it is not the front end's key."""
RATE = quality.RATE
GAP_S = 0.6
"""Silence between sentences heard together."""


@dataclass(frozen=True)
class Corpus:
    name: str
    language: str
    """Whisper's code for it (``es``, ``pt``, ``zh``)."""
    voices: tuple[str, ...]
    """Its voices, the first measured by default."""
    sentences: tuple[tuple[str, str, str], ...]
    """(id, text, what a listener expects to hear): the last is the text itself except in the normalization set."""
    sha256: str


def load(path: Path) -> Corpus:
    import hashlib

    raw = path.read_bytes()
    data = json.loads(raw)
    sentences = tuple((str(s["id"]), str(s["text"]), str(s.get("said", s["text"]))) for s in data["sentences"])
    if len({s[0] for s in sentences}) != len(sentences) or not sentences:
        raise ValueError(f"{path}: no sentences, or ids that repeat")
    return Corpus(path.stem, str(data["language"]), tuple(data["voices"]), sentences, hashlib.sha256(raw).hexdigest())


def speak(url: str, text: str, voice: str, options: dict[str, Any] | None = None) -> npt.NDArray[np.float32]:
    body: dict[str, Any] = {"model": "kokoro", "input": text, "voice": voice, "response_format": "pcm",
                            "stream": False}
    if options is not None:
        body["normalization_options"] = options
    response = httpx.post(url + "/v1/audio/speech", json=body, timeout=300.0)
    if response.status_code != 200:
        raise RequestFailed(f"speech: {response.status_code} {response.text[:300]}")
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32768.0


def key_of(voice: str) -> str:
    language = langs.of_voice(voice)
    if language is None:
        raise ValueError(f"{voice}: its name says no language")
    return language.key


@dataclass(frozen=True)
class Options:
    corpora: tuple[Corpus, ...]
    voices: dict[str, tuple[str, ...]]
    """Per corpus name, the voices measured."""
    out: Path
    cache_dir: Path
    command: str
    voices_file: Path | None
    url: str | None = None
    normalization: bool = False
    sides: tuple[str, ...] = SIDES
    group_s: float = 0.0
    """Transcribe consecutive sentences of one voice and side together, up to this many seconds of audio (0: one
    at a time). Whisper pads every input to 30 s, so one sentence a time costs as much as a full window."""


def _take(work: Path, key: tuple[str, str, str, str]) -> Path:
    return work / "{}-{}-{}-{}.wav".format(*key)


def _load_take(path: Path) -> npt.NDArray[np.float32] | None:
    """A take already made by an earlier, interrupted run of the same ``--out`` (None: not made yet)."""
    if not path.exists():
        return None
    samples, _ = soundfile.read(path, dtype="float32")
    return np.asarray(samples, dtype=np.float32)


def _serve_all(options: Options, model: Path, work: Path,
               audio: dict[tuple[str, str, str, str], npt.NDArray[np.float32]]) -> None:
    """The served takes not yet made. A server that goes away mid-run (stopped from outside: it happened on the
    shared machine) is started again, at most three times; the takes made so far are kept on disk."""
    serving = quality.Options(targets=(), corpus=Path(), items=(), out=options.out, cache_dir=options.cache_dir,
                              command=options.command, url=options.url, voices_file=options.voices_file)
    wanted = [(side, corpus.name, voice, item, text) for corpus in options.corpora
              for voice in options.voices[corpus.name] for item, text, _ in corpus.sentences
              for side in ("served", "served-raw") if side in options.sides]
    for attempt in range(4):
        try:
            with quality.serving(serving, model, work) as (url, _info):
                for side, name, voice, item, text in wanted:
                    path = _take(work, (side, name, voice, item))
                    found = _load_take(path)
                    if found is None:
                        found = speak(url, text, voice, {"normalize": False} if side == "served-raw" else None)
                        soundfile.write(path, found, RATE, subtype="PCM_16")
                    audio[side, name, voice, item] = found
            return
        except httpx.TransportError as exc:
            if options.url or attempt == 3:
                raise
            progress(f"the server went away ({exc}); starting it again")


def synthesise(options: Options, work: Path) -> dict[tuple[str, str, str, str], npt.NDArray[np.float32]]:
    """Every take: (side, corpus, voice, sentence id) → samples, each kept on disk as it is made (an interrupted run
    of the same ``--out`` goes on where it stopped)."""
    model = modelfile.assemble(options.cache_dir / "models")
    every = sorted({v for vs in options.voices.values() for v in vs})
    styles = quality.styles_file(options.voices_file, every, work)
    audio: dict[tuple[str, str, str, str], npt.NDArray[np.float32]] = {}
    progress("served takes")
    _serve_all(options, model, work, audio)
    if not {"kokoro-onnx", "whole"} & set(options.sides):
        return audio
    from kokoro_onnx import Kokoro

    from app.text.frontend import Frontend

    kokoro, frontend = Kokoro(str(model), str(styles)), Frontend()
    for corpus in options.corpora:
        for voice in options.voices[corpus.name]:
            key = key_of(voice)
            progress(f"in process: {corpus.name} {voice}")
            for item, text, _ in corpus.sentences:
                for side in ("kokoro-onnx", "whole"):
                    if side not in options.sides:
                        continue
                    path = _take(work, (side, corpus.name, voice, item))
                    found = _load_take(path)
                    if found is None:
                        if side == "kokoro-onnx":
                            samples, _ = kokoro.create(text, voice=voice, lang=ESPEAK.get(key, key))
                        else:
                            samples, _ = kokoro.create(frontend.phonemize(text, key), voice=voice, is_phonemes=True)
                        found = np.asarray(samples, dtype=np.float32)
                        soundfile.write(path, found, RATE, subtype="PCM_16")
                    audio[side, corpus.name, voice, item] = found
    frontend.release_languages()
    return audio


def run(options: Options) -> dict[str, Any]:
    work = options.cache_dir / "quality-langs" / options.out.name
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "run": {"id": options.out.name, "command": options.command, "commit": quality._commit(),
                "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "recogniser": whisper_base.NAME,
                "voices_file": str(options.voices_file) if options.voices_file else "the server's default",
                "url": options.url, "audio": str(work), "loadavg_start": os.getloadavg()[0]},
        "machine": machine.describe(),
        "corpora": {c.name: {"language": c.language, "sha256": c.sha256, "sentences": len(c.sentences),
                             "measure": langscore.measure_name(c.language)} for c in options.corpora},
        "voices": {},
    }
    audio = synthesise(options, work)
    results["run"]["loadavg_synthesised"] = os.getloadavg()[0]
    progress(f"transcribing {len(audio)} takes")
    recogniser = whisper_base.Recogniser(options.cache_dir / "whisper", os.cpu_count() or 1)
    by_name = {c.name: c for c in options.corpora}
    window: list[tuple[str, str, npt.NDArray[np.float32]]] = []
    for n, ((side, name, voice, item), samples) in enumerate(audio.items()):
        corpus = by_name[name]
        text, said = next((t, s) for i, t, s in corpus.sentences if i == item)
        entry = results["voices"].setdefault(f"{name}/{voice}", {"corpus": name, "voice": voice})
        taken = entry.setdefault(side, {"sentences": {}})
        taken["sentences"][item] = {"text": text, "said": said, "audio_s": len(samples) / RATE}
        if not options.group_s:
            taken["sentences"][item]["heard"] = recogniser.hear(samples, RATE, corpus.language)
            continue
        window.append((item, said, samples))
        following = list(audio)[n + 1] if n + 1 < len(audio) else None
        length = sum(len(w[2]) for w in window) / RATE + GAP_S * len(window)
        if following is None or following[:3] != (side, name, voice) or \
                length + len(audio[following]) / RATE > options.group_s:
            gap = np.zeros(round(GAP_S * RATE), dtype=np.float32)
            joined = np.concatenate([part for w in window for part in (w[2], gap)])
            taken.setdefault("groups", []).append({"items": [w[0] for w in window],
                                                   "said": " ".join(w[1] for w in window),
                                                   "heard": recogniser.hear(joined, RATE, corpus.language)})
            window = []
    score(results, options.sides)
    results["run"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    results["run"]["sides"] = list(options.sides)
    write(results, options.out)
    return results


def score(results: dict[str, Any], sides: Sequence[str]) -> None:
    """Each take's errors from what it should say and what was heard (`bench.langscore`), and each side's totals."""
    for entry in results["voices"].values():
        language = results["corpora"][entry["corpus"]]["language"]
        for side in sides:
            if side not in entry:
                continue
            # Heard sentence by sentence, or in groups of consecutive sentences (``--group-s``).
            takes = entry[side]["groups"] if "groups" in entry[side] else entry[side]["sentences"].values()
            for take in takes:
                found = langscore.score(take["said"], take["heard"], language)
                take.update(units=found.units, errors=found.errors, rate=round(found.rate, 4),
                            differences=list(found.differences))
            units, errors = sum(t["units"] for t in takes), sum(t["errors"] for t in takes)
            entry[side]["summary"] = {"sentences": len(entry[side]["sentences"]), "heard_as": len(takes),
                                      "units": units, "errors": errors,
                                      "rate": round(errors / units, 4) if units else 0.0,
                                      "exact": sum(1 for t in takes if t["errors"] == 0)}


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "languages.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    (out / "README.md").write_text(render(results, results["run"]["sides"]))


def rescore(out: Path) -> dict[str, Any]:
    """A run's figures counted again from the transcripts it kept (after a change to `bench.langscore`): no
    synthesis, no recogniser."""
    results: dict[str, Any] = json.loads((out / "languages.json").read_text())
    found = [k for e in results["voices"].values() for k in e if k not in ("corpus", "voice")]
    results["run"].setdefault("sides", list(dict.fromkeys(found)))  # a run from before the list was recorded
    score(results, results["run"]["sides"])
    results["run"]["rescored"] = f"{dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}, commit {quality._commit()}"
    write(results, out)
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality --languages", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", default="", help="comma-separated corpus names (default: every language corpus)")
    parser.add_argument("--voices", default="", help="comma-separated voices (default: each corpus's first)")
    parser.add_argument("--all-voices", action="store_true", help="every voice each corpus lists")
    parser.add_argument("--items", type=int, default=0, help="only the first N sentences of each corpus")
    parser.add_argument("--normalization", action="store_true",
                        help="a normalization set (default en-normalize; --langs fr-normalize,es-normalize), served "
                             "with normalization on and off")
    parser.add_argument("--sides", default="", help=f"comma-separated, of {', '.join(SIDES)} (default: all)")
    parser.add_argument("--voices-file", type=Path, help="voices .npz for every side (the server's TTS_VOICES_PATH)")
    parser.add_argument("--url", help="measure the server running at URL instead of starting one")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/quality-langs-<timestamp>)")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    parser.add_argument("--group-s", type=float, default=None,
                        help="hear consecutive sentences together up to this many seconds (default 25; 0 one by one, "
                             "the default with --normalization: each item is scored alone)")
    parser.add_argument("--rescore", type=Path, metavar="RUN",
                        help="count RUN's errors again from its transcripts (after a change to the scoring)")
    args = parser.parse_args(argv)
    if args.rescore:
        rescored = rescore(args.rescore)
        _print(rescored)
        print(args.rescore / "README.md")
        return 0
    logging.getLogger("phonemizer").addFilter(lambda record: "count mismatch" not in record.getMessage())
    wanted = [n for n in args.langs.split(",") if n]
    if args.normalization:
        paths = [CORPUS_DIR / f"{n}.json" for n in wanted or ["en-normalize"]]
        sides = NORMALIZATION_SIDES
    else:
        paths = [CORPUS_DIR / f"{n}.json" for n in wanted] or sorted(
            p for p in CORPUS_DIR.glob("*.json") if not p.stem.endswith("-normalize"))
        sides = tuple(s for s in args.sides.split(",") if s) or SIDES
    corpora = tuple(load(p) for p in paths)
    if args.items:
        corpora = tuple(Corpus(c.name, c.language, c.voices, c.sentences[:args.items], c.sha256) for c in corpora)
    named = [v for v in args.voices.split(",") if v]
    voices = {c.name: tuple(v for v in c.voices if v in named) if named else c.voices if args.all_voices
              else c.voices[:1] for c in corpora}
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    options = Options(corpora=corpora, voices=voices, out=args.out or Path("bench/results") / f"quality-langs-{stamp}",
                      cache_dir=args.cache_dir, command="python -m bench quality --languages " + shlex.join(argv),
                      voices_file=args.voices_file, url=args.url, normalization=args.normalization, sides=sides,
                      group_s=args.group_s if args.group_s is not None else 0.0 if args.normalization else 25.0)
    _print(run(options))
    print(options.out / "README.md")
    return 0


def _print(results: dict[str, Any]) -> None:
    sides = results["run"]["sides"]
    for name, entry in results["voices"].items():
        print(name, "  ".join(f"{s} {pct(entry.get(s, {}).get('summary'))}" for s in sides))
