"""The servers users would install instead of this one, measured beside it (``bench run --configs fastkokoro,...``).

Each peer is installed from PyPI, pinned, into a virtual environment of its own under the run's work folder (the
versions it resolved are recorded), and started offline on the model file this server assembles and the voices it
ships, at the peer's own recommended settings, in a memory cgroup of its own like every configuration
(`bench.server`). The same load client drives it with the same corpus and voice; where a peer streams only on
another route, the client asks it there (`bench.client.request_for`), and nothing else changes.

- **fastkokoro** (``fastkokoro[cpu]``; ONNX Runtime, one session, synthesis in the event loop): the model and
  voices through ``FASTKOKORO_MODEL_PATH`` / ``FASTKOKORO_VOICES_PATH`` (otherwise it downloads its own fp16
  export); ``FASTKOKORO_RUNTIME_TAIL_TRIM_MS=0`` because its default tail trim is tuned for its padded export and
  cuts the end of speech on this one; intra-op threads by its documented rule, ``min(6, CPUs)``, one inter-op
  thread; its start-up warm-up on. OpenAI's ``POST /v1/audio/speech`` with ``stream: true`` streams PCM.
- **kokoro-pi** (ONNX Runtime through kokoro-onnx, one session behind a global lock): a models directory laid
  out by hand as its ``build`` would leave it (``models.json``), serving its plain variant on the int8 file as is:
  ``build`` downloads the fp16 model, and its graph rewrites fail its own parity gate on the int8 export. Threads:
  the CPU count ("match your core count"); its other settings are its defaults (a request waits up to 30 s for
  the engine, then 429). It streams only on ``POST /v1/tts`` (``format: s16le``); its ``/v1/audio/speech``
  synthesizes the whole text before answering: the load client's adapter is that route and body.

A peer speaks with its own text front end and chunking, so its output is checked as whole responses against this
server's (`check_takes`), not chunk by chunk against the model.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.client import Api
from lifecycle.proctree import cpu_seconds


@dataclass(frozen=True)
class Peer:
    """One server a user could install instead, and how the benchmark runs it."""

    name: str
    """Configuration name (``--configs``)."""
    title: str
    distribution: str
    """The PyPI distribution."""
    version: str
    """The pinned version."""
    extras: str = ""
    """Extras installed with it (fastkokoro installs ONNX Runtime only with ``cpu``)."""
    api: Api = "openai"
    """How the load client asks it for streamed PCM."""
    ready_path: str = "/readyz"
    """What answers 200 once it serves."""
    max_threads: int = 0
    """Its documented cap on intra-op threads (0: none; it recommends the CPU count)."""
    settings_note: str = ""
    """Its settings and any adapter, in words, for the report."""

    @property
    def requirement(self) -> str:
        return f"{self.distribution}{f'[{self.extras}]' if self.extras else ''}=={self.version}"

    def threads(self, cpus: int) -> int:
        """Its recommended intra-op threads on ``cpus`` CPUs."""
        return max(1, min(cpus, self.max_threads) if self.max_threads else cpus)


PEERS: dict[str, Peer] = {p.name: p for p in (
    Peer("fastkokoro", "fastkokoro", "fastkokoro", "0.7.0", extras="cpu", ready_path="/health", max_threads=6,
         settings_note="FASTKOKORO_MODEL_PATH / FASTKOKORO_VOICES_PATH on the shipped int8 file and voices, "
                       "FASTKOKORO_RUNTIME_TAIL_TRIM_MS=0 (its trim is tuned for its padded export), intra-op "
                       "threads min(6, CPUs) as documented, 1 inter-op thread, its warm-up on; OpenAI route, no "
                       "adapter"),
    Peer("kokoro-pi", "kokoro-pi", "kokoro-pi", "1.2.0", api="kokoro-pi", ready_path="/readyz",
         settings_note="a hand-laid models directory (models.json) serving its plain variant on the int8 file as "
                       "is (its rewrites fail its own parity gate on it), --threads = CPUs ('match your core "
                       "count'), its defaults otherwise (30 s wait for the engine, then 429); adapter: streamed "
                       "s16le on POST /v1/tts (its /v1/audio/speech buffers the whole response)"),
)}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""Both peers otherwise reach for the Hugging Face hub; a run must not depend on a download."""
RECORDED = ("onnxruntime", "kokoro-onnx", "numpy", "misaki", "espeakng-loader", "phonemizer-fork")
"""Distributions whose versions are recorded beside the peer's own."""


@dataclass(frozen=True)
class Installed:
    """A peer in its virtual environment."""

    peer: Peer
    venv: Path
    versions: dict[str, str]
    """Distribution -> version, as pip resolved them (the peer's own and `RECORDED`)."""

    def executable(self, name: str) -> Path:
        return self.venv / "bin" / name


def install(peer: Peer, root: Path, log_path: Path) -> Installed:
    """``python -m venv root/<name>`` and ``pip install <pinned requirement>`` into it (PyPI, pip's own cache);
    raises `RuntimeError` with the log's tail when either fails, or when pip resolved another version."""
    venv = root / peer.name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as sink:
        for argv in ([sys.executable, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                      "--no-input", peer.requirement]):
            if subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, check=False).returncode:
                raise RuntimeError(f"{' '.join(argv)} failed; {log_path.read_text(errors='replace')[-2000:]}")
    frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout
    versions = freeze_versions(frozen, (peer.distribution, *RECORDED))
    if versions.get(peer.distribution) != peer.version:
        raise RuntimeError(f"pip installed {peer.distribution} {versions.get(peer.distribution)}, not {peer.version}")
    return Installed(peer, venv, versions)


def freeze_versions(frozen: str, names: Sequence[str]) -> dict[str, str]:
    """``name==version`` lines of ``pip freeze`` for ``names`` (compared as PyPI normalizes names)."""
    wanted = {_normal(n): n for n in names}
    found: dict[str, str] = {}
    for line in frozen.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and _normal(name) in wanted:
            found[wanted[_normal(name)]] = version
    return found


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def launch_spec(peer: Peer, venv: Path, *, model: Path, voices: Path, work: Path, port: int,
                threads: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start ``peer`` on 127.0.0.1:``port``, offline, on ``model`` and
    ``voices``, with its files under ``work`` (laid out here where it needs a directory of its own)."""
    work.mkdir(parents=True, exist_ok=True)
    if peer.name == "fastkokoro":
        return [str(venv / "bin" / "fastkokoro")], {
            **OFFLINE, "FASTKOKORO_HOST": "127.0.0.1", "FASTKOKORO_PORT": str(port),
            "FASTKOKORO_MODEL_PATH": str(model), "FASTKOKORO_VOICES_PATH": str(voices),
            "FASTKOKORO_CACHE_DIR": str(work / "cache"), "FASTKOKORO_RUNTIME_TAIL_TRIM_MS": "0",
            "FASTKOKORO_ONNX_INTRA_OP_NUM_THREADS": str(threads), "FASTKOKORO_ONNX_INTER_OP_NUM_THREADS": "1"}
    if peer.name == "kokoro-pi":
        models = lay_out_kokoro_pi(work / "models", model, voices)
        return [str(venv / "bin" / "kokoro-pi"), "serve", "--models", str(models), "--variant", "upstream",
                "--threads", str(threads), "--host", "127.0.0.1", "--port", str(port)], {
            **OFFLINE, "XDG_CONFIG_HOME": str(work / "config")}  # no user config file is read
    raise ValueError(f"unknown peer {peer.name!r}")


def lay_out_kokoro_pi(models: Path, model: Path, voices: Path) -> Path:
    """The directory ``kokoro-pi build`` would leave, with one variant, ``upstream``: ``model`` as is (links, so
    nothing is copied), the voices under the name kokoro-onnx reads (an NPZ whatever its suffix), no checksums."""
    models.mkdir(parents=True, exist_ok=True)
    for name, target in ((model.name, model), ("voices-v1.0.bin", voices)):
        link = models / name
        link.unlink(missing_ok=True)
        link.symlink_to(target.resolve())
    manifest = {"kokoro_pi": 1, "voice": "af_heart", "variant": "upstream",
                "variants": {"upstream": {"model": model.name, "custom_ops": [], "backend": "upstream-onnx"}},
                "checksums": {}, "build": {"note": "laid out by bench.peers: the shipped int8 file, unchanged"}}
    (models / "models.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return models


def quiesce(pid: int, *, settle_s: float = 0.5, busy_fraction: float = 0.05, timeout_s: float = 120.0) -> float:
    """Wait until the process tree of ``pid`` uses under ``busy_fraction`` of a CPU over ``settle_s``: a peer has
    no endpoint that counts requests in flight, and it finishes the piece it is synthesizing for a client that hung
    up. Returns the seconds waited."""
    started = time.monotonic()
    before = cpu_seconds(pid)
    while time.monotonic() - started < timeout_s:
        time.sleep(settle_s)
        now = cpu_seconds(pid)
        if now - before < busy_fraction * settle_s:
            break
        before = now
    return time.monotonic() - started


def check_takes(name: str, reference_name: str, reference: Mapping[str, npt.NDArray[np.float32]],
                takes: Mapping[str, npt.NDArray[np.float32]]) -> dict[str, Any]:
    """The output check (`bench.checks`) of whole responses: every utterance both servers completed during the
    load, against the reference server's response to the same text. A server that chunks and pauses otherwise
    than this one differs in length by its pauses as well as by its durations."""
    from bench import checks

    common = sorted(set(reference) & set(takes))
    if not common:
        return {"name": name, "reference": reference_name, "passed": False, "error": "no utterance in common"}
    verdict, found = checks.compare(name, reference_name, {k: reference[k] for k in common},
                                    {k: takes[k] for k in common})
    return {"name": name, "reference": reference_name, "passed": verdict.passed, "utterances": len(common),
            "failed": list(verdict.failed), "max_abs_sample_diff": verdict.max_abs_sample_diff,
            "max_length_diff_pct": max(100.0 * abs(c.sample_diff) / max(1, c.reference_samples) for c in found),
            "mean_mel_distance": verdict.mean_mel_distance, "max_mel_distance": verdict.max_mel_distance,
            "detail": [{"utterance": c.key, "reference_samples": c.reference_samples, "samples": c.samples,
                        "mel_distance": c.mel_distance if math.isfinite(c.mel_distance) else None,
                        "passed": c.passed} for c in found]}


def section(results: Mapping[str, Any]) -> str:
    """The report's part on the peers and the foreign instance: what ran, how, and their output checks."""
    installed = results.get("peers", {})
    served = results.get("checks", {}).get("served", {})
    if not installed and not served:
        return ""
    lines = []
    if installed:
        lines += ["| peer | installed | other versions | command | settings and adapter |", "|---|---|---|---|---|"]
        for name, info in installed.items():
            if "error" in info:
                lines.append(f"| `{name}` | FAILED: {info['error'][:200]} | | | |")
                continue
            others = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if k != info["distribution"])
            env = " ".join(f"{k}={v}" for k, v in info["env"].items() if not k.endswith(("_PATH", "_DIR", "_HOME")))
            lines.append(f"| `{name}` | {info['requirement']} | {others} | `{' '.join(info['argv_shown'])}` "
                         f"{env} | {info['settings_note']} |")
        lines.append("")
    if served:
        lines += ["Output check of whole responses (`bench.peers.check_takes`): the first complete response to each "
                  "utterance during the load, against the tuned server's (`complete`) to the same text. Lengths "
                  "differ by each server's pauses and edge trimming as well as by durations, and kokoro-pi speaks "
                  "through espeak-ng where the others use misaki: a failure here says the audio differs, the word "
                  "error rate (`python -m bench quality --peer NAME`) says whether the words do.", "",
                  "| configuration | result | utterances | max length difference | log-mel distance mean / max | "
                  "failing |", "|---|---|---|---|---|---|"]
        for name, v in served.items():
            if "error" in v:
                lines.append(f"| `{name}` | not checked | - | - | - | {v['error']} |")
                continue
            lines.append(f"| `{name}` | {'pass' if v['passed'] else '**FAIL**'} | {v['utterances']} | "
                         f"{v['max_length_diff_pct']:.1f} % ({v['max_abs_sample_diff']} samples) | "
                         f"{v['mean_mel_distance']:.3f} / {v['max_mel_distance']:.3f} | "
                         f"{', '.join(v['failed'][:8])} |")
    return "\n".join(lines)
