"""What a release evicts when the inference process is gone: every file it may have read."""

from __future__ import annotations

from pathlib import Path

from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import Spec
from app.settings import Settings
from app.sizing import PoolShape


def test_files_without_a_process_name_the_served_copy_and_the_caches(tmp_path: Path) -> None:
    copy = tmp_path / "models" / "m.timed.onnx"
    blob = tmp_path / "cache" / "openvino" / "x.blob"
    graph = tmp_path / "cache" / "onnxruntime" / "m.onnx"
    for path in (copy, blob, graph):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    settings = Settings.from_env({}, cache_dir=tmp_path / "cache")
    spec = Spec(settings=settings, model_path=copy, shape=PoolShape(1, 1), writable=tmp_path / "cache")
    files = ProcessRuntime(spec).files()  # no process started: nothing listed, everything found
    assert copy in files and blob in files and graph in files  # either runtime's files, whichever served
    assert len(files) == len(set(files))
