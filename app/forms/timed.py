"""A copy of the model that also outputs the duration Kokoro predicts for each token.

The kokoro-onnx export computes one integer duration per input token inside its graph (the
predictor's ``Round``, then ``Clip`` and ``Cast`` to int64, before the alignment is built; one unit
is 600 samples, 25 ms) but outputs only the audio. Word timestamps need that tensor, so this module
makes ``<stem>.timed.onnx``: the original bytes, unchanged, followed by a few bytes that declare the
tensor a second graph output. A protobuf parser merges a repeated embedded message into the first
(``graph``) and appends to its repeated ``output`` field, so the graph is the same graph with one
more output: nothing is re-serialized, no ``onnx`` package is needed, and the audio stays
bit-identical (tested on ONNX Runtime). The copy is a different file (path, size, sha256), so every
compile cache keyed on the model keys on it.

A model without the known tensor (a user's own export) gets no timed copy: it still speaks, and
word timestamps are unavailable for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

DURATION_TENSORS = ("/encoder/Cast_output_0",)
"""Names of the per-token duration tensor in known exports (kokoro-onnx v1.0: int8, fp16, fp32)."""
_INT64 = 7
"""``onnx.TensorProto.INT64``."""


def is_duration_output(name: str) -> bool:
    """Whether a graph output of this name is the per-token durations (ours, or an export's own)."""
    return name in DURATION_TENSORS or "duration" in name.lower()


def duration_tensor(model: Path) -> str | None:
    """The name of the duration tensor in ``model``, if it is an export this module knows."""
    with open(model, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for name in DURATION_TENSORS:
            # A node's output is a length-prefixed string (field 2 of NodeProto): look for exactly that.
            if data.find(b"\x12" + _varint(len(name)) + name.encode()) >= 0:
                return name
    return None


def derive(model: Path, directory: Path) -> Path | None:
    """``<directory>/<stem>.timed.onnx`` for ``model`` (made once, atomically), or None when ``model``
    has no known duration tensor. Remade when the source's size or mtime change."""
    target = directory / f"{model.stem}.timed.onnx"
    if digest(target, model) is not None:
        return target
    name = duration_tensor(model)
    if name is None:
        log.info("model %s has no known duration tensor: no word timestamps", model)
        return None
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".timed-")
    hasher = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, open(model, "rb") as source:
            while block := source.read(1 << 20):
                hasher.update(block)
                out.write(block)
            fragment = output_fragment(name)
            hasher.update(fragment)
            out.write(fragment)
            out.flush()
            os.fsync(out.fileno())
            # Nothing reads the source again (the runtimes load the copy): its pages would only sit in the
            # page cache, which platforms that meter cgroup memory bill.
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(source.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The copy's own sha256, recorded for the keys that name the model (compile cache, tuning, forms),
    # so that no start has to hash 92-310 MB to find them.
    _marker(target).write_text(json.dumps({"source": _stamp(model), "sha256": hasher.hexdigest()}) + "\n")
    log.info("made %s: %s with its duration tensor %s as a second output", target, model.name, name)
    return target


def find(model: Path, directories: Sequence[Path], writable: Path) -> Path | None:
    """The timed copy of ``model``: one made before in ``directories`` (a read-only cache, the image's
    model directory), else made in ``writable``; None when ``model`` has no known duration tensor, or
    when the copy cannot be written (the model then speaks without word timestamps)."""
    for directory in directories:
        found = directory / f"{model.stem}.timed.onnx"
        if digest(found, model) is not None:
            return found
    try:
        return derive(model, writable)
    except OSError as exc:
        log.warning("could not make the timed copy of %s in %s (%s): no word timestamps", model, writable, exc)
        return None


def digest(copy: Path, source: Path | None = None) -> str | None:
    """The sha256 of a timed copy, as recorded when it was made; None when ``copy`` is not a timed copy
    (or, given ``source``, not one made from that file as it is now)."""
    try:
        record = json.loads(_marker(copy).read_text())
        if not copy.is_file() or not isinstance(record, dict):
            return None
        if source is not None and record.get("source") != _stamp(source):
            return None
        value = record.get("sha256")
    except (OSError, ValueError):
        return None
    return str(value) if value else None


def _marker(copy: Path) -> Path:
    return copy.with_name(copy.name + ".source")


def output_fragment(name: str) -> bytes:
    """``ModelProto{graph: GraphProto{output: [ValueInfoProto{name, type: int64 tensor}]}}``, serialized."""
    tensor_type = _field(1, _varint(_INT64), wire=0)  # TypeProto.Tensor.elem_type
    value_type = _field(1, tensor_type)  # TypeProto.tensor_type
    value_info = _field(1, name.encode()) + _field(2, value_type)  # ValueInfoProto.name, .type
    return _field(7, _field(12, value_info))  # ModelProto.graph, GraphProto.output


def _field(number: int, payload: bytes, *, wire: int = 2) -> bytes:
    key = _varint(number << 3 | wire)
    return key + payload if wire == 0 else key + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()} {st.st_size} {st.st_mtime_ns}"


def main(argv: list[str]) -> int:
    """``python -m app.forms.timed MODEL DIRECTORY``: make the timed copy of MODEL in DIRECTORY (the image
    build runs it, so the copy is compiled ahead of time) and print the file the server will run."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    model, directory = Path(argv[0]), Path(argv[1])
    sys.stdout.write(f"{derive(model, directory) or model}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
