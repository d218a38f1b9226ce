"""What a release evicts when the inference process is gone: every file it may have read."""

from __future__ import annotations

from pathlib import Path

from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import Spec
from app.settings import Settings
from app.sizing import PoolShape


def test_files_without_a_process_name_the_served_copy_its_source_and_the_caches(tmp_path: Path) -> None:
    source, copy = tmp_path / "models" / "m.onnx", tmp_path / "models" / "m.timed.onnx"
    blob = tmp_path / "cache" / "openvino" / "x.blob"
    for path in (source, copy, blob):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    settings = Settings.from_env({}, cache_dir=tmp_path / "cache")
    spec = Spec(settings=settings, model_path=copy, shape=PoolShape(1, 1), writable=tmp_path / "cache",
                bridge_path=source)
    files = ProcessRuntime(spec).files()  # no process started: nothing listed, everything found
    assert copy in files and blob in files
    # The export the copy was made from: the bridge loads it, and a start that copied or checked it
    # read it (CI once found 16 MB of it still cached after a release).
    assert source in files
    assert len(files) == len(set(files))
