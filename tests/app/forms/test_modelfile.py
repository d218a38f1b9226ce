"""The embedded model is assembled and verified; a deployment's own model and voices files work."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.forms import modelfile
from app.http.server import create_app
from app.settings import Settings
from app.voices import VoiceBank


def test_assembled_model_matches_the_published_hash(cache_dir: Path) -> None:
    path = modelfile.resolve(None, [cache_dir / "models"])
    assert modelfile.sha256_of(path) == modelfile.expected_sha256()
    assert path.stat().st_size == 92_361_271


def test_a_corrupted_model_is_assembled_again(tmp_path: Path, cache_dir: Path) -> None:
    good = modelfile.resolve(None, [cache_dir / "models"])
    target = tmp_path / "models" / modelfile.EMBEDDED_NAME
    target.parent.mkdir()
    shutil.copyfile(good, target)
    with open(target, "r+b") as handle:
        handle.seek(1000)
        handle.write(b"garbage")
    assert modelfile.sha256_of(modelfile.assemble(tmp_path / "models")) == modelfile.expected_sha256()
    assert not list((tmp_path / "models").glob(".assemble-*"))  # no temporary file left behind


def test_a_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(modelfile.ModelFileError, match="nope.onnx"):
        modelfile.resolve(tmp_path / "nope.onnx", [tmp_path])


def test_a_model_with_the_wrong_checksum_is_refused_by_name(tmp_path: Path) -> None:
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"not the model")
    with pytest.raises(modelfile.ModelFileError, match=r"mine\.onnx has sha256 [0-9a-f]{64}, expected 0{64}"):
        modelfile.resolve(model, [tmp_path], "0" * 64)
    good = modelfile.sha256_of(model)
    assert modelfile.resolve(model, [tmp_path], good.upper()) == model.resolve()


def test_a_verified_model_in_a_read_only_directory_is_used_as_it_is(tmp_path: Path, cache_dir: Path) -> None:
    models = cache_dir / "models"
    modelfile.resolve(None, [models])
    assert modelfile.verified(models)
    assert modelfile.resolve(None, [models, tmp_path / "elsewhere"]) == (models / modelfile.EMBEDDED_NAME).resolve()
    assert not (tmp_path / "elsewhere").exists()  # nothing assembled a second time


def test_official_file_names_load_in_place_of_the_embedded_ones(tmp_path: Path, cache_dir: Path) -> None:
    """A deployment supplies kokoro-v1.0.onnx and voices-v1.0.bin; built here from what is installed."""
    model = tmp_path / "kokoro-v1.0.onnx"
    shutil.copyfile(modelfile.resolve(None, [cache_dir / "models"]), model)
    installed = VoiceBank.load(None)
    english = {"af_heart": installed.resolve("af_heart").style_for(510).repeat(510, axis=0)[:, None, :],
               "bf_emma": np.stack([installed.resolve("am_michael").style_for(n) for n in range(1, 511)])}
    voices = tmp_path / "voices-v1.0.bin"
    with open(voices, "wb") as handle:
        np.savez(handle, **english)
    settings = Settings(cache_dir=tmp_path / "cache", model_path=model, voices_path=voices, backend="onnxruntime",
                        quiet_window_s=0)
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/audio/voices?legacy=true").json()["voices"] == ["af_heart", "bf_emma"]
        for voice in ("af_heart", "bf_emma"):
            response = client.post("/v1/audio/speech", json={"input": "Hello.", "voice": voice,
                                                             "response_format": "pcm"})
            assert response.status_code == 200 and len(response.content) > 24000
        assert client.post("/v1/audio/speech", json={"input": "Hello.", "voice": "am_michael"}).status_code == 400
