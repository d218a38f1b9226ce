"""Model forms: the files a backend can run, made ahead of time from the model as shipped.

A form is named by a short string (`Candidate.form` in `app.tune.manifest`). ``onnx`` is the model file
itself; other forms are derived from it once (at tuning or image build time) into the writable cache
directory, keyed by the source model's sha256 and the runtime version that made them, and kept only if they
pass the output check (`app.tune.outputcheck`) when the tuner measures them.

- ``ir``: OpenVINO's own format (``model.xml`` + ``model.bin``), read once from the ONNX file and saved
  without weight compression, so a start reads the graph instead of converting the ONNX file
  and maps the weights from the ``.bin`` (OpenVINO only: ONNX Runtime cannot read it).

- ``dequant``: the shipped dynamic-int8 export with its weights dequantized once to plain f32 MatMul, Conv
  and LSTM (`app.forms.dequantize`), saved as an IR. OpenVINO runs the export's run-time quantization as
  about a thousand element-wise ops; without them it runs faster than ONNX Runtime where the shipped file ran
  slower, at a much lower peak of memory (docs/performance.md). Its harmonic source's running phase is also
  rewritten in fixed point (`app.forms.phase`), which lets OpenVINO's bf16 hint keep the voice; the form's
  directory is ``dequant.2`` since.

- ``dequant16``: the same graph with its weights stored as f16 (``compress_to_fp16``), for OpenVINO's bf16
  hint, which rounds every weight to bf16 anyway (8 bits of mantissa against f16's 11: storing them in f16
  first changes nothing the bf16 kernels see beyond f16's own rounding). The CPU plugin keeps the f16 weights
  and its own bf16 copies instead of f32 ones: the inference process holds less heap and less mapped file, at
  the same speed within the noise (docs/performance.md). Its every ``Sin`` is a polynomial in element-wise
  operations (`app.forms.sines`: the CPU plugin has no compiled ``Sin``) and its upsampling ordinary
  convolutions (`app.forms.polyphase`); its directory is ``dequant16.2`` since.

- ``convgemm``: the shipped export with each stride-1 ``ConvInteger`` as im2col and ``MatMulIntegerToFloat`` on
  int8 weights packed once (`app.forms.convgemm`), saved as ONNX, for ONNX Runtime: the convolutions were most
  of its time, and run faster so (docs/performance.md).

- ``fused``: the ``convgemm`` form with its decoder rewritten for the CPU (`app.forms.fused`): AdaIN and Snake in
  fewer passes, the activations kept channels last between the convolutions, the STFT as a ``Conv`` and each im2col
  as one ``Gather``, for ONNX Runtime.

A derived form lives in ``<writable>/forms/<source sha256[:16]>/<form>-ov<version>/`` next to a
``form.json`` recording what it was made from and the sha256 of its files (`digest`), which keys its
compile cache: the form is a model file of its own, not the shipped one. It is made in a sibling directory
and renamed into place, so a crash mid-make leaves nothing a later start would trust, and two processes
making it at once both end up with one whole form.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from app.forms import modelfile

log = logging.getLogger(__name__)

ONNX = "onnx"
IR = "ir"
DEQUANT = "dequant"
DEQUANT16 = "dequant16"
CONVGEMM = "convgemm"
FUSED = "fused"
FORMS: tuple[str, ...] = (ONNX, IR, DEQUANT, DEQUANT16, CONVGEMM, FUSED)
"""Every form this version knows."""

OPENVINO_ONLY: frozenset[str] = frozenset({IR, DEQUANT, DEQUANT16})
"""Forms only OpenVINO can run."""

ONNXRUNTIME_ONLY: frozenset[str] = frozenset({CONVGEMM, FUSED})
"""Forms only ONNX Runtime runs (com.microsoft operators)."""

RECORD = "form.json"
CHECK = "check.json"
"""The output check's verdict on a form, where one was made for it (`record_check`)."""
MODEL = "model.xml"
ONNX_MODEL = "model.onnx"
"""A derived form's file: OpenVINO's IR, or an ONNX graph for the forms ONNX Runtime runs."""


class UnknownForm(ValueError):
    """A manifest or a setting names a form this version cannot make."""


def path(form: str, model_path: Path, writable: Path, model_sha256: str, *,
         read_only: Sequence[Path | None] = ()) -> Path:
    """The file of ``form`` for the model at ``model_path`` (made on first use where it is derived).

    ``model_sha256`` is the source model's (hashed here when empty): it names the form's directory, so a
    form made from another model is never picked up. A whole form already under one of ``read_only`` (the
    image's baked cache, a read-only cache directory) is used from there; else it is made under ``writable``."""
    if form == ONNX:
        return model_path
    _known(form)  # before the model is hashed
    digest = model_sha256 or modelfile.sha256_of(model_path)
    made = find(form, writable, digest, read_only=read_only)
    if made is not None:
        return made
    directory = writable / _relative(form, digest)
    _make_isolated(form, model_path, digest, directory)
    return directory / _file(form)


def find(form: str, writable: Path, model_sha256: str, *, read_only: Sequence[Path | None] = ()) -> Path | None:
    """The file of a derived ``form`` already made whole for the model whose sha256 is ``model_sha256``, under one
    of ``read_only`` or ``writable`` (as `path` looks), or None: nothing is made."""
    relative = _relative(form, model_sha256)
    for root in [r for r in read_only if r is not None] + [writable]:
        if _complete(root / relative):
            return root / relative / _file(form)
    return None


def _known(form: str) -> None:
    if form not in _MAKERS:
        raise UnknownForm(f"unknown model form {form!r} (known: {', '.join(FORMS)})")


def _relative(form: str, digest: str) -> Path:
    _known(form)
    return Path("forms") / digest[:16] / _dirname(form)


def _file(form: str) -> str:
    return ONNX_MODEL if form in ONNXRUNTIME_ONLY else MODEL


def _make_isolated(form: str, source: Path, digest: str, directory: Path) -> None:
    """`_make` in a process of its own: the rewrite holds the whole graph in protobuf and numpy (about 1.8 GB
    at its peak here), memory a server or the tuner would otherwise keep as heap for the rest of its life."""
    made = subprocess.run([sys.executable, "-m", "app.forms.store", form, str(source), digest, str(directory)],
                          capture_output=True, text=True)
    if made.returncode != 0 or not _complete(directory):
        last = (made.stderr.strip().splitlines() or [f"exit status {made.returncode}"])[-1][:300]
        raise RuntimeError(f"could not make model form {form}: {last}")
    for line in made.stderr.strip().splitlines()[-2:]:
        log.info("%s", line)


def digest(form_path: Path) -> str | None:
    """The sha256 over a derived form's files, as recorded when it was made; ``None`` for a file that is
    not a derived form (the shipped model or a user's own)."""
    try:
        record = json.loads((form_path.parent / RECORD).read_text())
    except (OSError, ValueError):
        return None
    value = record.get("sha256") if isinstance(record, dict) else None
    return str(value) if value and form_path.name in (MODEL, ONNX_MODEL) else None


def checked(form_path: Path, writable: Path) -> dict[str, Any] | None:
    """The output check's verdict recorded for the derived form at ``form_path`` (`record_check`), or None."""
    for place in _check_places(form_path, writable):
        try:
            verdict = json.loads(place.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(verdict, dict):
            return verdict
    return None


def record_check(form_path: Path, writable: Path, verdict: dict[str, Any]) -> Path:
    """Keep ``verdict`` beside the form, or under ``writable`` where the form's directory is read-only (a form baked
    into the image), keyed by the form's digest: the check runs once per form, not once per start."""
    for place in _check_places(form_path, writable):
        try:
            place.parent.mkdir(parents=True, exist_ok=True)
            partial = place.with_name(f".{place.name}.{os.getpid()}")
            partial.write_text(json.dumps(verdict, indent=2) + "\n")
            os.replace(partial, place)
            return place
        except OSError:
            continue
    raise OSError(f"nowhere writable to record the output check of {form_path}")


def _check_places(form_path: Path, writable: Path) -> list[Path]:
    return [form_path.parent / CHECK, writable / "forms" / "checks" / f"{digest(form_path) or 'unknown'}.json"]


def _complete(directory: Path) -> bool:
    """Whether ``directory`` holds a whole form: its record names files that are there, at their sizes."""
    try:
        record = json.loads((directory / RECORD).read_text())
        return all((directory / name).stat().st_size == size for name, size in record["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _make(form: str, maker: Callable[[Path, Path], None], source: Path, source_sha256: str,
          directory: Path) -> None:
    started = time.monotonic()
    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = directory.with_name(f".{directory.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        maker(source, partial)
        files = {p.name: p.stat().st_size for p in sorted(partial.iterdir()) if p.is_file()}
        record = {"form": form, "source": str(source), "source_sha256": source_sha256,
                  "openvino": _openvino_version(), "files": files, "sha256": _files_digest(partial, files),
                  "made_s": round(time.monotonic() - started, 1)}
        (partial / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if directory.exists() and not _complete(directory):
            shutil.rmtree(directory, ignore_errors=True)  # a damaged form is made again
        try:
            os.rename(partial, directory)
        except OSError:
            if not _complete(directory):
                raise
            log.info("model form %s: another process made %s first; using it", form, directory)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    log.info("model form %s made from %s in %.1f s: %s", form, source, time.monotonic() - started, directory)


def _files_digest(directory: Path, files: dict[str, int]) -> str:
    hasher = hashlib.sha256()
    for name in sorted(files):
        hasher.update(name.encode() + b"\0")
        with open(directory / name, "rb") as handle:
            hasher.update(hashlib.file_digest(handle, "sha256").digest())
    return hasher.hexdigest()


def _dirname(form: str) -> str:
    """The directory a derived form's files live in, below its source's: named by the form, its maker's revision
    and the OpenVINO version that made it."""
    return f"{form}{_REVISIONS.get(form, '')}-ov{_openvino_version()}"


def _openvino_version() -> str:
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        return "none"


def _make_ir(source: Path, directory: Path) -> None:
    import openvino as ov

    # read_model, not convert_model: the graph convert_model makes (its front-end fusions: 12 attention
    # blocks into ScaledDotProductAttention, more MVN) fails on the second input length it sees ("Input shape
    # dimension equal 14 cannot be broadcasted ... to 19", openvino 2026.4.1), while read_model's is the graph
    # compile_model builds from the ONNX file itself (same audio, bit for bit). save_model would halve f32
    # weights to f16 by default, which changes the audio: keep them as they are.
    ov.save_model(ov.Core().read_model(str(source)), str(directory / MODEL), compress_to_fp16=False)


def _make_dequant(source: Path, directory: Path, *, f16: bool = False) -> None:
    import openvino as ov

    from app.forms.dequantize import dequantize

    staged = directory / "dequantized.onnx"
    counts = dequantize(source, staged)
    model = ov.Core().read_model(str(staged))
    if f16:
        counts.update(_bf16_rewrites(model))
    log.info("model form %s: rewrote %s", DEQUANT16 if f16 else DEQUANT, _listed(counts))
    ov.save_model(model, str(directory / MODEL), compress_to_fp16=f16)
    staged.unlink()


def _make_dequant16(source: Path, directory: Path) -> None:
    """From the ``dequant`` form beside it when that is already made (a read, a rewrite and a save, about 1 s),
    else from the source (the dequantization again, about 5 s)."""
    import openvino as ov

    # ``directory`` is the partial one, in the directory the finished forms of this source share.
    sibling = directory.parent / _dirname(DEQUANT)
    if not _complete(sibling):
        _make_dequant(source, directory, f16=True)
        return
    model = ov.Core().read_model(str(sibling / MODEL))
    log.info("model form %s: from %s, rewrote %s", DEQUANT16, sibling, _listed(_bf16_rewrites(model)))
    ov.save_model(model, str(directory / MODEL), compress_to_fp16=True)


def _bf16_rewrites(model: Any) -> dict[str, int]:
    """The bf16 form's rewrites for OpenVINO's CPU plugin: ``Sin`` as polynomials (`app.forms.sines`) and the
    upsampling as ordinary convolutions (`app.forms.polyphase`). Not the f32 form's: there the polynomials made
    OpenVINO no faster (docs/experiments.md), and f32 OpenVINO is no candidate the tuner picks anywhere."""
    from app.forms import polyphase, sines

    return sines.rewrite(model) | polyphase.rewrite(model)


def _make_convgemm(source: Path, directory: Path) -> None:
    from app.forms import convgemm

    _make_gemm_form(CONVGEMM, convgemm.rewrite, source, directory)


def _make_fused(source: Path, directory: Path) -> None:
    from app.forms import fused

    _make_gemm_form(FUSED, fused.rewrite, source, directory)


def _make_gemm_form(form: str, rewrite: Callable[[Path, Path], dict[str, int]], source: Path, directory: Path) -> None:
    """A form whose rewrite starts by making the convolutions GEMMs (`app.forms.convgemm`)."""
    counts = rewrite(source, directory / ONNX_MODEL)
    if not counts.get("ConvInteger"):
        # A float export (or another quantizer's) has nothing to rewrite: the form would be the model again, and
        # the tuner would spend two trials measuring it twice.
        raise ValueError(f"{source.name} has no dynamically quantized convolution to rewrite")
    log.info("model form %s: rewrote %s", form, _listed(counts))


def _listed(counts: dict[str, int]) -> str:
    """What a maker rewrote, for its log line: ``3 sin, 48 sin squared``."""
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


_MAKERS: dict[str, Callable[[Path, Path], None]] = {IR: _make_ir, DEQUANT: _make_dequant, DEQUANT16: _make_dequant16,
                                                    CONVGEMM: _make_convgemm, FUSED: _make_fused}
_REVISIONS = {DEQUANT: ".2", DEQUANT16: ".2"}
"""A maker that changes what it makes names its forms anew, so that a form made before is not taken for one of
today's (``dequant.2``: the harmonic source's phase in fixed point, `app.forms.phase`; ``dequant16.2``: the
bf16 rewrites, `_bf16_rewrites`)."""


def main(argv: list[str]) -> int:
    """``python -m app.forms.store FORM SOURCE SHA256 DIRECTORY``: make one form (run by `path`)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    form, source, digest, directory = argv
    _make(form, _MAKERS[form], Path(source), digest, Path(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
