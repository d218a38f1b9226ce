"""ONNX Runtime's saved, pre-optimized graph of the served model: same audio, and damage is survived."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.forms import modelfile
from app.runtime import cpu
from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
from app.sizing import PoolShape
from app.text.vocab import Vocab
from app.voices import VoiceBank


@pytest.fixture(scope="module")
def model(cache_dir: Path) -> Path:
    return modelfile.resolve(None, [cache_dir / "models"])


PHRASE = "həlˈO ðˈɛɹ."
"""What every session here speaks (about a second of audio): any difference in a graph shows bit for bit in the
audio of any length, and each inference costs about its audio's length in CPU time."""


def speak(backend: OnnxRuntimeBackend) -> np.ndarray:
    vocab = Vocab.embedded()
    ids = vocab.ids(PHRASE)
    tokens = np.array([[0, *ids, 0]], dtype=np.int64)
    style = VoiceBank.load(None).resolve("af_heart").style_for(len(ids))
    return backend.infer(0, tokens, style, 1.0)


@pytest.fixture(scope="module")
def plain(model: Path) -> OnnxRuntimeBackend:
    """The pool's backend on the model as shipped, saving no graph: what every saved graph must speak like (loaded
    once for the module; the tests only read from it)."""
    backend = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def reference(plain: OnnxRuntimeBackend) -> np.ndarray:
    return speak(plain)


@pytest.fixture(scope="module")
def first_save(model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, OnnxRuntimeBackend]:
    """A first load with an empty graph folder, which optimizes the model and saves the graph there (once for the
    module: the held-session test starts from a copy of what it saved); the folder and the backend."""
    folder = tmp_path_factory.mktemp("saved")
    first = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False, optimized_dir=folder)
    first.load()
    return folder, first


def test_the_saved_graph_gives_identical_audio_and_is_reused(
        model: Path, first_save: tuple[Path, OnnxRuntimeBackend], reference: np.ndarray) -> None:
    folder, first = first_save
    import onnxruntime

    saved = first.optimized_path(onnxruntime.__version__)
    assert saved is not None and saved.is_file() and saved.parent == folder
    assert not list(folder.glob(".*"))  # no partial file left behind
    # The weights as the kernels packed them, in a data file beside the graph, for this CPU's flags only.
    assert saved.name.endswith(f"-{cpu.family()}-{cpu.flags_digest()}.packed.onnx")
    [data] = folder.glob("*.data")
    assert data.stat().st_size > 90_000_000 and saved.stat().st_size < 10_000_000
    assert np.array_equal(speak(first), reference)

    stamp = saved.stat().st_mtime_ns
    second = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False, optimized_dir=folder)
    second.load()
    assert saved.stat().st_mtime_ns == stamp  # opened, not written again
    assert np.array_equal(speak(second), reference)


def test_the_sessions_plan_no_memory_pattern_and_speak_the_same(model: Path, plain: OnnxRuntimeBackend) -> None:
    """The pool's sessions allocate each tensor from the arena instead of one planned block per input length (ONNX
    Runtime's memory pattern, which kept far more memory with Kokoro's varying lengths): the audio is the same, bit
    for bit, as a session with the pattern."""
    import onnxruntime as ort

    assert not plain._sessions[0].get_session_options().enable_mem_pattern
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    assert options.enable_mem_pattern  # ONNX Runtime's default
    patterned = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    vocab = Vocab.embedded()
    ids = vocab.ids(PHRASE)
    tokens = np.array([[0, *ids, 0]], dtype=np.int64)
    style = VoiceBank.load(None).resolve("af_heart").style_for(len(ids))
    expected = patterned.run(["audio"], {"tokens": tokens, "style": style.reshape(1, -1),
                                         "speed": np.array([1.0], np.float32)})[0]
    assert np.array_equal(speak(plain), expected)


def test_a_damaged_saved_graph_is_replaced(model: Path, tmp_path: Path, reference: np.ndarray) -> None:
    backend = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False, optimized_dir=tmp_path)
    import onnxruntime

    saved = backend.optimized_path(onnxruntime.__version__)
    assert saved is not None
    saved.write_bytes(b"not a model")
    backend.load()
    assert saved.stat().st_size > 1_000_000  # optimized again and saved whole
    assert np.array_equal(speak(backend), reference)  # and it speaks as the model does
    # Its packed weights cut short: the same.
    [data] = tmp_path.glob("*.data")
    data.write_bytes(data.read_bytes()[:1000])
    damaged = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False, optimized_dir=tmp_path)
    damaged.load()
    assert sum(p.stat().st_size for p in tmp_path.glob("*.data")) > 90_000_000
    assert np.array_equal(speak(damaged), reference)


def test_a_baked_graph_is_opened_first_and_nothing_is_written(model: Path, tmp_path: Path,
                                                              reference: np.ndarray) -> None:
    """The image build saves the graph into the baked cache (`app.tune.build.save_graph`); a server
    whose writable cache starts empty opens that one and optimizes nothing."""
    from app.tune.build import save_graph

    baked = save_graph(model, tmp_path / "baked")
    writable = tmp_path / "writable"
    backend = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False,
                                 optimized_dir=writable, baked_optimized_dir=baked.parent)
    backend.load()
    assert baked in backend.files()
    assert not writable.exists()
    assert np.array_equal(speak(backend), reference)
    # The image's graph is the portable one: named for the CPU family, its weights packed at each open.
    assert baked.name.endswith(f"-{cpu.family()}.onnx") and not list(baked.parent.glob("*.data"))
    # A graph it cannot open is not written over (it may be read-only): the model is optimized into the writable cache.
    baked.write_bytes(b"not a model")
    again = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False,
                               optimized_dir=writable, baked_optimized_dir=baked.parent)
    again.load()
    assert baked.read_bytes() == b"not a model" and any(writable.glob("*.onnx"))
    assert np.array_equal(speak(again), reference)


def test_a_graph_saved_into_memory_keeps_no_packed_weights(model: Path, tmp_path: Path) -> None:
    """On a file system held in memory (a container's tmpfs /tmp) the packed weights' data file would be memory
    the container is billed for: the portable graph is saved there instead."""
    from app.runtime.backends.onnxruntime import in_memory

    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\ntmpfs /run/a\\040b tmpfs rw 0 0\n"
                      "/dev/vdb /tmp/disk ext4 rw 0 0\n")
    assert in_memory(Path("/tmp/tts-cache/onnxruntime"), mounts) and in_memory(Path("/run/a b/c"), mounts)
    assert not in_memory(Path("/tmp/disk/cache"), mounts) and not in_memory(Path("/var/cache"), mounts)
    assert not in_memory(Path("/tmp"), tmp_path / "no-such-table")
    shm = Path("/dev/shm")
    if not in_memory(shm):
        pytest.skip("no tmpfs at /dev/shm here")
    folder = shm / f"tts-test-{tmp_path.name}"
    try:
        backend = OnnxRuntimeBackend(model, PoolShape(1, 1), runtime_defaults=False,
                                     optimized_dir=folder)
        backend.load()
        import onnxruntime

        saved = backend.optimized_path(onnxruntime.__version__)
        assert saved is not None and saved.name.endswith(f"-{cpu.family()}.onnx") and saved.is_file()
        assert not list(folder.glob("*.data"))
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_a_tuned_image_bakes_the_chosen_graph_with_its_packed_weights_for_its_cpu(
        cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m app.tune.build --packed-for-choice` (the Containerfile's last tuning step) saves, for what the
    tuned choice opens with ONNX Runtime, the packed graph into the baked cache; a server there opens it and writes
    nothing."""
    from app.served import served_model
    from app.settings import Settings
    from app.sizing import read_budget
    from app.tune import manifest
    from app.tune.build import main

    baked = tmp_path / "baked"
    digest = served_model(Settings(cache_dir=cache_dir), cache_dir)[1]
    choice = manifest.Candidate("onnxruntime", "f32", 1, 2)
    manifest.write(baked, manifest.Manifest(key=manifest.TuneKey.here(read_budget().cpus, digest), choice=choice,
                                        why="ort 1 x 2", table=[]))
    monkeypatch.setenv("TTS_BAKED_CACHE_DIR", str(baked))
    monkeypatch.setenv("TTS_CACHE_DIR", str(cache_dir))
    assert main(["--packed-for-choice"]) == 0
    [graph] = (baked / "onnxruntime").glob("*.packed.onnx")
    assert graph.name.endswith(f"-{cpu.flags_digest()}.packed.onnx") and list(graph.parent.glob("*.data"))
    served = served_model(Settings(cache_dir=cache_dir), cache_dir)[0]
    backend = OnnxRuntimeBackend(served, PoolShape(1, 2), runtime_defaults=False,
                                 optimized_dir=tmp_path / "writable", baked_optimized_dir=graph.parent)
    backend.load()
    assert graph in backend.files() and not (tmp_path / "writable").exists()
    assert set(graph.parent.glob("*.data")) <= set(backend.files())  # evicted with the graph
    assert speak(backend).size > 24000 // 2
    # So does a server whose writable cache lies on tmpfs (a container's /tmp), which saves no packed graph itself.
    from app.runtime.backends.onnxruntime import in_memory

    if in_memory(Path("/dev/shm")):
        shm = Path("/dev/shm") / f"tts-test-{tmp_path.name}"
        in_container = OnnxRuntimeBackend(served, PoolShape(1, 2), runtime_defaults=False,
                                          optimized_dir=shm, baked_optimized_dir=graph.parent)
        in_container.load()
        assert graph in in_container.files() and not shm.exists()


def test_a_baked_cache_that_is_the_writable_one_holds_no_baked_graphs(tmp_path: Path) -> None:
    """``TTS_BAKED_CACHE_DIR`` pointed at the cache the server writes (a machine tuned in place): a portable graph an
    earlier version saved there is the writable cache's to replace with a packed one, not a baked graph to open
    (it was, so its weights were packed at every open)."""
    from app.runtime.spec import Spec
    from app.settings import Settings

    cache = tmp_path / "cache"
    cache.mkdir()
    (tmp_path / "link").symlink_to(cache)

    def spec(baked: Path) -> Spec:
        return Spec(settings=Settings(cache_dir=cache, baked_cache_dir=baked), model_path=tmp_path / "m.onnx",
                    shape=PoolShape(1, 1), writable=cache)

    assert spec(cache).baked_graphs is None and spec(tmp_path / "link").baked_graphs is None
    assert spec(tmp_path / "image").baked_graphs == tmp_path / "image" / "onnxruntime"


def test_a_tuned_image_keeps_only_the_forms_its_server_opens(
        cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m app.tune.build --prune-forms` (the Containerfile's tuning step): the forms the tuning run made
    that no server opens leave the image, with ONNX Runtime's graphs of them; the chosen form, the forms a server on
    another CPU class opens (the shipped manifests', the portable default's) and their graphs stay."""
    import json

    import onnxruntime

    from app.forms import store
    from app.runtime.backends.onnxruntime import graph_prefix
    from app.served import served_model
    from app.settings import Settings
    from app.sizing import read_budget
    from app.tune import manifest
    from app.tune.build import main

    baked = tmp_path / "baked"
    digest = served_model(Settings(cache_dir=cache_dir), cache_dir)[1]
    graphs = baked / "onnxruntime"
    graphs.mkdir(parents=True)

    def fake_form(form: str, files: dict[str, bytes]) -> Path:
        directory = baked / store._relative(form, digest)
        directory.mkdir(parents=True)
        for name, content in files.items():
            (directory / name).write_bytes(content)
        record = {"form": form, "files": {n: len(c) for n, c in files.items()}, "sha256": form * 8}
        (directory / store.RECORD).write_text(json.dumps(record))
        return directory

    def fake_graphs(model: Path) -> list[Path]:
        stem = f"{graph_prefix(model)}ort{onnxruntime.__version__}-{cpu.family()}"
        saved = [graphs / f"{stem}.onnx", graphs / f"{stem}-{cpu.flags_digest()}.packed.onnx",
                 graphs / f"{stem}-{cpu.flags_digest()}.packed.1-2.data"]
        for path in saved:
            path.write_bytes(b"graph")
        return saved

    convgemm = fake_form(store.CONVGEMM, {store.ONNX_MODEL: b"a convgemm graph"})
    fused = fake_form(store.FUSED, {store.ONNX_MODEL: b"a fused graph"})
    dequant = fake_form(store.DEQUANT, {store.MODEL: b"<xml/>", "model.bin": b"weights"})
    dequant16 = fake_form(store.DEQUANT16, {store.MODEL: b"<xml/>", "model.bin": b"weights"})
    convgemm_graphs = fake_graphs(convgemm / store.ONNX_MODEL)
    shipped_graph = graphs / "kokoro-v1.0.int8.timed-1-2-ort1.0-avx2.onnx"
    shipped_graph.write_bytes(b"graph")

    monkeypatch.setenv("TTS_BAKED_CACHE_DIR", str(baked))
    monkeypatch.setenv("TTS_CACHE_DIR", str(cache_dir))
    choice = manifest.Candidate("openvino", "bf16", read_budget().cpus, 1, form=store.DEQUANT16)
    manifest.write(baked, manifest.Manifest(key=manifest.TuneKey.here(read_budget().cpus, digest), choice=choice,
                                            why="dequant16 was fastest", table=[]))
    assert main(["--prune-forms"]) == 0
    # The tuned choice's form stays, and so does the fused form (the portable default, and every shipped manifest's);
    # the forms nothing opens go (convgemm: no shipped manifest names it since AMD with AVX2 was tuned again).
    assert dequant16.is_dir() and fused.is_dir()
    assert not dequant.exists() and not convgemm.exists() and not any(g.exists() for g in convgemm_graphs)
    assert shipped_graph.is_file()


def test_a_held_session_serves_the_next_load_at_once_and_every_slot_speaks_the_same(
        model: Path, tmp_path: Path, reference: np.ndarray, first_save: tuple[Path, OnnxRuntimeBackend]) -> None:
    """A session opened ahead of a load (`OnnxRuntimeBackend.hold`, while released) is the next load's first: that
    load opens only the others, behind it. With two streams it is the wide session (on both threads), which the request
    that wakes an idle instance runs on; each stream's slot speaks the same bytes once its own session is open."""
    import shutil

    import onnxruntime as ort

    # The graph (and its packed weights) that the held session opens, as an earlier load saved it.
    graphs = tmp_path / "graphs"
    shutil.copytree(first_save[0], graphs)
    opened: list[object] = []
    real = ort.InferenceSession

    def counting(*args: object, **kwargs: object) -> object:
        opened.append(args[0])
        return real(*args, **kwargs)

    backend = OnnxRuntimeBackend(model, PoolShape(2, 1), runtime_defaults=False, optimized_dir=graphs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ort, "InferenceSession", counting)
        backend.hold()
        assert len(opened) == 1 and not backend.loaded and backend.wide_open
        resolved = backend.load()
        assert resolved.slots == 2
        vocab = Vocab.embedded()
        ids = vocab.ids(PHRASE)
        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
        style = VoiceBank.load(None).resolve("af_heart").style_for(len(ids))
        for slot in (2, 1, 0, 1):  # the wide slot on the held session at once, then each stream's own
            assert np.array_equal(backend.infer(slot, tokens, style, 1.0), reference)
    assert len(opened) == 3  # the held one and the two streams: no second wide session
