"""The compile cache key, the choice between a baked and a writable cache, and what OpenVINO does with both."""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.forms import modelfile
from app.runtime import compile_cache
from app.runtime.compile_cache import Target, cache_key, choose, write_manifest
from app.tune import build

HERE = Target(openvino="2026.4.1-22982-e213a147257-releases/2026/4", isa="avx2", device="AMD EPYC")
SHA = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "model.onnx"
    path.parent.mkdir()
    path.write_bytes(b"not really onnx, but the cache only cares about its bytes and stat")
    return path


def bake(baked: Path, model: Path, target: Target = HERE, blob: bytes = b"compiled" * 1000) -> Path:
    """A baked cache as ``python -m app.tune.build`` leaves it, without compiling anything."""
    key = cache_key(model.resolve(), None, target=target)
    directory = baked / key
    directory.mkdir(parents=True)
    (directory / "123456789.blob").write_bytes(blob)
    write_manifest(directory, key, model.resolve(), compile_cache.sha256_of(model), target, {})
    return directory


def test_key_changes_with_what_makes_a_blob_valid(model: Path) -> None:
    base = cache_key(model, SHA, target=HERE)
    others = [
        cache_key(model, SHA, target=Target("2026.5.0-23000-abc", HERE.isa, HERE.device)),
        cache_key(model, SHA, target=Target(HERE.openvino, "avx512", HERE.device)),
        cache_key(model, SHA, target=Target(HERE.openvino, HERE.isa, "Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz")),
        cache_key(model, "0" * 64, target=HERE),
    ]
    assert len({base, *others}) == 5
    for key in (base, *others):
        assert re.fullmatch(r"[a-z0-9._-]+", key) and len(key) < 120, key
    assert base.startswith("ov2026.4.1-22982_avx2_amd-epyc-") and base.endswith(SHA[:16])


def test_key_hashes_the_model_when_no_digest_is_given(model: Path) -> None:
    assert cache_key(model, None, target=HERE) == cache_key(model, compile_cache.sha256_of(model), target=HERE)


def test_choose_uses_the_baked_cache_when_the_key_matches(tmp_path: Path, model: Path) -> None:
    directory = bake(tmp_path / "baked", model)
    chosen, why = choose(tmp_path / "baked", tmp_path / "rw", model, None, target=HERE)
    assert chosen == directory
    assert why.startswith(f"baked cache matches key {directory.name}")


def test_choose_compiles_into_the_writable_cache_for_another_cpu(tmp_path: Path, model: Path) -> None:
    built = bake(tmp_path / "baked", model, Target(HERE.openvino, "amx", "Intel(R) Xeon(R) Platinum 8581C"))
    chosen, why = choose(tmp_path / "baked", tmp_path / "rw", model, None, target=HERE)
    assert chosen == tmp_path / "rw" / cache_key(model, None, target=HERE)
    assert f"image built for {built.name}" in why and f"compiling into {chosen}" in why


def test_choose_without_a_baked_cache(tmp_path: Path, model: Path) -> None:
    for baked in (None, tmp_path / "does-not-exist"):
        chosen, why = choose(baked, tmp_path / "rw", model, SHA, target=HERE)
        assert chosen == tmp_path / "rw" / cache_key(model, SHA, target=HERE), why


@pytest.mark.parametrize("damage", ["flipped", "truncated", "missing", "manifest"])
def test_choose_never_hands_over_a_damaged_baked_cache(tmp_path: Path, model: Path, damage: str) -> None:
    directory = bake(tmp_path / "baked", model)
    blob = directory / "123456789.blob"
    if damage == "flipped":  # same size: only the digest tells (OpenVINO itself loads such a blob)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    elif damage == "truncated":
        blob.write_bytes(blob.read_bytes()[:100])
    elif damage == "missing":
        blob.unlink()
    else:
        (directory / "manifest.json").write_text("{not json")
    chosen, why = choose(tmp_path / "baked", tmp_path / "rw", model, None, target=HERE)
    assert chosen.parent == tmp_path / "rw", why


def test_a_flipped_byte_passes_without_verification(tmp_path: Path, model: Path) -> None:
    """``verify=False`` trades the digest check (0.3 s for the real blob) for trusting sizes only."""
    directory = bake(tmp_path / "baked", model)
    blob = directory / "123456789.blob"
    blob.write_bytes(b"X" + blob.read_bytes()[1:])
    assert choose(tmp_path / "baked", tmp_path / "rw", model, None, verify=False, target=HERE)[0] == directory


def test_choose_rejects_a_cache_built_for_another_model_file(tmp_path: Path, model: Path) -> None:
    bake(tmp_path / "baked", model)
    # OpenVINO would find the blob stale (mtime) and, in a read-only directory, raise trying to delete it.
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 5_000_000_000))
    chosen, why = choose(tmp_path / "baked", tmp_path / "rw", model, None, target=HERE)
    assert chosen.parent == tmp_path / "rw" and "model file changed" in why
    moved = tmp_path / "elsewhere.onnx"
    shutil.copy2(model, moved)
    chosen, why = choose(tmp_path / "baked", tmp_path / "rw", moved, None, target=HERE)
    assert chosen.parent == tmp_path / "rw"


def test_choose_takes_the_model_digest_from_a_matching_manifest(tmp_path: Path, model: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    directory = bake(tmp_path / "baked", model)
    hashed: list[Path] = []
    real = compile_cache.sha256_of
    monkeypatch.setattr(compile_cache, "sha256_of", lambda p: hashed.append(p) or real(p))
    assert choose(tmp_path / "baked", tmp_path / "rw", model, None, target=HERE)[0] == directory
    assert model.resolve() not in hashed  # only the blob was hashed, not the model


# Real OpenVINO: one compile of the embedded model (15-25 s on 2 cores) shared by the tests below.


@pytest.fixture(scope="module")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return modelfile.assemble(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def baked_real(tmp_path_factory: pytest.TempPathFactory, real_model: Path) -> Path:
    out = tmp_path_factory.mktemp("baked")
    return build.build(real_model, out, model_sha256=modelfile.expected_sha256())


def _load(model: Path, cache: Path) -> tuple[bool | None, float]:
    from app.runtime.backends.openvino import OpenVinoBackend
    from app.sizing import PoolShape

    backend = OpenVinoBackend(model, PoolShape(1, 1), runtime_defaults=False, precision="f32", cache_dir=cache)
    with ThreadPoolExecutor(1) as pool:  # as the server: compile off the main thread (as app.tune.build does)
        resolved = pool.submit(backend.load).result()
    backend.unload()
    return resolved.from_cache, resolved.load_s


@pytest.mark.slow
def test_the_build_cli_output_is_what_the_server_chooses_and_imports(baked_real: Path, real_model: Path,
                                                                     tmp_path: Path) -> None:
    manifest = json.loads((baked_real / "manifest.json").read_text())
    assert manifest["smoke_samples"] > 0 and manifest["model"]["sha256"] == modelfile.expected_sha256()
    chosen, why = choose(baked_real.parent, tmp_path / "rw", real_model, None)
    assert chosen == baked_real, why
    from_cache, _ = _load(real_model, chosen)
    assert from_cache is True
    assert not (tmp_path / "rw").exists()
    # ONNX Runtime's optimized graph too: a server on ONNX Runtime with an empty writable cache opens the baked one,
    # writes nothing.
    from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from app.sizing import PoolShape

    ort = OnnxRuntimeBackend(real_model, PoolShape(1, 1), runtime_defaults=False, optimized_dir=tmp_path / "rw-ort",
                             baked_optimized_dir=baked_real.parent / "onnxruntime")
    ort.load()
    graphs = list((baked_real.parent / "onnxruntime").glob("*.onnx"))
    assert len(graphs) == 1 and graphs[0] in ort.files()
    assert not (tmp_path / "rw-ort").exists()


@pytest.mark.slow
def test_openvino_recompiles_over_a_truncated_blob_in_a_writable_cache(baked_real: Path, real_model: Path,
                                                                       tmp_path: Path) -> None:
    """Finding (2026.4.1): no exception, no crash; OpenVINO compiles again and rewrites the blob.
    (In a read-only directory the same blob makes ``compile_model`` raise: it cannot delete it.)"""
    blob = next(baked_real.glob("*.blob"))
    writable = tmp_path / "rw"
    writable.mkdir()
    (writable / blob.name).write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])
    from_cache, _ = _load(real_model, writable)
    assert from_cache is False
    # Rewritten whole; not byte-identical: the blob records the compile properties (streams differ here).
    assert (writable / blob.name).stat().st_size > 0.99 * blob.stat().st_size
