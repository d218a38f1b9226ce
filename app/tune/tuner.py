"""``python -m app tune``: measure every way this CPU can run the model, keep the fastest that passes.

Each candidate (backend x precision x streams x threads within the CPU budget, `app.tune.candidates`) runs in a
trial process of its own (`app.tune.trial`) on a fixed tuning corpus (`TUNING_TEXTS`, not the
benchmark's), at full pool load. Its audio is compared, chunk by chunk, with ONNX Runtime's on the same
model at one thread per session (`app.tune.outputcheck`, the benchmark's check): a candidate that fails
any chunk, or whose trial crashes, is never chosen. Trials run in interleaved rounds (A B C, A B C), so a
noisy neighbour slows every candidate alike, and the choice is the highest score (`app.tune.ranking`): the median
audio-seconds per CPU-second, less what the candidate's memory costs on an instance-billed platform
(``--memory-price``, `MEMORY_PRICE` by default; 0 ranks by CPU efficiency alone). The result is a manifest
keyed to this CPU, budget, runtimes and model (`app.tune.manifest`).

OpenVINO is the engine this server is built around, so it wins ties (within `app.tune.ranking.TIE`); where ONNX Runtime
scores higher by more than that, the tuner picks it and says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psutil

from app.forms import modelfile, store
from app.runtime import cachedir
from app.runtime.cpu import cpu_flags
from app.runtime.spec import SERVER, Options
from app.settings import Settings
from app.sizing import read_budget
from app.tune import outputcheck
from app.tune.candidates import candidates
from app.tune.manifest import Candidate, Manifest, TuneKey, write
from app.tune.ranking import MEMORY_PRICE, Ranking, Result, choose
from lifecycle import trim

log = logging.getLogger(__name__)

TUNING_TEXTS: tuple[tuple[str, str], ...] = (
    ("af_heart", "Thanks for calling."),
    ("am_michael", "Your order has shipped and should arrive on Thursday, between nine and noon."),
    ("af_bella", "Turn left at the second light, then keep right until you see the station entrance."),
    ("af_nicole", "The quarterly figures came in above the forecast, and the board asked for a short summary "
                      "of what changed, what it cost, and what we expect over the next two quarters."),
    ("bf_emma", "Please hold."),
    ("af_heart", "Rain is likely this afternoon, so take an umbrella if you are heading out after lunch today."),
)
"""What the tuner synthesizes: short, medium and long sentences over the embedded voices, none of them the
benchmark corpus's (a choice tuned on the benchmark would flatter the benchmark)."""

FALLBACK_VOICE = "af_heart"
"""Used for every text when the voices file has none of the voices above (the official voices file)."""

REFERENCE = "onnxruntime-reference"


Trial = Callable[[Candidate, dict[str, Any]], tuple[dict[str, Any], dict[str, npt.NDArray[np.float32]]]]
"""Runs one trial: the outcome and the audio per input."""


def subprocess_trial(candidate: Candidate, job: dict[str, Any]) -> tuple[dict[str, Any],
                                                                         dict[str, npt.NDArray[np.float32]]]:
    """Run the trial in a fresh interpreter (`app.tune.trial`); a crash there raises here."""
    folder = Path(job["folder"])
    stem = folder / f"{candidate.name}-{job['round']}"
    job = {**job, "candidate": dataclasses.asdict(candidate), "audio_out": f"{stem}.npz",
           "outcome_out": f"{stem}.json"}
    job_file = stem.with_suffix(".job.json")
    job_file.write_text(json.dumps(job))
    done = subprocess.run([sys.executable, "-m", "app.tune.trial", str(job_file)], capture_output=True,
                          text=True, timeout=job.get("timeout_s", 600))
    if done.returncode != 0:
        how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        last = (done.stderr.strip().splitlines() or [""])[-1][:300]
        raise RuntimeError(f"trial ended with {how}: {last}")
    outcome: dict[str, Any] = json.loads(Path(job["outcome_out"]).read_text())
    with np.load(job["audio_out"]) as archive:
        audio = {key: np.asarray(archive[key], dtype=np.float32) for key in archive.files}
    return outcome, audio


def plan_inputs(settings: Settings, folder: Path) -> Path:
    """The tuning corpus as model inputs, planned by the server's own front end and chunker."""
    from app.services import build_engine

    engine = build_engine(settings, read_budget(), Options(in_process=True)).engine
    engine.frontend.load((settings.lang,))
    voices = set(engine.voices.names)
    arrays: dict[str, npt.NDArray[Any]] = {}
    for number, (voice, text) in enumerate(TUNING_TEXTS):
        plan = engine.plan(text, voice if voice in voices else _fallback(engine.voices.names), 1.0)
        for index, phonemes in enumerate(c for c in plan.chunks if engine.vocab.ids(c)):
            tokens = engine.vocab.tokens(phonemes)
            arrays[f"t{number}/{index}/tokens"] = tokens
            arrays[f"t{number}/{index}/style"] = plan.voice.style_for(tokens.shape[1] - 2)
    path = folder / "inputs.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds badly
    return path


def _fallback(names: list[str]) -> str:
    return FALLBACK_VOICE if FALLBACK_VOICE in names else names[0]


NEAR = 0.15
"""After the first round, only candidates within 15 % of the best so far are measured again."""


def _worth_another(results: dict[Candidate, Result], candidate: Candidate, ranking: Ranking) -> bool:
    result = results[candidate]
    best = max((ranking.score(r) for r in results.values() if r.eligible), default=0.0)
    return result.eligible and ranking.score(result) >= best * (1 - NEAR)


def tune(settings: Settings, *, out: Path, rounds: int = 2, max_s: float = 170.0, cpus: int = 0,
         only: list[Candidate] | None = None, trial: Trial = subprocess_trial,
         memory_price: float = MEMORY_PRICE, command: str = "") -> Manifest:
    """Measure, check, choose, and write the manifest under ``out``. ``cpus`` tunes for a smaller budget than
    this machine's: the trials then run pinned to that many CPUs. ``memory_price``: `Ranking`'s."""
    started = time.monotonic()
    usable = read_budget().cpus
    if cpus > usable:
        raise ValueError(f"cannot tune for {cpus} CPUs on a budget of {usable}")
    pinned = sorted(os.sched_getaffinity(0))[:cpus] if cpus else []
    cpus = cpus or usable
    writable = cachedir.writable(settings.cache_dir)
    from app.served import served_model

    # The file the server will run (the timed copy, app.forms.timed), keyed as the server keys it.
    model_path, digest = served_model(settings, writable)
    digest = digest or modelfile.sha256_of(model_path)
    key = TuneKey.here(cpus, digest)
    pool = only if only is not None else candidates(cpus, cpu_flags())
    reference = Candidate("onnxruntime", "f32", cpus, 1)
    # The reference configuration is usually a candidate too: its first trial gives the reference audio.
    pool = sorted(pool, key=lambda c: c != reference)
    results = {c: Result(c) for c in pool}
    with tempfile.TemporaryDirectory(prefix="tts-tune-") as tmp:
        folder = Path(tmp)
        work = plan_inputs(settings, folder)
        # What the server's own process holds whatever the runtime: this process has just loaded the same
        # front end and voices.
        ranking = Ranking(cpus, memory_price, psutil.Process().memory_info().rss / 2**20)
        server = SERVER
        base = {"folder": str(folder), "work": str(work), "model_path": str(model_path),
                "shape_cache": server.shape_cache, "affinity": pinned,
                "malloc_arenas": trim.MALLOC_ARENAS, "malloc_mmap_threshold_kb": trim.MMAP_THRESHOLD_KB,
                # ONNX Runtime serves from its saved, optimized graph: measure that, and leave it made.
                "optimized_dir": str(writable / "onnxruntime")}
        log.info("tuning %d candidates on %d CPUs (%s), up to %d rounds", len(pool), cpus, key.cpu, rounds)
        ref_audio: dict[str, npt.NDArray[np.float32]] | None = None
        ref_efficiency = math.nan
        if reference not in results:
            ref_outcome, ref_audio = trial(reference, {**base, "round": "ref"})
            ref_efficiency = float(ref_outcome["efficiency"])
        round_s = 0.0
        for number in range(rounds):
            todo = [c for c in pool if _worth_another(results, c, ranking)] if number else list(pool)
            if number and (not todo or time.monotonic() - started + round_s * len(todo) / len(pool) > max_s):
                log.info("tuning: %d round(s) done; %s", number,
                         "nothing left close enough to the best" if not todo else f"the time limit is {max_s:.0f} s")
                break
            begun = time.monotonic()
            for candidate in (todo if number % 2 == 0 else list(reversed(todo))):
                result = results[candidate]
                try:
                    form_path = store.path(candidate.form, model_path, writable, digest)
                    # A derived form is a file of its own: its compile cache is keyed by its own hash.
                    cache = _cache_dir(candidate, settings, writable, form_path,
                                       digest if form_path == model_path else store.digest(form_path))
                    job = {**base, "round": number, "cache_dir": cache, "model_path": str(form_path)}
                    outcome, audio = trial(candidate, job)
                except Exception as exc:  # a crashed or failing trial rules the candidate out, nothing more
                    result.error = str(exc)[:300]
                    log.warning("tuning: %s failed: %s", candidate.name, result.error)
                    continue
                if ref_audio is None:
                    ref_audio, ref_efficiency = audio, float(outcome["efficiency"])
                result.efficiencies.append(float(outcome["efficiency"]))
                result.throughputs.append(float(outcome["throughput"]))
                result.peak_rss_mb = max(result.peak_rss_mb, float(outcome["peak_rss_mb"]))
                result.load_s = float(outcome["load_s"])
                verdict, _ = outputcheck.compare(candidate.name, REFERENCE, ref_audio, audio)
                if result.check is None or not verdict.passed:
                    result.check = verdict
                log.info("tuning: %s round %d: %.3f audio-s per CPU-s, check %s (worst log-mel %.2f)", candidate.name,
                         number, outcome["efficiency"],
                         "pass" if verdict.passed else f"FAIL ({len(verdict.failed)} chunks)", verdict.max_mel_distance)
            if number == 0:
                round_s = time.monotonic() - begun
    best, why = choose(list(results.values()), ranking)
    if best is None:
        raise RuntimeError(f"tuning found nothing to serve with: {why}")
    table = [r.row() for r in results.values()]
    for row, result in zip(table, results.values(), strict=True):
        row["chosen"] = row["candidate"] == best.candidate.name
        row["memory_gib"] = round(ranking.memory_gib(result), 3)
        row["score"] = round(ranking.score(result), 4)
    table.append({"candidate": REFERENCE, **dataclasses.asdict(reference),
                  "efficiency": round(ref_efficiency, 4), "reference": True})
    manifest = Manifest(key=key, choice=best.candidate, why=why, table=table,
                        made=datetime.now(UTC).isoformat(timespec="seconds"), command=command)
    path = write(out, manifest)
    log.info("tuned in %.0f s: %s (manifest %s)", time.monotonic() - started, why, path)
    return manifest


def _cache_dir(candidate: Candidate, settings: Settings, writable: Path, model_path: Path,
               digest: str | None) -> str:
    """The compile cache the server would use for this candidate (the baked one when it matches), so that
    tuning imports what the image baked and fills what the server will import."""
    if candidate.backend != "openvino":
        return ""
    from app.runtime import compile_cache

    directory, _ = compile_cache.choose(settings.baked_cache_dir, writable / "openvino", model_path, digest,
                                        precision=candidate.precision)
    return str(directory)


def format_table(manifest: Manifest) -> str:
    """The manifest's table as aligned text, for the log and the README."""
    lines = [f"{'candidate':<28} {'audio-s/CPU-s':>13} {'x realtime':>10} {'peak MB':>8} {'score':>7} {'check':>12}"]
    for row in manifest.table:
        check = row.get("check")
        verdict = "reference" if row.get("reference") else (
            "error" if row.get("error") else ("pass" if check and check["passed"] else
                                              f"FAIL {check['max_mel_distance']:.2f}" if check else "-"))
        mark = " <- chosen" if row.get("chosen") else ""
        throughput = row.get("throughput", math.nan)
        lines.append(f"{row['candidate']:<28} {row['efficiency']:>13.3f} {throughput:>10.2f} "
                     f"{row.get('peak_rss_mb', math.nan):>8.0f} {row.get('score', math.nan):>7.3f} {verdict:>12}{mark}")
    return "\n".join(lines)


def main(argv: list[str], settings: Settings) -> int:
    """``python -m app tune [--out DIR]``; ``settings`` come from the same TTS_* variables as the server's."""
    parser = argparse.ArgumentParser(prog="python -m app tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None,
                        help="where the manifest goes (<out>/tuning/); default: the cache directory")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of trials (median over them)")
    parser.add_argument("--max-s", type=float, default=170.0, help="start no new round after this many seconds")
    parser.add_argument("--cpus", type=int, default=0,
                        help="tune for this CPU budget (at most this machine's); default: this machine's")
    parser.add_argument("--memory-price", type=float, default=MEMORY_PRICE,
                        help="what a GiB-second costs in vCPU-seconds where the image will run, to rank candidates "
                             f"by audio per dollar; 0 ranks by CPU efficiency alone (default {MEMORY_PRICE:g}: "
                             "Cloud Run's instance-based price)")
    args = parser.parse_args(argv)
    if not 0 <= args.memory_price <= 10:
        parser.error(f"--memory-price {args.memory_price:g}: must be between 0 and 10")
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    manifest = tune(settings, out=args.out or cachedir.writable(settings.cache_dir), rounds=args.rounds,
                    max_s=args.max_s, cpus=args.cpus, memory_price=args.memory_price,
                    command=shlex.join(["python", "-m", "app", "tune", *argv]))
    sys.stdout.write(format_table(manifest) + "\n" + manifest.why + "\n")
    return 0
