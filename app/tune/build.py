"""The build-time compile: ``python -m app.tune.build --model PATH --out DIR``.

Compiles the model into ``DIR/<key>/`` (the key of `app.runtime.compile_cache`) through the server's
own OpenVINO backend (same compile properties), reloads it to prove OpenVINO imports it, runs one
inference on the imported model and writes the manifest that `app.runtime.compile_cache.choose`
checks before a server uses the directory. It also saves ONNX Runtime's optimized graph of the model into
``DIR/onnxruntime/`` (`save_graph`), which a server on ONNX Runtime opens instead of optimizing the model at
its first start. The image build runs it (see Containerfile).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from app.forms.modelfile import sha256_of
from app.runtime.backends.base import Backend, Resolved
from app.runtime.backends.openvino import OpenVinoBackend
from app.runtime.compile_cache import Target, cache_key, write_manifest
from app.sizing import CpuBudget, PoolShape, read_budget, shape_for
from app.text.vocab import Vocab
from app.voices import VoiceBank

log = logging.getLogger(__name__)


def build(model_path: Path, out: Path, *, precision: str = "f32", streams: int = 0, threads_per_stream: int = 0,
          model_sha256: str | None = None) -> Path:
    """Compile ``model_path`` into ``out/<key>/`` with the server's compile properties, prove that OpenVINO
    imports it and that the imported model speaks, and write the manifest. Returns the directory."""
    model_path = model_path.resolve()
    target = Target.here()
    digest = model_sha256 or sha256_of(model_path)
    key = cache_key(model_path, digest, target=target)
    directory = out / key
    shutil.rmtree(directory, ignore_errors=True)
    # OpenVINO's key ignores streams and threads, so any shape yields the blob the server will find;
    # the server's own sizing rule keeps the build's compile like the server's.
    shape = shape_for(read_budget(), streams, threads_per_stream)

    def backend() -> OpenVinoBackend:
        return OpenVinoBackend(model_path, shape, runtime_defaults=False, precision=precision, cache_dir=directory)

    compiled = _in_thread(backend().load)
    if not any(p.suffix == ".blob" for p in directory.iterdir()):
        raise RuntimeError(f"OpenVINO wrote no blob into {directory}")
    check = backend()
    imported = _in_thread(check.load)
    if not imported.from_cache:
        raise RuntimeError(f"OpenVINO did not import the cache it just wrote in {directory}")
    samples = _speak(check)
    check.unload()
    write_manifest(directory, key, model_path, digest, target, {
        "created_unix": int(time.time()),
        "config": compiled.extra.get("config", {}),
        "compile_s": round(compiled.load_s, 2),
        "import_s": round(imported.load_s, 2),
        "smoke_samples": samples,
    })
    # OpenVINO writes blobs 0440; the server runs as another (non-root) user than the build.
    for path in [directory, *directory.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    log.info("compiled %s into %s in %.1f s; import %.1f s; smoke inference %d samples", model_path, directory,
             compiled.load_s, imported.load_s, samples)
    save_graph(model_path, out)
    return directory


def save_graph(model_path: Path, out: Path) -> Path:
    """ONNX Runtime's optimized graph of ``model_path`` in ``out/onnxruntime/``, where a server on ONNX Runtime with
    ``TTS_BAKED_CACHE_DIR=out`` opens it instead of optimizing the model at its first start. Named like the graph a
    server saves itself (model size and mtime, runtime version, CPU family), so a server on another CPU family or
    runtime version does not find it and optimizes as before. The portable graph, without the weights packed for the
    build machine's CPU (the server's own saves keep those, named for its CPU's flags:
    `app.runtime.backends.onnxruntime`)."""
    return _save_graph(model_path, out / "onnxruntime", prepacked=False)


def _budget(cpus: int) -> CpuBudget:
    """This machine's CPU budget, or one of ``cpus`` CPUs (the image tuned for a smaller budget than the build's:
    the Containerfile's ``TUNE_CPUS``), so that the tuned choice is resolved as the image's server will resolve it."""
    budget = read_budget()
    if cpus <= 0:
        return budget
    if cpus > budget.cpus:
        raise ValueError(f"--cpus {cpus} is more than this machine's budget of {budget.cpus}")
    return dataclasses.replace(budget, affinity=cpus, quota=None)


def save_packed_graphs(cpus: int = 0) -> list[Path]:
    """ONNX Runtime's optimized graphs, with the weights packed for this CPU, of what a server started with this
    environment opens (the served file where ONNX Runtime serves it: the tuned choice baked into
    ``TTS_BAKED_CACHE_DIR``; none under OpenVINO), saved there beside the portable ones. Named for this CPU's flags
    (`app.runtime.backends.onnxruntime`), like the tuning manifest: a container on the build machine's CPU opens
    them (no packing at open, one mapped copy of the weights for all its sessions); on any other CPU the portable
    graph, as before. For a tuned image only: where no manifest applies they would never be opened."""
    from app.served import resolve
    from app.settings import Settings

    settings = Settings.from_process()
    if settings.baked_cache_dir is None:
        raise RuntimeError("TTS_BAKED_CACHE_DIR is not set: nowhere to save the packed graphs")
    found = resolve(settings, _budget(cpus))
    if found.settings.backend != "onnxruntime":
        return []
    return [_save_graph(found.spec.model_path, settings.baked_cache_dir / "onnxruntime", prepacked=True)]


def bake_shipped_forms() -> list[Path]:
    """Make, under ``TTS_BAKED_CACHE_DIR``, the model forms that a server on a CPU other than the build machine's
    opens (`shipped_forms`), the portable default's output-checked (`app.tune.portable`), so that a container on any
    CPU class on record, or on none, starts without making one. Returns the forms' files."""
    from app.forms import store
    from app.tune import portable

    baked, model, digest, forms = _shipped_forms()
    made = [portable.form_path(model, baked, digest, [])[0] if form == portable.FORM
            else store.path(form, model, baked, digest) for form in forms]
    log.info("forms a server on any CPU class opens: %s", ", ".join(str(p) for p in made))
    return made


def _shipped_forms() -> tuple[Path, Path, str, list[str]]:
    """The baked cache directory, the served model, its sha256, and the derived forms the tuning manifests shipped
    with the package (`app.tune.manifest.SHIPPED`) serve for it, with the portable default's first."""
    import json

    from app.forms import store
    from app.served import served_model
    from app.settings import Settings
    from app.tune import portable
    from app.tune.manifest import DIRECTORY, SHIPPED, Manifest

    settings = Settings.from_process()
    baked = settings.baked_cache_dir
    if baked is None:
        raise RuntimeError("TTS_BAKED_CACHE_DIR is not set: nowhere to make the forms")
    model, digest = served_model(settings, baked)
    shipped = [Manifest.from_json(json.loads(p.read_text())) for p in sorted((SHIPPED / DIRECTORY).glob("*.json"))]
    named = {m.choice.form for m in shipped if m.key.model_sha256 == digest} - {store.ONNX, portable.FORM}
    return baked, model, digest, [portable.FORM, *sorted(named)]


def prune_forms(cpus: int = 0) -> list[Path]:
    """Remove from ``TTS_BAKED_CACHE_DIR`` the model forms that a server started with this environment does not
    open, with ONNX Runtime's graphs of them; returns the form directories removed.

    The tuning run makes every form it measures and the image keeps what it made, but a server opens the tuned
    choice's form (`app.served.resolve`), and on another CPU the form its class's shipped manifest
    or the portable default names (`bake_shipped_forms`). Each form is a copy of the model, 90-320 MB. For a tuned
    image only: run after the manifest is in place, with the budget it was tuned for (``cpus``); where no manifest
    applies to that budget nothing is removed."""
    from app.forms import store
    from app.runtime.backends.onnxruntime import saved_graphs
    from app.served import resolve
    from app.settings import Settings

    settings = Settings.from_process()
    baked = settings.baked_cache_dir
    if baked is None:
        raise RuntimeError("TTS_BAKED_CACHE_DIR is not set: no forms to prune")
    budget = _budget(cpus)
    found = resolve(settings, budget)
    if found.choice.source not in ("tuned", "class"):
        # Nothing chosen for this budget: every form would look unused. Keep them (a build whose tuning failed,
        # or run for another budget than the tuning's).
        log.warning("no tuning manifest applies to a %d-CPU budget here (%s): no form removed", budget.cpus,
                    found.choice.reason)
        return []
    spec = found.spec
    opened = {spec.model_path.parent.resolve()}
    # And those a server on another CPU class opens (`bake_shipped_forms`).
    _, _, digest, shipped = _shipped_forms()
    opened |= {p.parent.resolve() for p in (store.find(f, baked, digest) for f in shipped) if p is not None}
    removed = []
    for record in sorted((baked / "forms").glob(f"*/*/{store.RECORD}")):
        directory = record.parent
        if directory.resolve() in opened:
            continue
        size = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
        graphs = [g for model in directory.glob("*.onnx") for g in saved_graphs(model, baked / "onnxruntime")]
        size += sum(g.stat().st_size for g in graphs)
        for graph in graphs:
            graph.unlink()
        shutil.rmtree(directory)
        removed.append(directory)
        log.info("removed the %s form (%d MB with its graphs): the tuned server does not open it", directory.name,
                 size >> 20)
    return removed


def _save_graph(model_path: Path, folder: Path, *, prepacked: bool) -> Path:
    """Open ``model_path`` with ONNX Runtime as a server does, saving its optimized graph into ``folder`` (with
    the weights packed for this CPU, or portable), speak once through it, and return the graph's path."""
    from app.runtime.backends.onnxruntime import OnnxRuntimeBackend

    backend = OnnxRuntimeBackend(model_path, PoolShape(1, 1), runtime_defaults=False, optimized_dir=folder,
                                 prepacked=prepacked)
    backend.load()
    _speak(backend)  # raises if no usable audio came out
    backend.unload()
    import onnxruntime

    saved = backend.optimized_path(onnxruntime.__version__)
    if saved is None or not saved.is_file():
        raise RuntimeError(f"ONNX Runtime saved no optimized graph of {model_path} into {folder}")
    for path in [folder, *folder.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    log.info("saved ONNX Runtime's optimized graph of %s%s as %s", model_path,
             " with its packed weights" if prepacked else "", saved)
    return saved


def _in_thread(load: Callable[[], Resolved]) -> Resolved:
    """Run ``load`` in a worker thread, as the server does, so the build compiles the way a server start
    would. It mattered once (AMD EPYC, OpenVINO 2026.4.1): with ``CPU_DENORMALS_OPTIMIZATION=YES``, a compile
    on the main thread left every later inference failing a Broadcast shape check; on another thread it spoke."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(load).result()


def _speak(backend: Backend) -> int:
    """One inference on slot 0 with the embedded vocabulary and first voice: audio must come out."""
    tokens = Vocab.embedded().tokens("ðɪs ɪz ɐ tˈɛst ʌv ðə kˈæʃ.")
    voices = VoiceBank.load(None)
    style = voices.resolve(voices.names[0]).style_for(tokens.shape[1] - 2)
    audio = backend.infer(0, tokens, style, 1.0)
    if audio.size == 0 or not np.isfinite(audio).all():
        raise RuntimeError(f"the imported model produced no usable audio ({audio.size} samples)")
    return int(audio.size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.tune.build",
                                     description="Compile the model ahead of time into DIR/<key>/ (OpenVINO) and save "
                                                 "ONNX Runtime's optimized graph into DIR/onnxruntime/.")
    parser.add_argument("--model", type=Path, help="the ONNX model the server will load (same path)")
    parser.add_argument("--out", type=Path, help="root of the baked caches (TTS_BAKED_CACHE_DIR)")
    parser.add_argument("--sha256", default=None, help="the model's sha256, if known (saves hashing it)")
    parser.add_argument("--precision", default="f32", help="as TTS_PRECISION")
    parser.add_argument("--streams", type=int, default=0, help="as TTS_STREAMS (not part of OpenVINO's key)")
    parser.add_argument("--threads-per-stream", type=int, default=0, help="as TTS_THREADS_PER_STREAM")
    parser.add_argument("--graph-only", action="store_true",
                        help="only save ONNX Runtime's optimized graph of --model (a form the tuner chose for it)")
    parser.add_argument("--packed-for-choice", action="store_true",
                        help="only save, for what a server started with this environment opens (the tuned choice), "
                             "ONNX Runtime's graphs with their weights packed for this CPU (--model and --out unused)")
    parser.add_argument("--cpus", type=int, default=0,
                        help="with --packed-for-choice and --prune-forms: the CPU budget the image was tuned for "
                             "(python -m app tune --cpus); default: this machine's")
    parser.add_argument("--shipped-forms", action="store_true",
                        help="only make in TTS_BAKED_CACHE_DIR the forms that the shipped tuning manifests and the "
                             "portable default serve, the latter output-checked (--model and --out unused)")
    parser.add_argument("--prune-forms", action="store_true",
                        help="only remove from TTS_BAKED_CACHE_DIR the model forms a server started with this "
                             "environment does not open, and their graphs (--model and --out unused)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.packed_for_choice or args.prune_forms or args.shipped_forms:
        if args.shipped_forms:
            bake_shipped_forms()
        if args.prune_forms:
            prune_forms(args.cpus)
        if args.packed_for_choice:
            save_packed_graphs(args.cpus)
        return 0
    if args.model is None or args.out is None:
        parser.error("--model and --out are required")
    if not args.model.is_file():
        log.error("model file %s does not exist", args.model)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.graph_only:
        save_graph(args.model, args.out)
    else:
        directory = build(args.model, args.out, precision=args.precision, streams=args.streams,
                          threads_per_stream=args.threads_per_stream, model_sha256=args.sha256)
        log.info("baked compile cache ready: %s", directory)
    os.chmod(args.out, 0o755)
    return 0


if __name__ == "__main__":
    sys.exit(main())
