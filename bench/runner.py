"""The benchmark run: every configuration through the same phases, then checks, figures, cost and the report.

Per configuration, in order (one server process, in its own memory cgroup, page cache of the model files
dropped before it starts so it pays for its own reads; the phases on a running server are `bench.phases`):

1. **Start**: spawn to first audio of the shortest corpus request (a process cold start).
2. **Load**: closed-loop clients at each client count (`bench.load`, a separate process): ramp, then a
   steady-state window with the server's CPU time read at its edges. Memory is sampled meanwhile.
3. **Idle**: billable memory sampled for ``idle_s`` with no requests. While a server only idles, the
   in-process jobs (`bench.inprocess`) for the output checks and the ceiling run in their own processes: an
   idle server's memory does not depend on the CPU, and the machine's time is not wasted. The complete system
   idles alone, because its lifecycle releases memory on a timer during this phase. OpenVINO with one stream
   of one thread is measured in process only, one request at a time (the raw runtime's own efficiency).
4. **Complete system only**: release/restore cycles (first audio after each release, memory after each
   release), then process cold starts with and without the compile cache.

The run writes ``results.json`` (everything measured), ``figures.json`` (per-configuration figures in the shape
`bench.cost` reads), ``report.md`` and PNG plots into the run folder. Bulky artefacts (audio, logs, compile
caches) go to a work folder under ``--cache-dir``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from app.forms import modelfile
from app.sizing import read_budget
from app.tune.manifest import DIRECTORY as TUNING_DIRECTORY
from app.tune.manifest import Manifest
from app.voices import EMBEDDED as VOICES
from bench import client, inprocess, machine, outputchecks, peers, phases, variant
from bench import corpus as corpus_mod
from bench.configs import ServerConfig, all_configs, parse_pool, select
from bench.meter import files_under
from bench.outputs import rerender as rerender
from bench.outputs import write_outputs
from bench.runoptions import ONE_BY_ONE, REFERENCE, RERUN
from bench.runoptions import Options as Options
from bench.runoptions import quick_options as quick_options
from bench.server import Server, peer_server
from lifecycle.pagecache import evict

log = logging.getLogger(__name__)
CEILING_CONCURRENCY = 4
"""In-process threads: the client count the targets are stated at."""


def _progress(started: float, message: str) -> None:
    # The CLI's progress lines: a long run must show where it is.
    print(f"[{time.monotonic() - started:7.1f} s] {message}", file=sys.stderr, flush=True)


class Run:
    """One benchmark run; `execute` does everything and returns the run folder."""

    def __init__(self, options: Options) -> None:
        self.o = options
        self.started = time.monotonic()
        self.run_id = options.out.name
        self.work = options.cache_dir / "runs" / self.run_id
        self.logs = self.work / "logs"
        self.audio_dir = self.work / "audio"
        self.server_cache = self.work / "server-cache"
        """``TTS_CACHE_DIR`` of every server: fresh per run, so cache state is the run's own doing."""
        self.inprocess_cache = self.work / "inprocess-cache"
        self.admin_token = secrets.token_hex(16)
        corpus = corpus_mod.load(options.corpus)
        self.corpus = (corpus.subset(options.items) if options.items else corpus).with_voice(options.voice)
        self.takes_dir = self.work / "takes"
        """The first complete response to each utterance per configuration and load level (`bench.peers`)."""
        self.installed: dict[str, peers.Installed] = {}
        self.budget = read_budget()
        every = all_configs(self.budget, parse_pool(options.pool) if options.pool else None)
        # Named only: the foreign instance and the peers (installed from PyPI) are not among the default's.
        self.configs = select(every, options.configs) if options.configs else [
            c for c in every if c.kind not in ("foreign", "peer")]
        self.short = self.corpus.shortest()
        self.context = phases.Context(options, self.short, self.takes_dir, self.admin_token, self.progress)
        self.model = Path()
        self.results: dict[str, Any] = {}

    def progress(self, message: str) -> None:
        _progress(self.started, message)

    # --- the whole run ---------------------------------------------------------------------------

    def execute(self) -> Path:
        o = self.o
        o.out.mkdir(parents=True, exist_ok=True)
        if self.work.exists():
            shutil.rmtree(self.work)
        for folder in (self.logs, self.audio_dir, self.server_cache, self.inprocess_cache, self.takes_dir,
                       o.out / "levels"):
            folder.mkdir(parents=True, exist_ok=True)
        self.model = modelfile.assemble(o.cache_dir / "models")
        has_complete = any(c.kind == "complete" for c in self.configs)
        self.progress(f"run {self.run_id}: {len(self.configs)} configurations "
                      f"({', '.join(c.name for c in self.configs)}), clients {list(o.clients)}, "
                      f"corpus {self.corpus.name} ({len(self.corpus.utterances)} utterances); "
                      f"about {o.estimate_s(len(self.configs), has_complete) / 60:.0f} min on a quiet 2-core machine")
        self.results = {
            "schema": 1,
            "run": {"id": self.run_id, "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "command": o.command, "quick": o.quick,
                    "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(o).items()},
                    "work_dir": str(self.work)},
            "machine": machine.describe(),
            "corpus": {"name": self.corpus.name, "version": self.corpus.version, "sha256": self.corpus.sha256,
                       "path": self.corpus.path, "utterances": [u.id for u in self.corpus.utterances],
                       "counts": self.corpus.counts(), "chars": [len(u.text) for u in self.corpus.utterances],
                       "short_request": self.short.id},
            "configs": {},
            "inprocess": {},
        }
        if has_complete and o.serves_tuned:
            self._tune()
        self._install_peers()
        jobs = self.plan_jobs()
        for index, config in enumerate(self.configs, 1):
            self.progress(f"[{index}/{len(self.configs)}] {config.name}: {config.title}")
            self.results["configs"][config.name] = self._measure(config, jobs.get(config.name, []))
            self._save()
        if has_complete:
            self.results["cold_start"] = self._cold_starts(next(c for c in self.configs if c.kind == "complete"))
        self.results["checks"] = outputchecks.run(self.audio_dir, self.takes_dir, self.configs, self.o.clients,
                                                  self.progress)
        self.results["run"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.results["run"]["duration_s"] = round(time.monotonic() - self.started, 1)
        self._finish()
        self.progress(f"done: {o.out / 'report.md'}")
        return o.out

    def _tune(self) -> None:
        """Tune (or read a tuning run), then make the complete system serve with the choice."""
        tuned = self.o.tuned_dir or self.work / "tuned"
        if self.o.tuned_dir is None:
            self.progress(f"tuning: python -m app tune --out {tuned}")
            env = {**os.environ, "TTS_MODEL_PATH": str(self.model), "TTS_CACHE_DIR": str(self.server_cache),
                   "TTS_LOG_LEVEL": "info"}
            with open(self.logs / "tune.log", "wb") as sink:
                subprocess.run([sys.executable, "-m", "app", "tune", "--out", str(tuned)], env=env, stdout=sink,
                               stderr=subprocess.STDOUT, check=True)
        found = sorted((tuned / TUNING_DIRECTORY).glob("*.json"))
        if not found:
            raise RuntimeError(f"no tuning manifest under {tuned}")
        manifest = Manifest.from_json(json.loads(found[-1].read_text()))
        choice = manifest.choice
        backend: Literal["onnxruntime", "openvino"] = "onnxruntime" if choice.backend == "onnxruntime" else "openvino"
        self.results["tuning"] = manifest.to_json()
        self.progress(f"tuned: {manifest.why}")
        self.configs = [dataclasses.replace(
            c, backend=backend, precision=choice.precision, streams=choice.streams,
            threads_per_stream=choice.threads_per_stream, tuned_dir=str(tuned),
            title=f"Complete system (default settings): tuned {choice.name} + compile cache + lifecycle")
            if c.kind == "complete" else c for c in self.configs]

    def _install_peers(self) -> None:
        """Each peer from PyPI into its own virtual environment under the work folder; a peer that fails to install
        is recorded and its configuration dropped."""
        self.results["peers"] = {}
        for config in [c for c in self.configs if c.peer]:
            peer = peers.PEERS[config.name]
            self.progress(f"installing {peer.requirement} into {self.work / 'peers' / peer.name}")
            try:
                installed = peers.install(peer, self.work / "peers", self.logs / f"install-{peer.name}.log")
            except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
                self.progress(f"    {peer.name} FAILED to install: {exc}")
                self.results["peers"][peer.name] = {"error": str(exc)}
                self.configs = [c for c in self.configs if c.name != config.name]
                continue
            self.installed[peer.name] = installed
            self.results["peers"][peer.name] = {
                "distribution": peer.distribution, "requirement": peer.requirement, "versions": installed.versions,
                "api": peer.api, "threads": config.threads_per_stream, "settings_note": peer.settings_note,
                "argv_shown": [], "env": {}}  # filled in when it starts (`_measure`)
            self.progress(f"    {', '.join(f'{k} {v}' for k, v in installed.versions.items())}")

    def _finish(self) -> None:
        write_outputs(self.o.out, self.results)

    def _save(self) -> None:
        """Partial results after each configuration, so a run that dies still leaves its numbers."""
        (self.o.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str) + "\n")

    # --- jobs ----------------------------------------------------------------------------------

    def _job(self, name: str, config: ServerConfig) -> inprocess.Job:
        cache = self.server_cache if config.compile_cache else self.inprocess_cache
        return inprocess.Job(name=name, backend=config.backend, streams=config.streams,
                             threads_per_stream=config.threads_per_stream, runtime_defaults=config.runtime_defaults,
                             precision=config.precision, tuned_dir=config.tuned_dir,
                             concurrency=CEILING_CONCURRENCY, model_path=self.model, cache_dir=cache,
                             compile_cache=config.compile_cache, corpus=self.o.corpus, items=self.o.items)

    def plan_jobs(self) -> dict[str, list[inprocess.Job]]:
        """Which in-process jobs run during which configuration's idle phase."""
        plan: dict[str, list[inprocess.Job]] = {}
        reference = next(c for c in self.configs if c.name == REFERENCE)
        plan[REFERENCE] = [self._job(REFERENCE, reference), self._job(RERUN, reference)]
        # Hosts are measured before the complete system; the foreign instance and the peers run no in-process job
        # (they are checked on what they serve: `bench.outputchecks`).
        hosts = [c for c in self.configs if c.kind not in ("complete", "foreign", "peer")]
        if self.o.ceiling_1x1:
            one = ServerConfig(ONE_BY_ONE, "OpenVINO 1 stream x 1 thread", "openvino", "sized", 1, 1)
            host = next((c for c in hosts if c.name == "ort-sized"), hosts[-1])
            plan.setdefault(host.name, []).append(dataclasses.replace(self._job(ONE_BY_ONE, one), concurrency=1))
        for config in self.configs:
            if config.name == REFERENCE or config.kind in ("foreign", "peer"):
                continue
            if config.kind == "complete":
                # Before the complete server starts (its compile cache is then warm) and never during its own
                # idle phase (the job would map the compile-cache file the server's release evicts).
                plan.setdefault(hosts[-1].name, []).append(self._job(config.name, config))
            else:
                plan.setdefault(config.name, []).append(self._job(config.name, config))
        return plan

    def _run_jobs(self, jobs: Sequence[inprocess.Job]) -> None:
        """Run ``jobs`` in one fresh process; each job's outcome, or its error, goes into the results."""
        self.results["inprocess"].update(inprocess.launch(jobs, self.audio_dir, self.logs, self.progress))

    # --- one configuration ------------------------------------------------------------------------

    def _settings(self, config: ServerConfig, **extra: str) -> dict[str, str]:
        env = config.env(quiet_window_s=self.o.quiet_window_s, max_requests=self.o.max_requests)
        # The foreign instance starts from an empty cache of its own, as a new container does.
        cache = self.work / "foreign-cache" if config.kind == "foreign" else self.server_cache
        env.update({"TTS_MODEL_PATH": str(self.model), "TTS_CACHE_DIR": str(cache),
                    "TTS_ADMIN_TOKEN": self.admin_token, "TTS_LOG_LEVEL": "info"})
        env.update(extra)
        return env

    def _model_files(self) -> list[Path]:
        return [self.model, *files_under(self.server_cache)]

    def _measure(self, config: ServerConfig, jobs: Sequence[inprocess.Job]) -> dict[str, Any]:
        if config.peer:
            server = peer_server(config, self.installed[config.name], model=self.model, voices=VOICES,
                                  work=self.work / "peer-files" / config.name,
                                  log_path=self.logs / f"{config.name}.log")
            settings = server.settings
            self.results["peers"][config.name] |= {"argv_shown": [Path(server.argv[0]).name, *server.argv[1:]],
                                                   "env": settings}
        else:
            settings = self._settings(config)
            server = Server(config, settings, self.logs / f"{config.name}.log")
        record: dict[str, Any] = {"config": dataclasses.asdict(config) | {"shape": config.shape},
                                  "settings": {k: v for k, v in settings.items() if k != "TTS_ADMIN_TOKEN"},
                                  "errors": [], "levels": [], "inprocess_jobs": [j.name for j in jobs]}
        evict(self._model_files())
        try:
            server.start()
            record["memory_source"] = server.meter.source
            record["start"] = phases.first_request(server, self.short)
            self.progress(f"    cold start to first audio {record['start']['cold_start_s']:.2f} s "
                          f"(ready {record['start']['ready_s']:.2f} s)")
            record["info"] = {} if config.peer else client.get_json(server.url, "/v1/info")
            record["levels"] = [phases.level(self.context, server, config, clients) for clients in self.o.clients]
            record["memory_load"] = [lv.pop("_memory") for lv in record["levels"]]
            record["idle"] = phases.idle(self.context, server, config, lambda: self._run_jobs(jobs),
                                         ", ".join(j.name for j in jobs))
            if config.kind == "complete":
                record["release_cycles"] = phases.cycles(self.context, server)
        except Exception as exc:  # one configuration failing must not lose the others' figures
            log.exception("%s failed", config.name)
            record["errors"].append(f"{type(exc).__name__}: {exc}")
            self.progress(f"    {config.name} FAILED: {type(exc).__name__}: {exc}")
            missing = [job for job in jobs if job.name not in self.results["inprocess"]]
            self._run_jobs(missing)  # the checks still need the audio
        finally:
            try:
                record["peak_mb"] = phases.mb(server.meter.peak())
            except (OSError, ValueError):
                record["peak_mb"] = None
            server.stop()
        return record

    # --- cold starts ------------------------------------------------------------------------------

    def _cold_starts(self, config: ServerConfig) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.short.id}
        kinds: list[tuple[str, dict[str, str]]] = [("with_cache", {})]
        if self.o.cold_without_cache:
            kinds.append(("without_cache", variant.launch_env(dataclasses.replace(config.options(),
                                                                                   compile_cache=False))))
        for label, extra in kinds:
            samples: list[dict[str, Any]] = []
            for n in range(1, self.o.cold_starts + 1):
                evict(self._model_files())
                server = Server(config, self._settings(config, **extra), self.logs / f"cold-{label}-{n}.log",
                                label=f"cold-{n}")
                try:
                    server.start()
                    sample = phases.first_request(server, self.short)
                    resolved = client.get_json(server.url, "/v1/info").get("resolved") or {}
                    sample["from_cache"] = resolved.get("from_cache")
                    sample["peak_mb"] = phases.mb(server.meter.peak())
                    self.progress(f"    cold start {label.replace('_', ' ')} {n}/{self.o.cold_starts}: "
                                  f"{sample['cold_start_s']:.2f} s to first audio")
                except Exception as exc:
                    sample = {"error": f"{type(exc).__name__}: {exc}"}
                    self.progress(f"    cold start {label.replace('_', ' ')} {n} FAILED: {sample['error']}")
                finally:
                    server.stop()
                samples.append(sample)
            out[label] = samples
        return out
