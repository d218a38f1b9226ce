"""Model forms: the files a backend can run, made ahead of time from the model as shipped.

A form is named by a short string (`Candidate.form` in `app.runtime.tuning`). ``onnx`` is the model file
itself; other forms are derived from it once (at tuning or image build time) into the writable cache
directory, keyed by the source model's sha256, and kept only if they pass the output check
(`app.runtime.outputcheck`) when the tuner measures them.
"""

from __future__ import annotations

from pathlib import Path

ONNX = "onnx"
FORMS: tuple[str, ...] = (ONNX,)
"""Every form this version knows."""


class UnknownForm(ValueError):
    """A manifest or a setting names a form this version cannot make."""


def path(form: str, model_path: Path, writable: Path, model_sha256: str) -> Path:
    """The file of ``form`` for the model at ``model_path`` (made on first use where it is derived)."""
    if form == ONNX:
        return model_path
    raise UnknownForm(f"unknown model form {form!r} (known: {', '.join(FORMS)})")
